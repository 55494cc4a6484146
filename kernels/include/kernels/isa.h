// How the CPU kernels compute: the instruction-set level and the activation
// mode, together one process-wide KernelConfig. Each kernel entry point
// (matmul, dequantize_row, dot_f32, weighted_rows) reads it once and passes
// it down explicitly, so one call never mixes two settings. The level is
// detected once from cpuid (MOELSP_ISA may lower the start); set_isa() can
// lower it (never raise it past what the CPU has), so tests run every variant
// the machine supports and users can rule out a suspect path. The engine
// never changes the setting; tests and benchmarks do, between runs.
#pragma once

#include <string>
#include <string_view>

namespace moelsp::kernels {

enum class Isa {
  Generic,     // scalar C++ (any x86-64)
  Avx2,        // AVX2 + FMA + F16C: 256-bit f32 FMA, maddubs for int8
  Avx512Vnni,  // + AVX-512 F/BW/VL/VNNI: vpdpbusd (u8·s8 → s32) on 256-bit vectors, 32 registers;
               // attention's scores, P·V and the softmax's exponentials in zmm
  Avx512Bf16,  // + AVX512_BF16: vdpbf16ps (bf16 pairs → f32) for attention over BF16 KV rows, which
               // then read where they lie with half the multiply instructions (kernels/cpu/attention_bf16.cpp)
};

// How activations meet quantized weights. Int8 (the default, as llama.cpp
// does): for the types with Kernel::Int8 (kernels/types.h) each input row is
// quantized to blocks of 32 (256 for the K-quants) int8 with an f32 scale
// (amax/127) and the products are integer dot products, ~2-4× less work than
// expanding the weights to f32 — the result differs from the F32 path by the
// activations' rounding (tolerance in tests/test_kernels.cpp). F32: the
// weights are expanded and dotted in f32, which reproduces a dequantized
// model exactly (what the reference dequantization checks need).
enum class Activations { Int8, F32 };

struct KernelConfig {
  Isa isa = Isa::Generic;
  Activations activations = Activations::Int8;
};
KernelConfig kernel_config();  // the setting now (one atomic read)

Isa detected_isa();  // the best level this CPU supports
Isa isa_level();     // kernel_config().isa
// Uses min(level, detected_isa()); returns the level now in use.
Isa set_isa(Isa level);
void set_activations(Activations a);
Activations activations();  // kernel_config().activations
std::string_view isa_name(Isa level);
// What is wrong with the MOELSP_ISA environment variable, if anything: an
// unknown level (ignored) or one above what this CPU has (capped). Empty when
// it is unset or applied as given. The kernels do not log; the engine does.
std::string isa_override_problem();

}  // namespace moelsp::kernels
