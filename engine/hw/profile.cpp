// Hardware detection (hwloc for the topology, cpuid for features, /proc and
// /sys for memory, cgroups and disks, the CUDA runtime for GPUs) and the
// calibration cache.
#include "engine/profile.h"

#include <cpuid.h>
#include <fcntl.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/hw.h"
#include "kernels/cuda.h"
#include "kernels/isa.h"
#include "util/json_limits.h"

namespace moelsp {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// ---- CPU ---------------------------------------------------------------------

void detect_cpu_features(CpuProfile& c) {
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &cx, 4);
    c.vendor = v;
  }
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      unsigned r[4];
      __get_cpuid(0x80000002 + i, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * i, r, 16);
    }
    c.model = brand;
    while (!c.model.empty() && c.model.back() == ' ') c.model.pop_back();
    c.model.erase(0, c.model.find_first_not_of(' '));
  }
  if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
    c.avx2 = b & (1u << 5);
    c.avx512f = b & (1u << 16);
    c.avx512_vnni = cx & (1u << 11);
    c.amx = (d & (1u << 24)) && (d & (1u << 25));  // AMX-TILE + AMX-INT8
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) c.avx512_bf16 = a1 & (1u << 5);
  }
  c.kernel_isa = std::string(cpu_kernel_isa());
}

void detect_topology(CpuProfile& c) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return;
  if (hwloc_topology_load(topo) == 0) {
    const auto count = [&](hwloc_obj_type_t t) { return hwloc_get_nbobjs_by_type(topo, t); };
    c.logical = std::max(0, count(HWLOC_OBJ_PU));
    c.physical = std::max(0, count(HWLOC_OBJ_CORE));
    c.sockets = std::max(1, count(HWLOC_OBJ_PACKAGE));
    c.numa_nodes = std::max(1, count(HWLOC_OBJ_NUMANODE));
    const auto cache = [&](hwloc_obj_type_t t) -> uint64_t {
      hwloc_obj_t o = hwloc_get_obj_by_type(topo, t, 0);
      return o && o->attr ? uint64_t(o->attr->cache.size) : 0;
    };
    c.l1d_bytes = cache(HWLOC_OBJ_L1CACHE);
    c.l2_bytes = cache(HWLOC_OBJ_L2CACHE);
    c.l3_bytes = cache(HWLOC_OBJ_L3CACHE);
  }
  hwloc_topology_destroy(topo);
  if (c.physical <= 0) c.physical = physical_core_count();
  if (c.logical <= 0) c.logical = int(sysconf(_SC_NPROCESSORS_ONLN));
}

// ---- memory ------------------------------------------------------------------

uint64_t parse_u64(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  return end == s.c_str() ? 0 : uint64_t(v);
}

void detect_memory(MemoryProfile& m) {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    uint64_t kib = 0;
    std::string unit;
    in >> kib >> unit;
    if (key == "MemTotal:") m.total = kib << 10;
    if (key == "MemAvailable:") m.available = kib << 10;
    if (key == "SwapTotal:") m.swap = kib << 10;
  }
  // The cgroup of this process: v2 ("0::/path") or v1's memory controller.
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    uint64_t limit = 0, usage = 0;
    if (ctrl.empty() && line.compare(0, a, "0") == 0) {
      const std::string dir = "/sys/fs/cgroup" + path;
      const std::string v = read_first_line(dir + "/memory.max");
      if (!v.empty() && v != "max") limit = parse_u64(v);
      usage = parse_u64(read_first_line(dir + "/memory.current"));
    } else if (ctrl.find("memory") != std::string::npos) {
      const std::string dir = "/sys/fs/cgroup/memory" + path;
      limit = parse_u64(read_first_line(dir + "/memory.limit_in_bytes"));
      usage = parse_u64(read_first_line(dir + "/memory.usage_in_bytes"));
    }
    if (limit > 0 && limit < (uint64_t(1) << 60) && (m.cgroup_limit == 0 || limit < m.cgroup_limit)) {
      m.cgroup_limit = limit;
      m.cgroup_usage = usage;
    }
  }
}

