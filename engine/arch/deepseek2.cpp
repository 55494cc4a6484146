// deepseek2: DeepSeek-V2/V3, DeepSeek-Coder-V2-Lite, GLM-4.7-Flash.
//
// Multi-head latent attention (MLA): keys and values are compressed to a
// latent c (kv_lora_rank) plus one shared RoPE key k_pe (qk_rope); the paged
// cache holds only [c | k_pe] per token and layer. Attention runs in one of
// two forms, per sequence, whichever costs fewer multiply-adds: plain
// (expand every cached latent into per-head keys and values, then ordinary
// attention: a long prompt from scratch) or absorbed (fold the expansions into
// the new queries and the output, then multi-query attention over the cached
// rows themselves: decode, and a few new tokens after a long reused prefix).
// The first leading_dense_block_count layers are dense; the rest are MoE with
// shared experts, softmax or sigmoid gating, optional selection bias and
// group limit.
#include <cmath>

#include <fmt/format.h>

#include "decoder.h"

namespace moelsp::arch {
namespace {

struct Deepseek2Layer : DecoderLayer {
  std::vector<float> q_a_norm, kv_a_norm;
  Weight wq, wq_a, wq_b, wkv_a, wo;
  bool split = false;                        // attn_k_b/attn_v_b rather than attn_kv_b
  std::vector<kernels::MatView> k_up, v_up;  // per head: latent → k_nope, latent → v
};

class Deepseek2 final : public Decoder<Deepseek2Layer> {
 public:
  Deepseek2(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    read_hparams();
    load_tensors();
    init_experts(expert_layers(cfg_, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.kv_lora_rank + cfg_.qk_rope; }  // [latent | k_pe]
  int kv_v_dim() const override { return 0; }

 private:
  // Hyperparameters (the common ones are read by Model).
  void read_hparams() {
    ModelConfig& c = cfg_;
    const gguf::File& f = *file_;
    const std::string& a = c.arch;
    c.q_lora_rank = int(opt<uint32_t>(f, a, "attention.q_lora_rank", 0));
    c.kv_lora_rank = int(req<uint32_t>(f, a, "attention.kv_lora_rank"));
    c.head_dim_k = int(opt<uint32_t>(f, a, "attention.key_length_mla", uint32_t(c.head_dim_k)));
    c.head_dim_v = int(opt<uint32_t>(f, a, "attention.value_length_mla", uint32_t(c.head_dim_v)));
    c.qk_rope = c.rope.n_dims;
    c.qk_nope = c.head_dim_k - c.qk_rope;
    c.n_head_kv = c.n_head;  // after expansion every head has its own k and v
    if (c.qk_nope <= 0)
      throw ModelError(fmt::format("{}: key length {} ≤ rope dims {}", f.path(), c.head_dim_k, c.qk_rope));
    c.rope.type = RopeType::Norm;
    read_moe_config(f, c);

    // YaRN: the magnitude correction goes into the attention scale (mscale²),
    // not into cos/sin (llama.cpp: TAG_DEEPSEEK2_YARN_LOG_MUL_FIX).
    float mscale = 1.0f;
    if (c.rope.yarn) {
      const float ln_factor = std::log(1.0f / c.rope.freq_scale);
      const float log_mul = opt<float>(f, a, "rope.scaling.yarn_log_multiplier", 0.0f);
      mscale = c.rope.attn_factor * (1.0f + log_mul * ln_factor);
      c.rope.attn_factor /= 1.0f + 0.1f * ln_factor;
    }
    c.kq_scale = mscale * mscale / std::sqrt(float(c.head_dim_k));
  }

  // Tensors.
  void load_tensors() {
    const ModelConfig& c = cfg_;
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    const int64_t q_dim = int64_t(c.n_head) * c.head_dim_k;
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = fmt::format("blk.{}.", il);
      Deepseek2Layer L;
      L.load_norms(wl, c, il);
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
      // Per-head expansions of the latent, from either tensor layout.
      const Weight kv_b =
          wl.maybe(b + "attn_kv_b.weight", {c.kv_lora_rank, int64_t(c.n_head) * (c.qk_nope + c.head_dim_v)});
      L.split = !kv_b.present();
      Weight k_b, v_b;
      if (L.split) {
        k_b = wl.get(b + "attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, c.n_head});
        v_b = wl.get(b + "attn_v_b.weight", {c.kv_lora_rank, c.head_dim_v, c.n_head});
      }
      for (int h = 0; h < c.n_head; ++h) {
        if (!L.split) {
          kernels::MatView k = kv_b.m, v = kv_b.m;
          k.data = kv_b.m.row(int64_t(h) * (c.qk_nope + c.head_dim_v));
          k.rows = c.qk_nope;
          v.data = kv_b.m.row(int64_t(h) * (c.qk_nope + c.head_dim_v) + c.qk_nope);
          v.rows = c.head_dim_v;
          L.k_up.push_back(k);  // qk_nope rows × kv_lora
          L.v_up.push_back(v);  // v rows × kv_lora
        } else {
          L.k_up.push_back(k_b.slice(h));  // transposed: kv_lora rows × qk_nope
          L.v_up.push_back(v_b.slice(h));
        }
      }
      L.load_ffn(wl, c, il);  // dense for the first leading_dense_block_count layers, then MoE
      layers_.push_back(std::move(L));
    }
  }

  // k_nope = K_up · lat (qk_nope values) for either layout.
  void expand_k(const Deepseek2Layer& L, int h, const float* lat, float* k_nope) const {
    const auto& m = L.k_up[size_t(h)];
    if (!L.split) {
      kernels::matmul(
          {.w = m, .x = lat, .ldx = m.cols, .m = 1, .y = k_nope, .ldy = m.rows, .row_begin = 0, .row_end = m.rows});
    } else {  // stored transposed: Σ_r lat[r] · row r
      std::fill(k_nope, k_nope + cfg_.qk_nope, 0.0f);
      kernels::matmul_t_accumulate(m, lat, k_nope, 0, m.rows);
    }
  }
  // q_lat = K_upᵀ · q_nope (kv_lora values): the absorbed query.
  void absorb_q(const Deepseek2Layer& L, int h, const float* q_nope, float* q_lat) const {
    const auto& m = L.k_up[size_t(h)];
    if (!L.split) {
      std::fill(q_lat, q_lat + cfg_.kv_lora_rank, 0.0f);
      kernels::matmul_t_accumulate(m, q_nope, q_lat, 0, m.rows);
    } else {
      kernels::matmul(
          {.w = m, .x = q_nope, .ldx = m.cols, .m = 1, .y = q_lat, .ldy = m.rows, .row_begin = 0, .row_end = m.rows});
    }
  }

  // Forward: the decoder skeleton (decoder.h) with MLA as its attention.
  // Its temporaries are separate vectors: taken from one arena (packed back
  // to back), pp256 on a 2-layer 1.1 B deepseek2 (F16, 2 threads) fell from
  // 217-244 to 191-194 tokens/s, measured 2026-12-02.
  void attention(const Deepseek2Layer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    const ModelConfig& c = cfg_;
    const int hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
    const int64_t q_dim = int64_t(c.n_head) * hk;

    std::vector<float> q_v(size_t(n * q_dim));
    float* q = q_v.data();  // [n][n_head·(nope + rope)]: every token of every sequence
    if (c.q_lora_rank > 0) {
      std::vector<float> qa_v(size_t(n) * size_t(c.q_lora_rank));
      float* qa = qa_v.data();  // [n][q_lora]
      layers::linear(*pool_, L.wq_a.m, h, n, qa);
      layers::rms_norm(qa, L.q_a_norm.data(), c.q_lora_rank, c.rms_eps, qa, n);
      layers::linear(*pool_, L.wq_b.m, qa, n, q);
    } else {
      layers::linear(*pool_, L.wq.m, h, n, q);
    }
    std::vector<float> kva_v(size_t(n) * size_t(lora + rope));
    float* kva = kva_v.data();  // [n][lora + rope]: [norm(latent) | rope(k_pe)]
    layers::linear(*pool_, L.wkv_a.m, h, n, kva);
    std::vector<float> attn_v(size_t(n) * size_t(c.n_head) * size_t(hv));
    float* attn = attn_v.data();  // [n][n_head·v]
    for (const layers::SeqSpan& sp : seqs) {
      KvSequence& seq = *sp.seq;
      const kernels::DType kt = to_dtype(seq.pool().layout().type);
      for (int t = sp.begin; t < sp.begin + sp.n; ++t) {
        const int pos = sp.pos0 + t - sp.begin;
        float* row = kva + size_t(t) * size_t(lora + rope);
        layers::rms_norm(row, L.kv_a_norm.data(), lora, c.rms_eps, row);
        layers::rope(row, 1, 0, lora, pos, c.rope);
        layers::store_kv(kt, row, seq.row(il, pos), lora + rope);
        layers::rope(q + t * q_dim, c.n_head, hk, nope, pos, c.rope);  // q_pe of every head
      }
      // Which form costs less (multiply-adds): plain expands every cached
      // latent into per-head keys and values (n_kv · E) and then attends with
      // head sizes hk + hv; absorbed folds the expansions into the sequence's
      // new queries and outputs (n · E) and attends over the latents
      // (2·lora + rope per pair). A prompt from scratch goes plain; a few
      // tokens after a long cached prefix (decode, or an edit near the end of
      // a reused prompt) go absorbed, which never touches the old positions
      // beyond reading their latents once.
      const double E = double(c.n_head) * (nope + hv) * lora;
      const double n_kv = sp.pos0 + sp.n, pairs = double(sp.n) * (sp.pos0 + (sp.n + 1) / 2.0) * c.n_head;
      const double plain = n_kv * E + pairs * (hk + hv), absorbed = sp.n * E + pairs * (2.0 * lora + rope);
      float* o = attn + size_t(sp.begin) * size_t(c.n_head) * size_t(hv);
      const float* qs = q + sp.begin * q_dim;
      if (absorbed <= plain) mla_absorbed(L, seq, il, sp, qs, o);
      else mla_plain(L, seq, il, sp, qs, o);
    }
    layers::linear(*pool_, L.wo.m, attn, n, out);  // [n][n_embd]
  }

  // score_j = (K_upᵀ q_nope)·c_j + q_pe·k_pe_j = [q_lat | q_pe]·[c_j | k_pe_j]:
  // multi-query attention over the cached rows themselves (one kv head of
  // size lora + rope whose values are the latents), then o = V_up · o_lat.
  void mla_absorbed(const Deepseek2Layer& L, KvSequence& seq, int il, const layers::SeqSpan& sp, const float* q,
                    float* out) {
    const ModelConfig& c = cfg_;
    const int hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
    const int64_t q_dim = int64_t(c.n_head) * hk, ldc = int64_t(c.n_head) * (lora + rope);
    std::vector<float> qc_v(size_t(sp.n) * size_t(ldc));
    float* qc = qc_v.data();  // [n][n_head·(lora + rope)]: [q_lat | q_pe] per head
    std::vector<float> ol_v(size_t(sp.n) * size_t(c.n_head) * size_t(lora));
    float* ol = ol_v.data();  // [n][n_head·lora]: o_lat
    pool_->parallel_for(c.n_head, [&](int64_t hb, int64_t he) {
      for (int64_t hh = hb; hh < he; ++hh)
        for (int t = 0; t < sp.n; ++t) {
          const float* qh = q + t * q_dim + hh * hk;
          float* qo = qc + t * ldc + hh * (lora + rope);
          absorb_q(L, int(hh), qh, qo);
          std::copy_n(qh + nope, rope, qo + lora);
        }
    });
    const layers::AttentionArgs a{.q = qc,
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
                                  .out = ol,
                                  .ldo = int64_t(c.n_head) * lora};
    layers::attention(*pool_, a);
    const int64_t ldo = int64_t(c.n_head) * hv;
    pool_->parallel_for(c.n_head, [&](int64_t hb, int64_t he) {
      for (int64_t hh = hb; hh < he; ++hh) {
        const auto& vm = L.v_up[size_t(hh)];
        kernels::matmul({.w = vm,
                         .x = ol + hh * lora,
                         .ldx = a.ldo,
                         .m = sp.n,
                         .y = out + hh * hv,
                         .ldy = ldo,
                         .row_begin = 0,
                         .row_end = vm.rows});
      }
    });
  }

  // Expands every cached latent (read through the block table) into per-head
  // k = [k_nope | k_pe] and v, one head at a time over all positions (a
  // matmul with n_kv inputs, so the prompt kernels apply and the weights
  // stream once per head), then ordinary multi-head attention.
  void mla_plain(const Deepseek2Layer& L, KvSequence& seq, int il, const layers::SeqSpan& sp, const float* q,
                 float* out) {
    const ModelConfig& c = cfg_;
    const int hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope, nope = c.qk_nope;
    const int64_t q_dim = int64_t(c.n_head) * hk, ldl = lora + rope, ldv = int64_t(c.n_head) * hv;
    const int n_kv = sp.pos0 + sp.n;
    std::vector<float> lat_v(size_t(n_kv) * size_t(ldl));
    float* lat = lat_v.data();  // [n_kv][lora + rope]: the cached rows as f32
    const PagedRows rows = seq.k_rows(il);
    pool_->parallel_for(n_kv, [&](int64_t jb, int64_t je) {
      for (int64_t j = jb; j < je; ++j) kernels::dequantize_row(rows.type, rows.row(j), lat + j * ldl, ldl);
    });
    std::vector<float> K_v(size_t(n_kv) * size_t(q_dim));
    float* K = K_v.data();  // [n_kv][n_head·(nope + rope)]
    std::vector<float> V_v(size_t(n_kv) * size_t(ldv));
    float* V = V_v.data();  // [n_kv][n_head·v]
    pool_->parallel_for(c.n_head, [&](int64_t hb, int64_t he) {
      for (int64_t hh = hb; hh < he; ++hh) {
        float* k0 = K + hh * hk;
        if (!L.split) {
          const auto& km = L.k_up[size_t(hh)];
          kernels::matmul(
              {.w = km, .x = lat, .ldx = ldl, .m = n_kv, .y = k0, .ldy = q_dim, .row_begin = 0, .row_end = km.rows});
        } else {
          for (int j = 0; j < n_kv; ++j) expand_k(L, int(hh), lat + j * ldl, k0 + j * q_dim);
        }
        for (int j = 0; j < n_kv; ++j) std::copy_n(lat + j * ldl + lora, rope, k0 + j * q_dim + nope);
        const auto& vm = L.v_up[size_t(hh)];
        kernels::matmul({.w = vm,
                         .x = lat,
                         .ldx = ldl,
                         .m = n_kv,
                         .y = V + hh * hv,
                         .ldy = ldv,
                         .row_begin = 0,
                         .row_end = vm.rows});
      }
    });
    layers::attention(*pool_, {.q = q,
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
};

}  // namespace

std::unique_ptr<Model> make_deepseek2(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Deepseek2>(std::move(f), opt);
}

}  // namespace moelsp::arch
