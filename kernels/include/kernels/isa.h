// Which instruction-set level the CPU kernels use. Detected once from cpuid;
// set_isa() can lower it (never raise it past what the CPU has), so tests run
// every variant the machine supports and users can rule out a suspect path.
#pragma once

#include <string>
#include <string_view>

namespace moelsp::kernels {

enum class Isa {
  Generic,     // scalar C++ (any x86-64)
  Avx2,        // AVX2 + FMA + F16C: 256-bit f32 FMA, maddubs for int8
  Avx512Vnni,  // + AVX-512 F/BW/VL/VNNI: vpdpbusd (u8·s8 → s32) on 256-bit vectors, 32 registers
};

Isa detected_isa();  // the best level this CPU supports
Isa isa_level();     // the level in use (detected unless set_isa lowered it)
// Uses min(level, detected_isa()); returns the level now in use.
Isa set_isa(Isa level);
std::string_view isa_name(Isa level);
// What is wrong with the MOELSP_ISA environment variable, if anything: an
// unknown level (ignored) or one above what this CPU has (capped). Empty when
// it is unset or applied as given. The kernels do not log; the engine does.
std::string isa_override_problem();

}  // namespace moelsp::kernels
