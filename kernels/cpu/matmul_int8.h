// Internal: the int8-activation kernels behind kernels::matmul.
#pragma once

#include "kernels/matmul.h"

namespace moelsp::kernels {

// Whether matmul should take the int8 path for these weights (type, ISA, setting).
bool int8_path_available(const MatmulArgs& a);
void matmul_int8(const MatmulArgs& a);  // Q8_0, Q4_0, Q5_0, Q4_K, Q6_K

}  // namespace moelsp::kernels
