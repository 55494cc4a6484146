// Attention's kernels over BF16 rows with vdpbf16ps (kernels/cpu/attention_bf16.cpp);
// called by scores() and weighted_rows() at Isa::Avx512Bf16.
#pragma once

#include "kernels/matmul.h"

namespace moelsp::kernels::detail {

void scores_bf16(const ScoresArgs& a);                                                      // a.k_type BF16
void weighted_rows_bf16(const WeightedRowsArgs& a);                                         // a.v_bf16 set
void round_rows_bf16(const float* x, int64_t rows, int64_t ldx, int64_t n, uint16_t* out);  // vcvtne2ps2bf16

}  // namespace moelsp::kernels::detail
