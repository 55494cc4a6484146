// MLA's three forms (mla.h). Temporaries are separate vectors: taken from one
// arena (packed back to back), pp256 on a 2-layer 1.1 B deepseek2 (F16, 2
// threads) fell from 217-244 to 191-194 tokens/s, measured 2026-12-02.
#include "mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace moelsp::layers {

namespace {

struct TransposedKb {
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  kernels::DType type = kernels::DType::F32;
  size_t row_bytes = 0;
};

// attn_k_b's heads ([kv_lora] rows of [qk_nope]) transposed to [qk_nope]
// rows of [kv_lora], for the plain form's expansion, which re-runs over every
// cached position at each prompt step (~40 % of a 1,757-token deepseek2-mid
// prompt). A quantized file's (Q5_0 in llama.cpp's Q4_K_M recipe) becomes
// Q8_0 where the VNNI tiles run it: 64 vs 26 GMAC/s per thread for F16 rows
// (128 × 512), rounding to 1/254 of each 32 values' largest where the file's
// own 5 bits round to 1/30; with AVX2 alone Q8_0 is no faster than F16, so it
// is F16 there. F16 files stay F16 and F32 ones F32, exactly. 16 heads of 128
// over a 512 latent: 1.1 MB per layer as Q8_0, 2 MB as F16.
TransposedKb transpose_k_b(const Weight& k_b, const ModelConfig& c) {
  const int64_t lora = c.kv_lora_rank, nope = c.qk_nope;
  const kernels::DType src = k_b.m.type;
  const bool q8 = src != kernels::DType::F32 && src != kernels::DType::F16 && src != kernels::DType::BF16 &&
                  lora % 32 == 0 && kernels::isa_level() >= kernels::Isa::Avx512Vnni;
  const kernels::DType t = src == kernels::DType::F32 ? kernels::DType::F32
                           : q8                       ? kernels::DType::Q8_0
                                                      : kernels::DType::F16;
  TransposedKb out;
  out.type = t;
  out.row_bytes = *kernels::row_bytes(t, uint64_t(lora));
  auto bytes = std::make_shared<std::vector<uint8_t>>(size_t(c.n_head * nope) * out.row_bytes);
  std::vector<float> m(static_cast<size_t>(lora * nope));  // one head, [nope][lora]
  std::vector<float> row(static_cast<size_t>(nope));
  for (int h = 0; h < c.n_head; ++h) {
    const kernels::MatView kb = k_b.slice(h);
    for (int64_t r = 0; r < lora; ++r) {
      kernels::dequantize_row(kb.type, kb.row(r), row.data(), nope);
      for (int64_t j = 0; j < nope; ++j) m[size_t(j * lora + r)] = row[size_t(j)];
    }
    for (int64_t j = 0; j < nope; ++j)
      kernels::quantize_row(t, m.data() + j * lora, bytes->data() + size_t(h * nope + j) * out.row_bytes, lora);
  }
  out.bytes = std::move(bytes);
  return out;
}

}  // namespace

