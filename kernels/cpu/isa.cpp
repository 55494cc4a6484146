#include "kernels/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>

namespace moelsp::kernels {
namespace {

Isa detect() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return Isa::Generic;
  // 256-bit vpdpbusd needs AVX512VL on top of VNNI (AVX-VNNI alone, the
  // VEX-encoded form on some client CPUs, is not used yet).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni"))
    return __builtin_cpu_supports("avx512bf16") ? Isa::Avx512Bf16 : Isa::Avx512Vnni;
  return Isa::Avx2;
}

// MOELSP_ISA=generic|avx2|avx512-vnni|avx512-bf16 lowers the starting level (to rule out
// a suspect kernel without rebuilding); unknown values are ignored.
Isa initial() {
  const char* env = std::getenv("MOELSP_ISA");
  const Isa d = detected_isa();
  if (!env) return d;
  for (Isa l : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni, Isa::Avx512Bf16})
    if (isa_name(l) == env) return l < d ? l : d;
  return d;
}

// The one process-wide setting. Held 8-byte aligned so that its atomic is
// lock-free on every compiler (KernelConfig alone is 4-byte aligned, and
// clang then calls libatomic's __atomic_load, which nothing links).
struct alignas(8) Setting {
  KernelConfig c;
};
static_assert(sizeof(Setting) == 8 && std::atomic<Setting>::is_always_lock_free);

std::atomic<Setting>& config() {
  static std::atomic<Setting> c{Setting{KernelConfig{initial(), Activations::Int8}}};
  return c;
}

template <class F>
void update(F change) {
  Setting old = config().load();
  Setting next;
  do {
    next = old;
    change(next.c);
  } while (!config().compare_exchange_weak(old, next));
}

}  // namespace

Isa detected_isa() {
  static const Isa d = detect();
  return d;
}

KernelConfig kernel_config() { return config().load(std::memory_order_relaxed).c; }
Isa isa_level() { return kernel_config().isa; }
Activations activations() { return kernel_config().activations; }

Isa set_isa(Isa l) {
  const Isa use = l < detected_isa() ? l : detected_isa();
  update([&](KernelConfig& c) { c.isa = use; });
  return use;
}

void set_activations(Activations a) {
  update([&](KernelConfig& c) { c.activations = a; });
}

std::string isa_override_problem() {
  const char* env = std::getenv("MOELSP_ISA");
  if (!env) return {};
  for (Isa l : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni, Isa::Avx512Bf16})
    if (isa_name(l) == env)
      return l <= detected_isa() ? std::string()
                                 : "MOELSP_ISA=" + std::string(env) + ": this CPU has only " +
                                       std::string(isa_name(detected_isa())) + ", which is used";
  return "MOELSP_ISA=" + std::string(env) + " is not a level (generic, avx2, avx512-vnni, avx512-bf16): ignored";
}

std::string_view isa_name(Isa l) {
  switch (l) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512Vnni: return "avx512-vnni";
    case Isa::Avx512Bf16: return "avx512-bf16";
  }
  return "?";
}

}  // namespace moelsp::kernels
