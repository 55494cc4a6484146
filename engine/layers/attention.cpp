// Causal multi-head attention over the KV cache (GQA: several query heads
// share one kv head). F32 throughout.
//
// Work is cut into (block of up to 16 query tokens) × (kv head) jobs: the
// block's tokens times the group's query heads (e.g. 16 × 8 = 128 rows) meet
// the kv head's keys in one matmul (the f32 4×2 register-tile kernel, K read
// once per 4 keys for all rows) and its values in one P·V kernel (4 rows × 32
// columns per tile), where a (token, head) at a time re-read K and V per row
// with scalar-width work. The block's last token sees pos0 + t1 keys; earlier
// rows' extra (future) scores are masked to probability 0, at most 15 keys of
// waste per row. Token blocks are visited in zigzag order (0, last, 1,
// last − 1, …) so the pool's contiguous job ranges carry equal causal work.
//
// Keys and values are read through the paged cache's block table
// (`PagedRows`), one block of consecutive rows at a time: the score matmul
// reads F16/BF16 rows in place; Q8_0 keys and all non-f32 values are widened
// to f32 per block (block × head size, in L1) first. Q8_0 keys could meet
// int8-quantized queries in the int8 kernel, as llama.cpp's quantized cache
// does, but on the qwen3moe reference that made the logit error 0.69 instead
// of 0.064: the queries' outliers do not survive 8 bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/matmul.h"
#include "layers.h"

namespace moelsp::layers {

void attention(ThreadPool& pool, const AttentionArgs& a) {
  constexpr int kBlock = 16;
  const int group = a.n_head / a.n_head_kv;
  const int n_tb = (a.n_tokens + kBlock - 1) / kBlock;
  // Few jobs (decode): split a group's heads too, so every thread has work.
  int split = 1;
  while (split < group && int64_t(n_tb) * a.n_head_kv * split < 2 * int64_t(pool.size())) {
    ++split;
    while (group % split) ++split;
  }
  const int heads = group / split;  // query heads per job
  const int64_t n_jobs = int64_t(n_tb) * a.n_head_kv * split;
  const bool v_f32 = a.v.type == kernels::DType::F32;
  pool.parallel_for(n_jobs, [&](int64_t jb, int64_t je) {
    std::vector<float> qb, s, ob, kbuf, vbuf;
    for (int64_t job = jb; job < je; ++job) {
      const int64_t k = job / (int64_t(a.n_head_kv) * split);
      const int g = int(job / split % a.n_head_kv), h0 = g * group + int(job % split) * heads;
      const int tb = int(k % 2 == 0 ? k / 2 : n_tb - 1 - k / 2);
      const int t0 = tb * kBlock, t1 = std::min(a.n_tokens, t0 + kBlock), rows = (t1 - t0) * heads;
      const int64_t n_kv = a.pos0 + t1;
      const PagedRows K = a.k.at(int64_t(g) * a.hd_k), V = a.v.at(int64_t(g) * a.hd_v);
      // Rows (t − t0)·heads + i: token t, query head h0 + i.
      qb.resize(size_t(rows) * size_t(a.hd_k));
      for (int t = t0; t < t1; ++t)
        std::copy_n(a.q + t * a.ldq + int64_t(h0) * a.hd_k, size_t(heads) * size_t(a.hd_k),
                    qb.data() + size_t(t - t0) * size_t(heads) * size_t(a.hd_k));
      // Scores [rows][n_kv] = Q·Kᵀ, one cache block (consecutive rows) at a
      // time; F16/BF16 rows are read by the f32 matmul in their own type.
      s.resize(size_t(rows) * size_t(n_kv));
      for (int64_t j0 = 0; j0 < n_kv;) {
        const int64_t j1 = std::min(n_kv, (j0 / K.block_size + 1) * int64_t(K.block_size));
        kernels::MatView keys{K.row(j0), K.type, a.hd_k, j1 - j0, K.row_bytes};
        if (K.type == kernels::DType::Q8_0) {  // widened: int8 queries would cost 10× the error
          kbuf.resize(size_t(j1 - j0) * size_t(a.hd_k));
          for (int64_t j = j0; j < j1; ++j)
            kernels::dequantize_row(K.type, K.row(j), kbuf.data() + size_t(j - j0) * size_t(a.hd_k), a.hd_k);
          keys = {kbuf.data(), kernels::DType::F32, a.hd_k, j1 - j0, size_t(a.hd_k) * sizeof(float)};
        }
        kernels::matmul({keys, qb.data(), a.hd_k, rows, s.data() + j0, n_kv, 0, j1 - j0});
        j0 = j1;
      }
      // Softmax of each row over its visible keys; later keys get probability 0.
      for (int r = 0; r < rows; ++r) {
        float* p = s.data() + size_t(r) * size_t(n_kv);
        const int64_t visible = a.pos0 + t0 + r / heads + 1;
        float mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, p[j] *= a.scale);
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += p[j] = std::exp(p[j] - mx);
        const float inv = float(1.0 / sum);
        for (int64_t j = 0; j < visible; ++j) p[j] *= inv;
        std::fill(p + visible, p + n_kv, 0.0f);
      }
      // Outputs [rows][hd_v] = P·V, summed block by block (a block's values
      // widened to f32 first unless stored so), then into place.
      ob.resize(size_t(rows) * size_t(a.hd_v));
      for (int64_t j0 = 0; j0 < n_kv;) {
        const int64_t j1 = std::min(n_kv, (j0 / V.block_size + 1) * int64_t(V.block_size));
        const float* vp;
        int64_t ldv;
        if (v_f32) {
          vp = reinterpret_cast<const float*>(V.row(j0)), ldv = int64_t(V.row_bytes / sizeof(float));
        } else {
          vbuf.resize(size_t(j1 - j0) * size_t(a.hd_v));
          for (int64_t j = j0; j < j1; ++j)
            kernels::dequantize_row(V.type, V.row(j), vbuf.data() + size_t(j - j0) * size_t(a.hd_v), a.hd_v);
          vp = vbuf.data(), ldv = a.hd_v;
        }
        kernels::WeightedRowsArgs pv;
        pv.p = s.data() + j0, pv.ldp = n_kv, pv.m = rows;
        pv.v = vp, pv.ldv = ldv, pv.n_v = j1 - j0, pv.n = a.hd_v;
        pv.y = ob.data(), pv.ldy = a.hd_v, pv.accumulate = j0 > 0;
        kernels::weighted_rows(pv);
        j0 = j1;
      }
      for (int t = t0; t < t1; ++t)
        std::copy_n(ob.data() + size_t(t - t0) * size_t(heads) * size_t(a.hd_v), size_t(heads) * size_t(a.hd_v),
                    a.out + t * a.ldo + int64_t(h0) * a.hd_v);
    }
  });
}

}  // namespace moelsp::layers