MlaWeights load_mla(const WeightLoader& wl, const ModelConfig& c, int il) {
  const std::string b = fmt::format("blk.{}.", il);
  const int64_t q_dim = int64_t(c.n_head) * c.head_dim_k;
  MlaWeights L;
  if (c.q_lora_rank > 0) {
    L.wq_a = wl.get(b + "attn_q_a.weight", {c.n_embd, c.q_lora_rank});
    L.q_a_norm = wl.vec(b + "attn_q_a_norm.weight", c.q_lora_rank);
    L.wq_b = wl.get(b + "attn_q_b.weight", {c.q_lora_rank, q_dim});
  } else {
    L.wq = wl.get(b + "attn_q.weight", {c.n_embd, q_dim});
  }
  L.wkv_a = wl.get(b + "attn_kv_a_mqa.weight", {c.n_embd, c.kv_lora_rank + c.qk_rope});
  L.kv_a_norm = wl.vec(b + "attn_kv_a_norm.weight", c.kv_lora_rank);
  L.wo = wl.get(b + "attn_output.weight", {int64_t(c.n_head) * c.head_dim_v, c.n_embd});
  for (Weight* x : {&L.wq_a, &L.wq_b, &L.wq, &L.wkv_a, &L.wo})
    if (x->present()) repack_dense(*x);
  // Per-head expansions of the latent, from either tensor layout.
  const Weight kv_b =
      wl.maybe(b + "attn_kv_b.weight", {c.kv_lora_rank, int64_t(c.n_head) * (c.qk_nope + c.head_dim_v)});
  const bool split = !kv_b.present();
  Weight k_b, v_b;
  TransposedKb kt;
  if (split) {
    k_b = wl.get(b + "attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, c.n_head});
    v_b = wl.get(b + "attn_v_b.weight", {c.kv_lora_rank, c.head_dim_v, c.n_head});
    kt = transpose_k_b(k_b, c);  // (from the file's rows: before k_b is repacked)
    L.k_up_store = kt.bytes;
    // The per-head absorptions run every decode step with one input per
    // sequence: the repacked kernels' case (batched decode of deepseek2-mid
    // Q4_K_M spent ~10 % of its time in the plain Q5_0 and Q4_K row kernels
    // here).
    repack_dense(k_b);
    repack_dense(v_b);
    L.k_absorb_store = k_b.store;
    L.v_up_store = v_b.store;
  }
  for (int h = 0; h < c.n_head; ++h) {
    if (!split) {
      kernels::MatView k = kv_b.m, v = kv_b.m;
      k.data = kv_b.m.row(int64_t(h) * (c.qk_nope + c.head_dim_v));
      k.rows = c.qk_nope;
      v.data = kv_b.m.row(int64_t(h) * (c.qk_nope + c.head_dim_v) + c.qk_nope);
      v.rows = c.head_dim_v;
      L.k_up.push_back(k);
      L.v_up.push_back(v);
    } else {
      L.k_up.push_back({.data = kt.bytes->data() + size_t(h) * size_t(c.qk_nope) * kt.row_bytes,
                        .type = kt.type,
                        .cols = c.kv_lora_rank,
                        .rows = c.qk_nope,
                        .row_bytes = kt.row_bytes});
      L.k_absorb.push_back(k_b.slice(h));
      L.v_up.push_back(v_b.slice(h));
    }
  }
  return L;
}

namespace {

// The per-head loops claim 4 chunks per thread (a head's matmul call is the
// same whatever the chunking): at one chunk per thread a decode step's
// absorption and expansion (16 heads, ~10 µs each) had the threads idle for
// 12-14 % of the loop.
constexpr int kHeadChunks = 4;

// qc [n][n_head·(lora + rope)] = [K_upᵀ q_nope | q_pe] per head and token.
FloatBuf absorb_queries(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, const float* q, int n) {
  const int hk = c.head_dim_k, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
  const int64_t q_dim = int64_t(c.n_head) * hk, ldc = int64_t(c.n_head) * (lora + rope);
  FloatBuf qc(size_t(n) * size_t(ldc));
  pool.parallel_for(
      c.n_head,
      [&](int64_t hb, int64_t he) {
        for (int64_t hh = hb; hh < he; ++hh) {
          float* qo = qc.data() + hh * (lora + rope);
          if (!L.k_absorb.empty()) {  // every token in one matmul
            const auto& m = L.k_absorb[size_t(hh)];
            kernels::matmul({.w = m,
                             .x = q + hh * hk,
                             .ldx = q_dim,
                             .m = n,
                             .y = qo,
                             .ldy = ldc,
                             .row_begin = 0,
                             .row_end = m.rows});
          } else {  // attn_kv_b: Σ_r q_nope[r] · row r, token by token
            for (int t = 0; t < n; ++t) {
              std::fill_n(qo + t * ldc, lora, 0.0f);
              kernels::matmul_t_accumulate(L.k_up[size_t(hh)], q + t * q_dim + hh * hk, qo + t * ldc, 0, nope);
            }
          }
          for (int t = 0; t < n; ++t) std::copy_n(q + t * q_dim + hh * hk + nope, rope, qo + t * ldc + lora);
        }
      },
      kHeadChunks);
  return qc;
}

// out [n][n_head·v] = V_up · o_lat per head, o_lat [n][n_head·lora].
void expand_out(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, const float* ol, int n, float* out) {
  const int hv = c.head_dim_v, lora = c.kv_lora_rank;
  const int64_t ldl = int64_t(c.n_head) * lora, ldo = int64_t(c.n_head) * hv;
  pool.parallel_for(
      c.n_head,
      [&](int64_t hb, int64_t he) {
        for (int64_t hh = hb; hh < he; ++hh) {
          const auto& vm = L.v_up[size_t(hh)];
          kernels::matmul({.w = vm,
                           .x = ol + hh * lora,
                           .ldx = ldl,
                           .m = n,
                           .y = out + hh * hv,
                           .ldy = ldo,
                           .row_begin = 0,
                           .row_end = vm.rows});
        }
      },
      kHeadChunks);
}

// score_j = (K_upᵀ q_nope)·c_j + q_pe·k_pe_j = [q_lat | q_pe]·[c_j | k_pe_j]:
// multi-query attention over the cached rows themselves (one kv head of
// size lora + rope whose values are the latents), then o = V_up · o_lat.
// Several sequences (a batch of decode steps) share one absorption, one
// attention loop and one expansion over all their rows [sp.begin, sp.begin +
// sp.n) of q [n][n_head·hk] and out [n][n_head·hv]: the per-head absorption
// and expansion matrices then stream once per step, not once per sequence.
void mla_absorbed(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, int il, std::span<const SeqSpan> seqs,
                  const float* q, int n, float* out) {
  const int lora = c.kv_lora_rank, rope = c.qk_rope;
  const FloatBuf qc = absorb_queries(pool, c, L, q, n);  // [n][n_head·(lora + rope)]
  const int64_t ldc = int64_t(c.n_head) * (lora + rope), ldl = int64_t(c.n_head) * lora;
  FloatBuf ol(size_t(n) * size_t(ldl));  // [n][n_head·lora]: o_lat
  std::vector<AttentionArgs> batch;
  for (const SeqSpan& sp : seqs) {
    const KvSequence& seq = *sp.seq;
    batch.push_back({.q = qc.data() + sp.begin * ldc,
                     .ldq = ldc,
                     .k = seq.k_rows(il),
                     .v = seq.k_rows(il),  // values: the first lora elements of the same rows
                     .n_tokens = sp.n,
                     .pos0 = sp.pos0,
                     .n_head = c.n_head,
                     .n_head_kv = 1,
                     .hd_k = lora + rope,
                     .hd_v = lora,
                     .scale = c.kq_scale,
                     .window = 0,
                     .sinks = nullptr,
                     .out = ol.data() + sp.begin * ldl,
                     .ldo = ldl});
  }
  attention(pool, batch);
  expand_out(pool, c, L, ol.data(), n, out);
}

// Expands every cached latent (read through the block table) into per-head
// k = [k_nope | k_pe] and v, one head at a time over all positions (a
// matmul with n_kv inputs, so the prompt kernels apply and the weights
// stream once per head), then ordinary multi-head attention.
void mla_plain(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, int il, const SeqSpan& sp, const float* q,
               float* out) {
  const int hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
  const int64_t q_dim = int64_t(c.n_head) * hk, ldl = lora + rope, ldv = int64_t(c.n_head) * hv;
  const int n_kv = sp.pos0 + sp.n;
  FloatBuf lat_v(size_t(n_kv) * size_t(ldl));
  float* lat = lat_v.data();  // [n_kv][lora + rope]: the cached rows as f32
  const PagedRows rows = sp.seq->k_rows(il);
  pool.parallel_for(n_kv, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) kernels::dequantize_row(rows.type, rows.row(j), lat + j * ldl, ldl);
  });
  FloatBuf K_v(size_t(n_kv) * size_t(q_dim));
  float* K = K_v.data();  // [n_kv][n_head·(nope + rope)]
  FloatBuf V_v(size_t(n_kv) * size_t(ldv));
  float* V = V_v.data();  // [n_kv][n_head·v]
  pool.parallel_for(c.n_head, [&](int64_t hb, int64_t he) {
    for (int64_t hh = hb; hh < he; ++hh) {
      float* k0 = K + hh * hk;
      const auto& km = L.k_up[size_t(hh)];
      kernels::matmul(
          {.w = km, .x = lat, .ldx = ldl, .m = n_kv, .y = k0, .ldy = q_dim, .row_begin = 0, .row_end = km.rows});
      for (int j = 0; j < n_kv; ++j) std::copy_n(lat + j * ldl + lora, rope, k0 + j * q_dim + nope);
      const auto& vm = L.v_up[size_t(hh)];
      kernels::matmul(
          {.w = vm, .x = lat, .ldx = ldl, .m = n_kv, .y = V + hh * hv, .ldy = ldv, .row_begin = 0, .row_end = vm.rows});
    }
  });
  attention(pool, {.q = q,
                   .ldq = q_dim,
                   .k = PagedRows::contiguous(K, q_dim),
                   .v = PagedRows::contiguous(V, ldv),
                   .n_tokens = sp.n,
                   .pos0 = sp.pos0,
                   .n_head = c.n_head,
                   .n_head_kv = c.n_head,
                   .hd_k = hk,
                   .hd_v = hv,
                   .scale = c.kq_scale,
                   .window = 0,
                   .sinks = nullptr,
                   .out = out,
                   .ldo = ldv});
}

}  // namespace