// ---- disk --------------------------------------------------------------------

void detect_disk(DiskProfile& d, const std::string& path) {
  d.path = path;
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return;
  // /sys/dev/block/MAJ:MIN is the partition or the whole disk; a partition's
  // queue settings are its parent's.
  std::error_code ec;
  fs::path dev = fs::canonical(fmt::format("/sys/dev/block/{}:{}", major(st.st_dev), minor(st.st_dev)), ec);
  if (ec) return;
  if (fs::exists(dev / "partition")) dev = dev.parent_path();
  d.device = dev.filename().string();
  d.rotational = read_first_line((dev / "queue/rotational").string()) == "1";
}

// ---- the cache file ----------------------------------------------------------

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string gib(uint64_t b) { return fmt::format("{:.1f} GiB", double(b) / double(1ull << 30)); }

}  // namespace

uint64_t MemoryProfile::usable() const {
  uint64_t u = available ? available : total;
  if (cgroup_limit) u = std::min(u, cgroup_limit > cgroup_usage ? cgroup_limit : 0);
  return u;
}

std::string HwProfile::key() const {
  std::string k = fmt::format("{}|{}|{}c/{}t|{}MiB", cpu.vendor, cpu.model, cpu.physical, cpu.logical, mem.total >> 20);
  for (const GpuProfile& g : gpus) k += fmt::format("|gpu{}:{}:{}MiB", g.index, g.name, g.vram_total >> 20);
  return k;
}

std::string profile_cache_path() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/moelsp/profile.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/moelsp/profile.json";
  return "";
}

double measure_disk_read_gbs(const std::string& path, size_t max_bytes) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (1 << 20)) return 0;
  const size_t chunk = size_t(4) << 20;
  const size_t total = std::min<size_t>(max_bytes, size_t(st.st_size) / chunk * chunk);
  if (total == 0) return 0;
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  const bool direct = fd >= 0;
  if (!direct) {
    // tmpfs and some overlays refuse O_DIRECT: drop the cached pages instead
    // (reads then come from the device where the kernel honours it).
    fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return 0;
    posix_fadvise(fd, 0, off_t(total), POSIX_FADV_DONTNEED);
  }
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, chunk) != 0) {
    close(fd);
    return 0;
  }
  // Start past the header (often cached) at a 4 KiB-aligned offset when the file allows.
  off_t off = st.st_size > off_t(total + (64 << 20)) ? off_t(64 << 20) : 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0;
  while (done < total) {
    const ssize_t r = pread(fd, buf, chunk, off + off_t(done));
    if (r <= 0) break;
    done += size_t(r);
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(buf);
  close(fd);
  return done && sec > 0 ? double(done) / sec / 1e9 : 0;
}

