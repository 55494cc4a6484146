// Every kernel ISA level this CPU can run, from generic up (kernels/isa.h):
// kernel tests compare each against the reference.
#pragma once

#include <vector>

#include "kernels/isa.h"

namespace moelsp::test {

inline std::vector<kernels::Isa> supported_isas() {
  std::vector<kernels::Isa> out;
  for (kernels::Isa l : {kernels::Isa::Generic, kernels::Isa::Avx2, kernels::Isa::Avx512Vnni, kernels::Isa::Avx512Bf16})
    if (l <= kernels::detected_isa()) out.push_back(l);
  return out;
}

}  // namespace moelsp::test
