#include "weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kernels/repack.h"

namespace moelsp {

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "{";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "}";
}
}  // namespace

namespace {

std::atomic<size_t> g_repacked{0};

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// Memory for a repacked tensor. Large ones are 2 MiB-aligned with transparent
// huge pages: one fault per 2 MiB instead of per 4 KiB (faults were half of a
// 2.4 GB model's repacking time on this VM), and fewer TLB misses when the
// kernels stream it.
void* alloc_repacked(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes < 2 * kHuge) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const size_t n = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, n);
  if (p) madvise(p, n, MADV_HUGEPAGE);
  return p;
}

}  // namespace

size_t repacked_weight_bytes() { return g_repacked.load(); }
uint64_t weights_prepared_bytes() { return repacked_weight_bytes(); }

void repack_dense(Weight& w, bool release_file) {
  static const bool off = [] {
    const char* e = std::getenv("MOELSP_REPACK");
    return e && (std::strcmp(e, "off") == 0 || std::strcmp(e, "0") == 0);
  }();
  // A 3-D tensor (experts) is repacked as one tall matrix: its slices are
  // whole groups, so slice(s) stays where the slice's rows start.
  kernels::MatView src = w.m;
  src.rows *= w.slices;
  if (off || w.m.rows % kernels::kRepackRows || !kernels::repack_supported(src)) return;
  const size_t bytes = kernels::repacked_bytes(src);
  void* p = alloc_repacked(bytes);
  if (!p) throw std::bad_alloc();
  std::shared_ptr<const void> store(p, std::free);
  // The file's pages mapped in one call rather than a fault each (failure is harmless: it faults them in).
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(src.data) / page * page;
  madvise(reinterpret_cast<void*>(b), reinterpret_cast<uintptr_t>(src.data) + size_t(src.rows) * src.row_bytes - b,
          MADV_POPULATE_READ);
  // A byte shuffle bound by memory: large tensors (experts) on every core.
  const int64_t groups = src.rows / kernels::kRepackRows;
  const int64_t n = std::clamp<int64_t>(int64_t(bytes >> 24), 1, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < n; ++t)
    threads.emplace_back([&, t] { kernels::repack_groups(src, p, groups * t / n, groups * (t + 1) / n); });
  kernels::repack_groups(src, p, 0, groups / n);
  for (auto& th : threads) th.join();
  w.m = kernels::repacked_view(src, p);
  w.m.rows = src.rows / w.slices;
  w.store = std::move(store);
  g_repacked += bytes;
  if (!release_file) return;
  // The whole pages inside the tensor: the file's copy is not read again.
  const auto first = (reinterpret_cast<uintptr_t>(src.data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(src.data) + size_t(src.rows) * src.row_bytes) / page * page;
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

Weight WeightLoader::maybe(const std::string& name, std::vector<int64_t> shape) const {
  const auto* t = f_.tensor(name);
  if (!t) return {};
  std::vector<int64_t> got(t->shape.begin(), t->shape.end());
  while (got.size() > 1 && got.back() == 1 && got.size() > shape.size()) got.pop_back();
  if (got != shape)
    throw ModelError(
        fmt::format("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, shape_str(got), shape_str(shape)));
  if (!kernels::matmul_supports(t->type))
    throw ModelError(
        fmt::format("{}: tensor '{}' has type {}, which this build cannot compute with yet (supported: {})", f_.path(),
                    name, kernels::dtype_name(t->type), kernels::matmul_type_names()));
  Weight w;
  w.m.data = f_.tensor_data(*t).data();
  w.m.type = t->type;
  w.m.cols = shape[0];
  w.m.rows = shape.size() > 1 ? shape[1] : 1;
  w.m.row_bytes = *kernels::row_bytes(t->type, uint64_t(shape[0]));
  w.slices = shape.size() > 2 ? shape[2] : 1;
  return w;
}

Weight WeightLoader::get(const std::string& name, std::vector<int64_t> shape) const {
  Weight w = maybe(name, shape);
  if (!w.present()) throw ModelError(fmt::format("{}: missing tensor '{}'", f_.path(), name));
  return w;
}

std::vector<float> WeightLoader::maybe_vec(const std::string& name, int64_t n) const {
  const Weight w = maybe(name, {n});
  if (!w.present()) return {};
  std::vector<float> out(static_cast<size_t>(n));
  kernels::dequantize_row(w.m.type, w.m.data, out.data(), n);
  return out;
}

std::vector<float> WeightLoader::vec(const std::string& name, int64_t n) const {
  auto v = maybe_vec(name, n);
  if (v.empty()) throw ModelError(fmt::format("{}: missing tensor '{}'", f_.path(), name));
  return v;
}

}  // namespace moelsp