namespace {

// The calibration cache for this machine (its key matches), or null.
json read_calibration(const std::string& cache, const HwProfile& p) {
  if (cache.empty()) return json();
  std::ifstream in(cache);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json cached;
  if (in && json_limit_problem(text).empty()) cached = json::parse(text, nullptr, false);
  if (cached.is_discarded() || !cached.is_object() || cached.value("key", "") != p.key()) return json();
  return cached;
}

// Memory bandwidth and each GPU's host-to-device rate: measured (the cache
// entry they make), or read from the cache. Returns whether it measured.
bool calibrate_memory(const ProfileOptions& opt, HwProfile& p, json& cached) {
  if (cached.is_object() && cached.contains("memBwGBs")) {
    p.mem_bw_gbs = cached.value("memBwGBs", 0.0);
    p.calibrated_at = cached.value("date", "");
    if (auto g = cached.find("h2dGBs"); g != cached.end() && g->is_array())
      for (size_t i = 0; i < p.gpus.size() && i < g->size(); ++i) p.gpus[i].h2d_gbs = (*g)[i].get<double>();
    p.from_cache = true;
    return false;
  }
  // 512 MiB outruns any cache; under a small memory limit an eighth of what is usable still does.
  const size_t buf = std::clamp<size_t>(size_t(p.mem.usable() / 8), size_t(64) << 20, size_t(512) << 20);
  p.mem_bw_gbs = measure_memory_bandwidth_gbs(opt.threads > 0 ? opt.threads : p.cpu.physical, buf);
  for (GpuProfile& g : p.gpus) {
    std::string err;
    g.h2d_gbs = kernels::cuda::host_to_device_gbs(g.index, size_t(256) << 20, &err);
    if (!err.empty() && p.gpu_error.empty()) p.gpu_error = err;
  }
  p.calibrated_at = today();
  cached = json{{"key", p.key()}, {"date", p.calibrated_at}, {"memBwGBs", p.mem_bw_gbs}, {"disks", json::object()}};
  json h2d = json::array();
  for (const GpuProfile& g : p.gpus) h2d.push_back(g.h2d_gbs);
  cached["h2dGBs"] = h2d;
  return true;
}

// Disks are measured per device, the first time a model is read from one.
// Returns whether it measured.
bool calibrate_disk(const ProfileOptions& opt, HwProfile& p, json& cached) {
  if (p.disk.device.empty()) return false;
  json& disks = cached["disks"];
  if (!disks.is_object()) disks = json::object();
  if (auto it = disks.find(p.disk.device); it != disks.end() && it->is_number()) {
    p.disk.read_gbs = it->get<double>();
    return false;
  }
  if (opt.model_path.empty()) return false;
  p.disk.read_gbs = measure_disk_read_gbs(opt.model_path);
  if (p.disk.read_gbs <= 0) return false;
  disks[p.disk.device] = p.disk.read_gbs;
  return true;
}

void write_calibration(const std::string& cache, const json& cached, HwProfile& p) {
  std::error_code ec;
  fs::create_directories(fs::path(cache).parent_path(), ec);
  const std::string tmp = cache + "." + std::to_string(getpid()) + ".tmp";  // concurrent starts each write their own
  std::ofstream out(tmp);
  out << cached.dump(1) << "\n";
  out.close();
  if (out) fs::rename(tmp, cache, ec);
  if (!out || ec) p.cache_error = fmt::format("cannot write {}: {}", cache, ec ? ec.message() : "write failed");
}

}  // namespace

HwProfile hardware_profile(const ProfileOptions& opt) {
  static std::once_flag isa_note;
  std::call_once(isa_note, [] {
    if (const std::string problem = kernels::isa_override_problem(); !problem.empty()) spdlog::warn("{}", problem);
  });
  HwProfile p;
  detect_cpu_features(p.cpu);
  detect_topology(p.cpu);
  detect_memory(p.mem);
  detect_disk(p.disk, opt.model_path);
  p.cuda_build = kernels::cuda::compiled_in();
  for (const auto& d : kernels::cuda::devices(&p.gpu_error))
    p.gpus.push_back({d.index, d.name, d.cc_major, d.cc_minor, d.total_memory, d.free_memory, d.multiprocessors,
                      d.memory_bus_bits, 0});
  if (!opt.calibrate) return p;
  const std::string cache = opt.cache_path.empty() ? profile_cache_path() : opt.cache_path;
  json cached = opt.recalibrate ? json() : read_calibration(cache, p);
  bool changed = calibrate_memory(opt, p, cached);
  changed = calibrate_disk(opt, p, cached) || changed;
  p.calibrated = true;
  if (changed && !cache.empty()) write_calibration(cache, cached, p);
  return p;
}

