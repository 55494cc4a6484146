// Hardware facts the engine plans with and benchmarks report against.
#pragma once

#include <cstdint>
#include <string_view>

namespace moelsp {

// Sustained read bandwidth of main memory in GB/s, measured by summing a
// buffer much larger than the caches with `threads` threads (best of a few
// passes). Takes ~0.5 s.
double measure_memory_bandwidth_gbs(int threads, size_t buffer_bytes = size_t(512) << 20);

// Peak resident set size of this process so far, in bytes.
uint64_t peak_rss_bytes();

int physical_core_count();

// The instruction-set level the CPU kernels run at ("avx512-vnni", "avx2",
// "generic"): the best this CPU has, or lower when MOELSP_ISA says so.
std::string_view cpu_kernel_isa();

}  // namespace moelsp
