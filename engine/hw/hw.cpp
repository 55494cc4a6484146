#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "../cpu/thread_pool.h"
#include "engine/hw.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace moelsp {

double measure_memory_bandwidth_gbs(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
  ThreadPool pool(std::max(1, threads));
  // Touch every page in parallel first (first-touch placement, no page faults in the timing).
  pool.parallel_for(int64_t(n), [&](int64_t b, int64_t e) { std::fill(buf.begin() + b, buf.begin() + e, 1.0f); });
  const std::vector<float> ones(4096, 1.0f);
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    std::mutex mu;
    double total = 0;  // consumed so the reads cannot be optimised away
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(int64_t(n / 4096), [&](int64_t b, int64_t e) {
      double s = 0;
      for (int64_t i = b; i < e; ++i) s += kernels::dot_f32(buf.data() + i * 4096, ones.data(), 4096);
      std::lock_guard lock(mu);
      total += s;
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total > 0) best = std::max(best, double(n / 4096 * 4096) * sizeof(float) / sec / 1e9);
  }
  return best;
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

int physical_core_count() { return physical_cores(); }

void keep_freed_memory() {
  // Below 1 GiB, allocations come from the heap (the main arena, or a
  // thread's 64 MiB heaps), and freed memory is not trimmed back to the OS.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

void release_freed_memory() {
  mallopt(M_TRIM_THRESHOLD, 0);
  // A block from this thread's arena, freed: it merges into the arena's top,
  // which is trimmed now that the threshold allows it.
  void* volatile p = malloc(256 << 10);
  free(p);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  malloc_trim(0);
}

std::string_view cpu_kernel_isa() { return kernels::isa_name(kernels::isa_level()); }

}  // namespace moelsp
