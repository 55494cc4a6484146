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

// Keeps freed memory in the process: glibc otherwise serves every allocation
// above 128 KiB-32 MiB (its adaptive mmap threshold) with fresh mmap'd pages
// and returns them on free, so each forward pass's large temporaries (an FFN's
// [tokens × n_ff] activations: 22 MiB for 512 tokens of a 10,944-wide layer)
// fault in and zero every page again. On this project's 2-core VM that cost
// more than half of a 512-token prompt on a 1.1 B deepseek2 (pp512 263-364 →
// 653-693 tokens/s). Call once at start-up, before threads allocate.
void keep_freed_memory();

// Gives what keep_freed_memory() keeps back to the OS, once: after a front
// end has handled a large message (its body, the parsed JSON and their
// copies). malloc_trim alone returns free chunks inside the arenas and the
// main heap's top, but not the top of the calling thread's own arena (glibc
// trims that only on a free() while M_TRIM_THRESHOLD allows it), where a
// connection thread's large body ends up: so the threshold is lowered for
// one small free on this thread, then set back. A few ms; call it only
// after large messages.
void release_freed_memory();

// The instruction-set level the CPU kernels run at ("avx512-bf16", "avx512-vnni", "avx2",
// "generic"): the best this CPU has, or lower when MOELSP_ISA says so.
std::string_view cpu_kernel_isa();

}  // namespace moelsp