MlaQkv mla_qkv(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, std::span<const SeqSpan> seqs, int il,
               const float* h, int n) {
  const int hk = c.head_dim_k, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
  const int64_t q_dim = int64_t(c.n_head) * hk;
  MlaQkv r;
  r.q.resize(size_t(n * q_dim));                  // [n][n_head·(nope + rope)]: every token of every sequence
  FloatBuf kva(size_t(n) * size_t(lora + rope));  // [n][lora + rope]: [norm(latent) | rope(k_pe)]
  if (c.q_lora_rank > 0) {
    r.qa.resize(size_t(n) * size_t(c.q_lora_rank));                              // [n][q_lora]
    const LinearOut a[] = {{&L.wq_a.m, r.qa.data()}, {&L.wkv_a.m, kva.data()}};  // both from h, one loop
    linear_fused(pool, a, h, n);
    rms_norm(r.qa.data(), L.q_a_norm.data(), c.q_lora_rank, c.rms_eps, r.qa.data(), n);
    linear(pool, L.wq_b.m, r.qa.data(), n, r.q.data());
  } else {
    const LinearOut a[] = {{&L.wq.m, r.q.data()}, {&L.wkv_a.m, kva.data()}};
    linear_fused(pool, a, h, n);
  }
  for (const SeqSpan& sp : seqs) {
    KvSequence& seq = *sp.seq;
    const kernels::DType kt = to_dtype(seq.pool().layout().type);
    for (int t = sp.begin; t < sp.begin + sp.n; ++t) {
      const int pos = sp.pos0 + t - sp.begin;
      float* row = kva.data() + size_t(t) * size_t(lora + rope);
      rms_norm(row, L.kv_a_norm.data(), lora, c.rms_eps, row);
      layers::rope(row, 1, 0, lora, pos, c.rope);
      store_kv(kt, row, seq.row(il, pos), lora + rope);
      layers::rope(r.q.data() + t * q_dim, c.n_head, hk, nope, pos, c.rope);  // q_pe of every head
    }
  }
  return r;
}

