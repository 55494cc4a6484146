// Causal multi-head attention over the KV cache (GQA: several query heads
// share one kv head). F32 throughout, scores in a per-thread buffer.
#include <cmath>

#include "kernels/matmul.h"
#include "layers.h"

namespace moelsp::layers {

void attention(ThreadPool& pool, const AttentionArgs& a) {
  const int group = a.n_head / a.n_head_kv;
  pool.parallel_for(int64_t(a.n_tokens) * a.n_head, [&](int64_t b, int64_t e) {
    std::vector<float> p(static_cast<size_t>(a.pos0 + a.n_tokens));
    for (int64_t job = b; job < e; ++job) {
      const int t = int(job / a.n_head), h = int(job % a.n_head), g = h / group;
      const int n_kv = a.pos0 + t + 1;
      const float* q = a.q + t * a.ldq + int64_t(h) * a.hd_k;
      float mx = -INFINITY;
      for (int j = 0; j < n_kv; ++j) {
        p[size_t(j)] = kernels::dot_f32(q, a.k + j * a.ldk + int64_t(g) * a.hd_k, a.hd_k) * a.scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double sum = 0;
      for (int j = 0; j < n_kv; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
      const float inv = float(1.0 / sum);
      float* o = a.out + t * a.ldo + int64_t(h) * a.hd_v;
      for (int d = 0; d < a.hd_v; ++d) o[d] = 0;
      for (int j = 0; j < n_kv; ++j) {
        const float w = p[size_t(j)] * inv;
        const float* v = a.v + j * a.ldv + int64_t(g) * a.hd_v;
        for (int d = 0; d < a.hd_v; ++d) o[d] += w * v[d];
      }
    }
  });
}

}  // namespace moelsp::layers
