#include <fmt/format.h>

#include "layers.h"

namespace moelsp::layers {

GqaWeights load_gqa(const WeightLoader& wl, const ModelConfig& c, int il) {
  const std::string b = fmt::format("blk.{}.", il);
  GqaWeights w;
  w.wq = wl.get(b + "attn_q.weight", {c.n_embd, int64_t(c.n_head) * c.head_dim_k});
  w.wk = wl.get(b + "attn_k.weight", {c.n_embd, int64_t(c.n_head_kv) * c.head_dim_k});
  w.wv = wl.get(b + "attn_v.weight", {c.n_embd, int64_t(c.n_head_kv) * c.head_dim_v});
  w.wo = wl.get(b + "attn_output.weight", {int64_t(c.n_head) * c.head_dim_v, c.n_embd});
  if (c.qk_norm) {
    w.q_norm = wl.vec(b + "attn_q_norm.weight", c.head_dim_k);
    w.k_norm = wl.vec(b + "attn_k_norm.weight", c.head_dim_k);
  }
  if (wl.has(b + "attn_q.bias") || wl.has(b + "attn_output.bias"))
    throw ModelError(fmt::format("layer {}: attention biases are not supported for {}", il, c.arch));
  return w;
}

void gqa_attention(ThreadPool& pool, const ModelConfig& c, const GqaWeights& w, KvCache& cache, int il,
                   const float* h, int n, float* out) {
  const int pos0 = cache.n_past();
  const int64_t nq = int64_t(c.n_head) * c.head_dim_k;
  const int64_t nk = int64_t(c.n_head_kv) * c.head_dim_k;
  const int64_t nv = int64_t(c.n_head_kv) * c.head_dim_v;
  std::vector<float> q(static_cast<size_t>(n * nq)), k(static_cast<size_t>(n * nk)), v(static_cast<size_t>(n * nv));
  linear(pool, w.wq.m, h, n, q.data());  // [n][n_head·hd]
  linear(pool, w.wk.m, h, n, k.data());  // [n][n_head_kv·hd]
  linear(pool, w.wv.m, h, n, v.data());  // [n][n_head_kv·hd_v]
  for (int t = 0; t < n; ++t) {
    float* qt = q.data() + t * nq;
    float* kt = k.data() + t * nk;
    if (!w.q_norm.empty()) {
      rms_norm(qt, w.q_norm.data(), c.head_dim_k, c.rms_eps, qt, c.n_head);
      rms_norm(kt, w.k_norm.data(), c.head_dim_k, c.rms_eps, kt, c.n_head_kv);
    }
    rope(qt, c.n_head, c.head_dim_k, 0, pos0 + t, c.rope);
    rope(kt, c.n_head_kv, c.head_dim_k, 0, pos0 + t, c.rope);
    std::copy_n(kt, nk, cache.k(il, pos0 + t));
    std::copy_n(v.data() + t * nv, nv, cache.v(il, pos0 + t));
  }
  std::vector<float> attn(size_t(n) * size_t(c.n_head) * size_t(c.head_dim_v));
  AttentionArgs a;
  a.q = q.data(), a.ldq = nq;
  a.k = cache.k(il, 0), a.ldk = nk;
  a.v = cache.v(il, 0), a.ldv = nv;
  a.n_tokens = n, a.pos0 = pos0;
  a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.hd_k = c.head_dim_k, a.hd_v = c.head_dim_v;
  a.scale = c.kq_scale;
  a.out = attn.data(), a.ldo = int64_t(c.n_head) * c.head_dim_v;
  attention(pool, a);
  linear(pool, w.wo.m, attn.data(), n, out);
}

}  // namespace moelsp::layers