namespace {

bool absorbed_cheaper(const ModelConfig& c, const SeqSpan& sp) {
  // Which form costs less (multiply-adds): plain expands every cached
  // latent into per-head keys and values (n_kv · E) and then attends with
  // head sizes hk + hv; absorbed folds the expansions into the sequence's
  // new queries and outputs (n · E) and attends over the latents
  // (2·lora + rope per pair). A prompt from scratch goes plain; a few
  // tokens after a long cached prefix (decode, or an edit near the end of
  // a reused prompt) go absorbed, which never touches the old positions
  // beyond reading their latents once.
  const int hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
  const double E = double(c.n_head) * (nope + hv) * lora;
  const double n_kv = sp.pos0 + sp.n, pairs = double(sp.n) * (sp.pos0 + (sp.n + 1) / 2.0) * c.n_head;
  const double plain = n_kv * E + pairs * (hk + hv), absorbed = sp.n * E + pairs * (2.0 * lora + rope);
  return absorbed <= plain;
}

}  // namespace

void mla_dense(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, int il, const SeqSpan& sp, const float* q,
               float* o) {
  if (!absorbed_cheaper(c, sp)) return mla_plain(pool, c, L, il, sp, q, o);
  SeqSpan one = sp;
  one.begin = 0;  // q and o are this sequence's rows
  mla_absorbed(pool, c, L, il, std::span(&one, 1), q, sp.n, o);
}

