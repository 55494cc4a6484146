// glm-dsa: GLM-5, GLM-5.1, GLM-5.2 (DeepSeek-V3.2-style sparse attention).
//
// deepseek2's layer (MLA, DeepSeek-V3-style MoE after dense lead layers)
// with DeepSeek Sparse Attention: a lightning indexer scores every causal key
// for each query with a few small heads, and MLA then attends to only the
// top_k keys it kept (absorbed form, layers::mla_sparse). Layers marked
// "full" in attention.indexer.types run their own indexer; "shared" layers
// reuse the kept keys of the most recent full layer.
//
// The indexer's keys live in the paged KV cache next to the MLA latents: a
// row of layer il is [latent | k_pe] (the K part) then the indexer key (the V
// part, which MLA does not use), so block tables, prefix reuse and
// preemption cover them with no extra bookkeeping. Shared layers leave
// their indexer slot unused (GLM-5: 128 of 704 values per row).
//
// Cost per decoded token and layer: the indexer reads n_ctx keys of
// key_length values (GLM-5: 128, times 32 heads of dot products); attention
// reads top_k latents (2048 of 576 values) — where dense MLA would read n_ctx
// latents for each of 64 heads. bench/bench_dsa.cpp measures it.
//
// The NextN/MTP blocks at the end (nextn_predict_layers) are loaded with the
// file and not run, as in glm4moe.cpp: they are a draft head for speculative
// decoding, which would plug in after logits() over the last hidden state.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "../layers/mla.h"
#include "decoder.h"
#include "kernels/matmul.h"

