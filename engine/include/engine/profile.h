// The machine as the planner sees it: what was detected (CPU, memory, GPUs,
// the disk holding the model) and what was measured (memory bandwidth, disk
// read rate, host → device copy rate). Measurements take a few seconds, so
// they are cached in ~/.cache/moelsp/profile.json under a key naming the
// hardware, and redone on --recalibrate or when the hardware changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moelsp {

struct CpuProfile {
  std::string vendor, model;
  int logical = 0, physical = 0;  // hardware threads, cores
  int sockets = 1, numa_nodes = 1;
  bool avx2 = false, avx512f = false, avx512_vnni = false, avx512_bf16 = false, amx = false;
  uint64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per core (L1, L2) and per package (L3, all slices)
  std::string kernel_isa;                              // the level the CPU kernels run at
};

struct MemoryProfile {
  uint64_t total = 0, available = 0;  // /proc/meminfo MemTotal, MemAvailable
  uint64_t swap = 0;
  uint64_t cgroup_limit = 0;  // memory.max / memory.limit_in_bytes of this process's cgroup; 0: none
  uint64_t cgroup_usage = 0;  // its current charge (page cache included)
  // What this process may plan to use: available memory, capped by the
  // cgroup limit where there is one.
  uint64_t usable() const;
};

struct GpuProfile {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  uint64_t vram_total = 0, vram_free = 0;
  int sms = 0, bus_bits = 0;
  double h2d_gbs = 0;  // measured pinned host → device rate (0: not measured)
};

struct DiskProfile {
  std::string path;    // the file or directory looked at (the model)
  std::string device;  // block device name ("vda", "nvme0n1"); empty when unknown (tmpfs, overlay)
  bool rotational = false;
  double read_gbs = 0;  // measured sequential read rate bypassing the page cache (0: not measured)
};

struct HwProfile {
  CpuProfile cpu;
  MemoryProfile mem;
  std::vector<GpuProfile> gpus;
  std::string gpu_error;  // a CUDA driver/device error (not fatal: the plan is then for the CPU)
  bool cuda_build = false;
  DiskProfile disk;
  double mem_bw_gbs = 0;  // measured read bandwidth of main memory, all cores
  bool calibrated = false;
  bool from_cache = false;    // measurements read from the cache file
  std::string calibrated_at;  // ISO date of the measurements
  std::string cache_error;    // the cache file could not be written (measurements still used)

  // Names the hardware the measurements belong to (CPU, cores, memory size,
  // GPUs); a cached profile under another key is measured again.
  std::string key() const;
  std::string to_json() const;
  std::string to_text() const;
};

struct ProfileOptions {
  std::string model_path;    // the disk profiled is the one holding this file
  bool calibrate = true;     // false: detection only (fast; tests)
  bool recalibrate = false;  // ignore the cache
  std::string cache_path;    // default: profile_cache_path()
  int threads = 0;           // for the bandwidth test; 0: physical cores
};

// $XDG_CACHE_HOME/moelsp/profile.json, else ~/.cache/moelsp/profile.json.
std::string profile_cache_path();

// Detects the hardware, then takes measurements from the cache when their
// key matches (and the disk was measured) or measures and stores them. Never
// throws for missing /sys files or a broken GPU driver: what cannot be known
// is left 0/empty and said in to_text().
HwProfile hardware_profile(const ProfileOptions& opt = {});

// Measures the sequential read rate of `path`'s disk by reading up to
// `max_bytes` of the file with O_DIRECT (page cache bypassed); falls back to
// dropping the file's cached pages first. Returns GB/s, 0 when not possible.
double measure_disk_read_gbs(const std::string& path, size_t max_bytes = size_t(256) << 20);

}  // namespace moelsp