void mla_sparse(ThreadPool& pool, const ModelConfig& c, const MlaWeights& L, int il, const SeqSpan& sp, const float* q,
                const KeptKeys& keys, float* o) {
  const int lora = c.kv_lora_rank, rope = c.qk_rope, ldr = lora + rope;
  const FloatBuf qc = absorb_queries(pool, c, L, q, sp.n);
  const int64_t ldc = int64_t(c.n_head) * ldr, ldl = int64_t(c.n_head) * lora;
  FloatBuf ol(size_t(sp.n) * size_t(ldl));  // [n][n_head·lora]: o_lat
  const PagedRows rows = sp.seq->k_rows(il);
  // Jobs: (token, group of heads). A token's kept rows are gathered once per
  // job into f32 [k][lora + rope]; its heads then meet them in one matmul
  // (scores [heads][k]) and one P·V (o_lat [heads][lora]). Decode (one
  // token) splits the heads so every thread has work.
  const int splits = int(std::clamp<int64_t>(2 * pool.size() / std::max(1, sp.n), 1, c.n_head));
  const int per = (c.n_head + splits - 1) / splits;
  pool.parallel_for(int64_t(sp.n) * splits, [&](int64_t jb, int64_t je) {
    std::vector<float> kv, s;
    for (int64_t job = jb; job < je; ++job) {
      const int t = int(job / splits), h0 = int(job % splits) * per, h1 = std::min(c.n_head, h0 + per);
      if (h0 >= h1) continue;
      const int k = keys.n_kept[t];
      const int32_t* pos = keys.kept + size_t(t) * size_t(keys.k_max);
      kv.resize(size_t(k) * size_t(ldr));
      for (int j = 0; j < k; ++j) kernels::dequantize_row(rows.type, rows.row(pos[j]), kv.data() + j * ldr, ldr);
      const int heads = h1 - h0;
      s.resize(size_t(heads) * size_t(k));
      // s [heads][k] = qc_h · row_j
      kernels::matmul({.w = {.data = kv.data(),
                             .type = kernels::DType::F32,
                             .cols = ldr,
                             .rows = k,
                             .row_bytes = size_t(ldr) * sizeof(float)},
                       .x = qc.data() + t * ldc + int64_t(h0) * ldr,
                       .ldx = ldr,
                       .m = heads,
                       .y = s.data(),
                       .ldy = k,
                       .row_begin = 0,
                       .row_end = k});
      for (int r = 0; r < heads; ++r) {
        float* p = s.data() + size_t(r) * size_t(k);
        float mx = -INFINITY;
        for (int j = 0; j < k; ++j) mx = std::max(mx, p[j] *= c.kq_scale);
        double sum = 0;
        for (int j = 0; j < k; ++j) sum += p[j] = std::exp(p[j] - mx);
        const float inv = float(1.0 / sum);
        for (int j = 0; j < k; ++j) p[j] *= inv;
      }
      // o_lat [heads][lora] = P [heads][k] · latents [k][lora]
      kernels::weighted_rows({.p = s.data(),
                              .ldp = k,
                              .m = heads,
                              .v = kv.data(),
                              .ldv = ldr,
                              .n_v = k,
                              .n = lora,
                              .y = ol.data() + t * ldl + int64_t(h0) * lora,
                              .ldy = lora,
                              .accumulate = false});
    }
  });
  expand_out(pool, c, L, ol.data(), sp.n, o);
}

void mla_attention(ThreadPool& pool, const ModelConfig& c, const MlaWeights& w, std::span<const SeqSpan> seqs, int il,
                   const float* h, int n, float* out) {
  const MlaQkv qkv = mla_qkv(pool, c, w, seqs, il, h, n);
  const int64_t q_dim = int64_t(c.n_head) * c.head_dim_k, ldo = int64_t(c.n_head) * c.head_dim_v;
  FloatBuf attn(size_t(n) * size_t(ldo));  // [n][n_head·v]
  if (seqs.size() > 1 &&
      std::all_of(seqs.begin(), seqs.end(), [&](const SeqSpan& sp) { return absorbed_cheaper(c, sp); }))
    mla_absorbed(pool, c, w, il, seqs, qkv.q.data(), n, attn.data());  // a batch of decode steps, together
  else
    for (const SeqSpan& sp : seqs)
      mla_dense(pool, c, w, il, sp, qkv.q.data() + sp.begin * q_dim, attn.data() + sp.begin * ldo);
  linear(pool, w.wo.m, attn.data(), n, out);  // [n][n_embd]
}

}  // namespace moelsp::layers