namespace moelsp::arch {
namespace {

struct GlmDsaLayer : DecoderLayer {
  layers::MlaWeights attn;
  bool indexer = false;                    // a "full" layer: runs the indexer
  Weight idx_q_b, idx_k, idx_proj;         // {q_lora, H·D}, {n_embd, D}, {n_embd, H}
  std::vector<float> idx_k_norm, idx_k_b;  // LayerNorm of the indexer key [D]
};

class GlmDsa final : public Decoder<GlmDsaLayer> {
 public:
  GlmDsa(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    read_hparams();
    load_tensors();
    init_experts(expert_layers(cfg_, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.kv_lora_rank + cfg_.qk_rope; }  // [latent | k_pe]
  int kv_v_dim() const override { return idx_dim_; }                          // the indexer's key

 private:
  // Hyperparameters (the common ones are read by Model).
  void read_hparams() {
    ModelConfig& c = cfg_;
    const gguf::File& f = *file_;
    const std::string& a = c.arch;
    read_mla_config(f, c);
    read_moe_config(f, c, Gating::Sigmoid);
    const int nextn = int(opt<uint32_t>(f, a, "nextn_predict_layers", 0));
    if (nextn < 0 || nextn >= c.n_layer)
      throw ModelError(fmt::format("{}: {}.nextn_predict_layers {} with {} blocks", f.path(), a, nextn, c.n_layer));
    c.n_layer -= nextn;  // the MTP blocks are not run
    reset_moe_stats();
    idx_heads_ = int(req<uint32_t>(f, a, "attention.indexer.head_count"));
    idx_dim_ = int(req<uint32_t>(f, a, "attention.indexer.key_length"));
    top_k_ = int(req<uint32_t>(f, a, "attention.indexer.top_k"));
    if (idx_heads_ <= 0 || top_k_ <= 0 || idx_dim_ <= c.qk_rope)
      throw ModelError(fmt::format("{}: {}.attention.indexer: {} heads of {} (rope {}), top_k {}", f.path(), a,
                                   idx_heads_, idx_dim_, c.qk_rope, top_k_));
    // Which layers run the indexer: the file says, else GLM-5/5.1 (context
    // below 1 Mi) run it everywhere and GLM-5.2 in layers 0, 1, 2, 6, 10, …
    // (its config.json), as llama.cpp decides.
    full_.assign(size_t(c.n_layer), true);
    if (f.has(a + ".attention.indexer.types")) {
      std::vector<bool> types;
      try {
        types = f.get_array<bool>(a + ".attention.indexer.types");
      } catch (const gguf::GgufError& e) {
        throw ModelError(e.what());
      }
      if (types.size() < size_t(c.n_layer))
        throw ModelError(fmt::format("{}: {}.attention.indexer.types has {} entries for {} layers", f.path(), a,
                                     types.size(), c.n_layer));
      std::copy_n(types.begin(), c.n_layer, full_.begin());
    } else if (c.n_ctx_train >= 1048576) {
      for (int il = 0; il < c.n_layer; ++il) full_[size_t(il)] = il < 2 || (il - 2) % 4 == 0;
    }
    if (!full_[0])
      throw ModelError(fmt::format("{}: {}.attention.indexer.types: layer 0 must run the indexer", f.path(), a));
  }

  // Tensors.
  void load_tensors() {
    const ModelConfig& c = cfg_;
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = fmt::format("blk.{}.indexer.", il);
      GlmDsaLayer L;
      L.load_norms(wl, c, il);
      L.attn = layers::load_mla(wl, c, il);
      L.indexer = full_[size_t(il)];
      if (L.indexer) {
        L.idx_q_b = wl.get(b + "attn_q_b.weight", {c.q_lora_rank, int64_t(idx_heads_) * idx_dim_});
        L.idx_k = wl.get(b + "attn_k.weight", {c.n_embd, idx_dim_});
        L.idx_proj = wl.get(b + "proj.weight", {c.n_embd, idx_heads_});
        L.idx_k_norm = wl.vec(b + "k_norm.weight", idx_dim_);
        L.idx_k_b = wl.vec(b + "k_norm.bias", idx_dim_);
      }
      L.load_ffn(wl, c, il);  // dense for the first leading_dense_block_count layers, then MoE
      layers_.push_back(std::move(L));
    }
    if (c.q_lora_rank <= 0)
      throw ModelError(fmt::format("{}: {}.attention.q_lora_rank is required (the indexer reads the q latent)",
                                   file_->path(), c.arch));
  }

  // Forward: the decoder skeleton (decoder.h) with sparse MLA as its attention:
  //   q [n][n_head·(nope + rope)], qa [n][q_lora]; [c | k_pe] → cache       (layers::mla_qkv)
  //   full layer: kept [n][≤ top_k] = indexer(h, qa) over each query's causal keys
  //   shared layer: kept of the most recent full layer
  //   o [n][n_head·v] = MLA over the kept keys only                        (layers::mla_sparse)
  //   out [n][n_embd] = W_o · o
  void attention(const GlmDsaLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    const ModelConfig& c = cfg_;
    const layers::MlaQkv qkv = layers::mla_qkv(*pool_, c, L.attn, seqs, il, h, n);
    if (L.indexer) run_indexer(L, seqs, il, h, qkv.qa.data(), n);
    const int64_t q_dim = int64_t(c.n_head) * c.head_dim_k, ldo = int64_t(c.n_head) * c.head_dim_v;
    std::vector<float> o(size_t(n) * size_t(ldo));  // [n][n_head·v]
    for (const layers::SeqSpan& sp : seqs) {
      const layers::KeptKeys keys{.kept = kept_.data() + size_t(sp.begin) * size_t(top_k_),
                                  .n_kept = n_kept_.data() + sp.begin,
                                  .k_max = top_k_};
      layers::mla_sparse(*pool_, c, L.attn, il, sp, qkv.q.data() + sp.begin * q_dim, keys, o.data() + sp.begin * ldo);
    }
    layers::linear(*pool_, L.attn.wo.m, o.data(), n, out);
  }

  // The lightning indexer of a full layer: fills kept_/n_kept_ for the n rows.
  //   iq [n][H·D] = W_iq · qa,  ik [n][D] = LayerNorm(W_ik · h)    each head and the key [rope | nope]
  //   w [n][H] = W_proj · h / √(D·H)
  //   score(t, s) = Σ_h w_h(t) · ReLU(iq_h(t) · ik(s))  for s ≤ t;  kept = the top_k positions
  void run_indexer(const GlmDsaLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, const float* qa,
                   int n) {
    const ModelConfig& c = cfg_;
    const int H = idx_heads_, D = idx_dim_;
    std::vector<float> iq(size_t(n) * size_t(H) * size_t(D)), ik(size_t(n) * size_t(D)), w(size_t(n) * size_t(H));
    layers::linear(*pool_, L.idx_q_b.m, qa, n, iq.data());
    layers::linear(*pool_, L.idx_k.m, h, n, ik.data());
    layers::linear(*pool_, L.idx_proj.m, h, n, w.data());
    const float w_scale = 1.0f / std::sqrt(float(D) * float(H));
    for (float& v : w) v *= w_scale;
    kept_.assign(size_t(n) * size_t(top_k_), 0);
    n_kept_.assign(size_t(n), 0);
    for (const layers::SeqSpan& sp : seqs) {
      KvSequence& seq = *sp.seq;
      const kernels::DType kt = to_dtype(seq.pool().layout().type);
      const size_t v_at = *kernels::row_bytes(kt, uint64_t(kv_k_dim()));  // the indexer key follows [c | k_pe]
      for (int t = sp.begin; t < sp.begin + sp.n; ++t) {
        const int pos = sp.pos0 + t - sp.begin;
        float* k = ik.data() + size_t(t) * size_t(D);
        layer_norm(k, L.idx_k_norm.data(), L.idx_k_b.data(), D);  // eps 0: glm-dsa sets none
        layers::rope(k, 1, 0, 0, pos, c.rope);
        layers::rope(iq.data() + size_t(t) * size_t(H) * size_t(D), H, D, 0, pos, c.rope);
        layers::store_kv(kt, k, seq.row(il, pos) + v_at, D);
      }
      select_keys(seq.v_rows(il), sp, iq.data() + size_t(sp.begin) * size_t(H) * size_t(D),
                  w.data() + size_t(sp.begin) * size_t(H));
    }
  }

  // Scores [sp.n][n_kv] against the cached indexer keys, then the top_k per
  // query (every causal key while there are no more than top_k), ascending.
  void select_keys(const PagedRows& keys, const layers::SeqSpan& sp, const float* iq, const float* w) {
    const int H = idx_heads_, D = idx_dim_;
    const int64_t n_kv = sp.pos0 + sp.n;
    std::vector<float> score(size_t(sp.n) * size_t(n_kv));
    // Jobs: (query, range of keys), so one decoded token still spreads over the threads.
    constexpr int64_t kChunk = 1024;
    const int64_t chunks = (n_kv + kChunk - 1) / kChunk;
    pool_->parallel_for(int64_t(sp.n) * chunks, [&](int64_t jb, int64_t je) {
      std::vector<float> s, kbuf;
      for (int64_t job = jb; job < je; ++job) {
        const int t = int(job / chunks);
        const int64_t j0 = job % chunks * kChunk,
                      j1 = std::min<int64_t>(n_kv, std::min<int64_t>(j0 + kChunk, sp.pos0 + t + 1));
        float* out = score.data() + size_t(t) * size_t(n_kv);
        for (int64_t b0 = j0; b0 < j1;) {  // one cache block of consecutive rows at a time
          const int64_t b1 = std::min(j1, (b0 / keys.block_size + 1) * int64_t(keys.block_size));
          kernels::MatView kv{
              .data = keys.row(b0), .type = keys.type, .cols = D, .rows = b1 - b0, .row_bytes = keys.row_bytes};
          if (keys.type == kernels::DType::Q8_0) {
            kbuf.resize(size_t(b1 - b0) * size_t(D));
            for (int64_t j = b0; j < b1; ++j)
              kernels::dequantize_row(keys.type, keys.row(j), kbuf.data() + size_t(j - b0) * size_t(D), D);
            kv = {.data = kbuf.data(),
                  .type = kernels::DType::F32,
                  .cols = D,
                  .rows = b1 - b0,
                  .row_bytes = size_t(D) * sizeof(float)};
          }
          s.resize(size_t(H) * size_t(b1 - b0));
          // s [H][keys] = iq_h(t) · ik(j)
          kernels::matmul({.w = kv,
                           .x = iq + size_t(t) * size_t(H) * size_t(D),
                           .ldx = D,
                           .m = H,
                           .y = s.data(),
                           .ldy = b1 - b0,
                           .row_begin = 0,
                           .row_end = b1 - b0});
          const float* wt = w + size_t(t) * size_t(H);
          for (int64_t j = b0; j < b1; ++j) {
            float acc = 0;
            for (int hh = 0; hh < H; ++hh)
              acc += wt[hh] * std::max(0.0f, s[size_t(hh) * size_t(b1 - b0) + size_t(j - b0)]);
            out[j] = acc;
          }
          b0 = b1;
        }
      }
    });
    pool_->parallel_for(sp.n, [&](int64_t tb, int64_t te) {
      std::vector<int32_t> order;
      for (int64_t t = tb; t < te; ++t) {
        const int visible = int(sp.pos0 + t + 1);
        const int k = std::min(visible, top_k_);
        int32_t* kept = kept_.data() + size_t(sp.begin + t) * size_t(top_k_);
        order.resize(size_t(visible));
        std::iota(order.begin(), order.end(), 0);
        if (k < visible) {
          const float* sc = score.data() + size_t(t) * size_t(n_kv);
          std::nth_element(order.begin(), order.begin() + k, order.end(),
                           [&](int32_t a, int32_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
        }
        std::sort(order.begin(), order.begin() + k);
        std::copy_n(order.begin(), k, kept);
        n_kept_[size_t(sp.begin + t)] = k;
      }
    });
  }

  // y = (x − mean) / √var · w + b over n values (eps 0), in place.
  static void layer_norm(float* x, const float* w, const float* b, int n) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; ++i) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const float inv = float(1.0 / std::sqrt(var / n));
    for (int i = 0; i < n; ++i) x[i] = float((x[i] - mean) * inv) * w[i] + b[i];
  }

  int idx_heads_ = 0, idx_dim_ = 0, top_k_ = 0;
  std::vector<bool> full_;              // [n_layer]: runs its own indexer
  std::vector<int32_t> kept_, n_kept_;  // [n][top_k], [n]: the current kept keys (forward passes run one at a time)
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kGlmDsaFacts = {
    .keys = {"block_count", "embedding_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
             "attention.q_lora_rank", "attention.kv_lora_rank", "rope.dimension_count", "expert_count",
             "expert_used_count", "expert_feed_forward_length", "attention.indexer.head_count",
             "attention.indexer.key_length", "attention.indexer.top_k"},
    .tensors = {"attn_norm.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight",
                "ffn_norm.weight"},
    .one_of = {{{"attn_q.weight"}, {"attn_q_a.weight", "attn_q_b.weight"}},
               {{"attn_kv_b.weight"}, {"attn_k_b.weight", "attn_v_b.weight"}}},
    .device_unsupported = "glm-dsa's sparse attention (the lightning indexer) is not on the device yet"};

std::unique_ptr<Model> make_glm_dsa(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<GlmDsa>(std::move(f), opt);
}

}  // namespace moelsp::arch