std::string HwProfile::to_json() const {
  json gpus_j = json::array();
  for (const GpuProfile& g : gpus)
    gpus_j.push_back({{"index", g.index},
                      {"name", g.name},
                      {"computeCapability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                      {"vramTotal", g.vram_total},
                      {"vramFree", g.vram_free},
                      {"sms", g.sms},
                      {"busBits", g.bus_bits},
                      {"h2dGBs", g.h2d_gbs}});
  json j = {
      {"cpu",
       {{"vendor", cpu.vendor},
        {"model", cpu.model},
        {"logical", cpu.logical},
        {"physical", cpu.physical},
        {"sockets", cpu.sockets},
        {"numaNodes", cpu.numa_nodes},
        {"features",
         {{"avx2", cpu.avx2},
          {"avx512f", cpu.avx512f},
          {"avx512vnni", cpu.avx512_vnni},
          {"avx512bf16", cpu.avx512_bf16},
          {"amx", cpu.amx}}},
        {"cache", {{"l1d", cpu.l1d_bytes}, {"l2", cpu.l2_bytes}, {"l3", cpu.l3_bytes}}},
        {"kernelIsa", cpu.kernel_isa}}},
      {"memory",
       {{"total", mem.total},
        {"available", mem.available},
        {"swap", mem.swap},
        {"cgroupLimit", mem.cgroup_limit},
        {"usable", mem.usable()},
        {"bandwidthGBs", mem_bw_gbs}}},
      {"gpus", gpus_j},
      {"cudaBuild", cuda_build},
      {"disk",
       {{"path", disk.path}, {"device", disk.device}, {"rotational", disk.rotational}, {"readGBs", disk.read_gbs}}},
      {"calibration", {{"done", calibrated}, {"fromCache", from_cache}, {"date", calibrated_at}}},
  };
  if (!gpu_error.empty()) j["gpuError"] = gpu_error;
  return j.dump();
}

std::string HwProfile::to_text() const {
  std::ostringstream o;
  std::string feats;
  for (auto [on, name] : {std::pair{cpu.avx2, "avx2"},
                          {cpu.avx512f, "avx512f"},
                          {cpu.avx512_vnni, "avx512-vnni"},
                          {cpu.avx512_bf16, "avx512-bf16"},
                          {cpu.amx, "amx"}})
    if (on) feats += std::string(feats.empty() ? "" : " ") + name;
  o << fmt::format("cpu     {} ({}), {} cores / {} threads, {} socket(s), {} NUMA node(s)\n", cpu.model, cpu.vendor,
                   cpu.physical, cpu.logical, cpu.sockets, cpu.numa_nodes);
  o << fmt::format("        features: {}; kernels: {}; caches L1d {} KiB, L2 {} KiB, L3 {} MiB\n",
                   feats.empty() ? "none of avx2/avx512" : feats, cpu.kernel_isa, cpu.l1d_bytes >> 10,
                   cpu.l2_bytes >> 10, cpu.l3_bytes >> 20);
  o << fmt::format("memory  {} total, {} available{}{}, measured bandwidth {}\n", gib(mem.total), gib(mem.available),
                   mem.cgroup_limit ? ", cgroup limit " + gib(mem.cgroup_limit) : std::string(),
                   mem.swap ? ", swap " + gib(mem.swap) : std::string(),
                   mem_bw_gbs > 0 ? fmt::format("{:.1f} GB/s", mem_bw_gbs) : std::string("not measured"));
  if (gpus.empty())
    o << "gpu     none" << (cuda_build ? "" : " (built without CUDA)")
      << (gpu_error.empty() ? "" : " — CUDA error: " + gpu_error) << "\n";
  for (const GpuProfile& g : gpus)
    o << fmt::format("gpu {}   {} (cc {}.{}), {} VRAM ({} free), {} SMs, {}-bit bus, host→device {}\n", g.index, g.name,
                     g.cc_major, g.cc_minor, gib(g.vram_total), gib(g.vram_free), g.sms, g.bus_bits,
                     g.h2d_gbs > 0 ? fmt::format("{:.1f} GB/s", g.h2d_gbs) : std::string("not measured"));
  if (!disk.path.empty())
    o << fmt::format("disk    {} ({}{}), read {}\n", disk.device.empty() ? "unknown device" : disk.device,
                     disk.rotational ? "rotational" : "solid-state", disk.device.empty() ? "?" : "",
                     disk.read_gbs > 0 ? fmt::format("{:.2f} GB/s", disk.read_gbs) : std::string("not measured"));
  if (calibrated)
    o << fmt::format("        measurements from {}{}\n", calibrated_at,
                     from_cache ? " (cached; --recalibrate to redo)" : "");
  if (!cache_error.empty()) o << "        " << cache_error << "\n";
  return o.str();
}

}  // namespace moelsp
