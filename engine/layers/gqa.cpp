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
  for (Weight* x : {&w.wq, &w.wk, &w.wv, &w.wo}) repack_dense(*x);
  if (c.qk_norm || wl.has(b + "attn_q_norm.weight")) {  // glm4moe: "optional for GLM-4.5 355B"
    w.q_norm = wl.vec(b + "attn_q_norm.weight", c.head_dim_k);
    w.k_norm = wl.vec(b + "attn_k_norm.weight", c.head_dim_k);
  }
  w.bq = wl.maybe_vec(b + "attn_q.bias", int64_t(c.n_head) * c.head_dim_k);
  w.bk = wl.maybe_vec(b + "attn_k.bias", int64_t(c.n_head_kv) * c.head_dim_k);
  w.bv = wl.maybe_vec(b + "attn_v.bias", int64_t(c.n_head_kv) * c.head_dim_v);
  w.bo = wl.maybe_vec(b + "attn_output.bias", c.n_embd);
  w.sinks = wl.maybe_vec(b + "attn_sinks.weight", c.n_head);
  return w;
}

void add_bias(float* y, const std::vector<float>& b, int64_t m) {
  const size_t n = b.size();
  for (int64_t t = 0; t < m; ++t)
    for (size_t i = 0; i < n; ++i) y[size_t(t) * n + i] += b[i];
}

std::vector<SeqSpan> seq_spans(const Batch& b) {
  std::vector<SeqSpan> out;
  int at = 0;
  for (const BatchSeq& s : b.seqs) {
    out.push_back({s.seq, at, s.n_tokens, s.seq->n_past()});
    at += s.n_tokens;
  }
  return out;
}

void gqa_attention(ThreadPool& pool, const ModelConfig& c, const GqaWeights& w, std::span<const SeqSpan> seqs, int il,
                   const float* h, int n, float* out) {
  const int64_t nq = int64_t(c.n_head) * c.head_dim_k;
  const int64_t nk = int64_t(c.n_head_kv) * c.head_dim_k;
  const int64_t nv = int64_t(c.n_head_kv) * c.head_dim_v;
  // Projections for every token of every sequence at once.
  FloatBuf q(static_cast<size_t>(n * nq)), k(static_cast<size_t>(n * nk)), v(static_cast<size_t>(n * nv));
  // q [n][n_head·hd], k [n][n_head_kv·hd], v [n][n_head_kv·hd_v] in one loop
  const LinearOut qkv[] = {{&w.wq.m, q.data()}, {&w.wk.m, k.data()}, {&w.wv.m, v.data()}};
  linear_fused(pool, qkv, h, n);  // h quantized once for the three
  add_bias(q.data(), w.bq, n);
  add_bias(k.data(), w.bk, n);
  add_bias(v.data(), w.bv, n);
  FloatBuf attn(size_t(n) * size_t(c.n_head) * size_t(c.head_dim_v));
  std::vector<AttentionArgs> batch;  // every sequence's, in one loop
  for (const SeqSpan& sp : seqs) {
    KvSequence& seq = *sp.seq;
    const kernels::DType kt = to_dtype(seq.pool().layout().type);
    const size_t v_at = *kernels::row_bytes(kt, uint64_t(nk));  // V follows K in a row
    for (int t = sp.begin; t < sp.begin + sp.n; ++t) {
      float* qt = q.data() + t * nq;
      float* kt_ = k.data() + t * nk;
      const int pos = sp.pos0 + t - sp.begin;
      if (!w.q_norm.empty()) {
        rms_norm(qt, w.q_norm.data(), c.head_dim_k, c.rms_eps, qt, c.n_head);
        rms_norm(kt_, w.k_norm.data(), c.head_dim_k, c.rms_eps, kt_, c.n_head_kv);
      }
      rope(qt, c.n_head, c.head_dim_k, 0, pos, c.rope);
      rope(kt_, c.n_head_kv, c.head_dim_k, 0, pos, c.rope);
      uint8_t* row = seq.row(il, pos);  // [K | V] in the cache's type
      store_kv(kt, kt_, row, nk);
      store_kv(kt, v.data() + t * nv, row + v_at, nv);
    }
    const int64_t ldo = int64_t(c.n_head) * c.head_dim_v;
    batch.push_back({.q = q.data() + sp.begin * nq,
                     .ldq = nq,
                     .k = seq.k_rows(il),
                     .v = seq.v_rows(il),
                     .n_tokens = sp.n,
                     .pos0 = sp.pos0,
                     .n_head = c.n_head,
                     .n_head_kv = c.n_head_kv,
                     .hd_k = c.head_dim_k,
                     .hd_v = c.head_dim_v,
                     .scale = c.kq_scale,
                     .window = w.window,
                     .sinks = w.sinks.empty() ? nullptr : w.sinks.data(),
                     .out = attn.data() + sp.begin * ldo,
                     .ldo = ldo});
  }
  attention(pool, batch);
  linear(pool, w.wo.m, attn.data(), n, out);
  add_bias(out, w.bo, n);
}

}  // namespace moelsp::layers
