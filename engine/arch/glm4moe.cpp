// glm4moe: GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7 (not GLM-4.7-Flash, which
// is deepseek2 with MLA).
//
// GQA with q/k/v biases and a per-head q/k RMSNorm (when the file has the
// norms), then NeoX RoPE on the first rope.dimension_count dims of each head
// only (partial_rotary_factor 0.5: dim i pairs with i + n_dims/2, the rest
// pass through). The first leading_dense_block_count layers are a dense
// SwiGLU, the rest DeepSeek-V3-style MoE: sigmoid scores, selection bias
// (exp_probs_b), the chosen unbiased scores renormalised and scaled, plus a
// shared expert. The pre-FFN norm is called post_attention_norm.
//
// block_count includes nextn_predict_layers NextN/MTP blocks at the end (a
// full decoder layer plus eh_proj, enorm, hnorm, shared_head_norm), which
// predict the token after next for speculative decoding. Generation does not
// run them (llama.cpp neither): they would plug in as a draft model over
// this model's last hidden state, after logits() — see docs/design.md.
#include <fmt/format.h>

#include "decoder.h"

namespace moelsp::arch {
namespace {

struct Glm4MoeLayer : DecoderLayer {
  layers::GqaWeights attn;  // q/k/v/o, their biases, the optional per-head q/k norms
};

class Glm4Moe final : public Decoder<Glm4MoeLayer> {
 public:
  Glm4Moe(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    // Hyperparameters (the common ones are read by Model).
    ModelConfig& c = cfg_;
    const gguf::File& f = *file_;
    c.rope.type = RopeType::Neox;
    c.ffn_norm = "post_attention_norm";
    read_moe_config(f, c, Gating::Sigmoid);
    const int nextn = int(opt<uint32_t>(f, c.arch, "nextn_predict_layers", 0));
    if (nextn < 0 || nextn >= c.n_layer)
      throw ModelError(
          fmt::format("{}: {}.nextn_predict_layers {} with {} blocks", f.path(), c.arch, nextn, c.n_layer));
    c.n_layer -= nextn;  // the MTP blocks are not run
    if (c.rope.n_dims > c.head_dim_k || c.rope.n_dims % 2)
      throw ModelError(fmt::format("{}: {}.rope.dimension_count {} does not fit head size {}", f.path(), c.arch,
                                   c.rope.n_dims, c.head_dim_k));
    reset_moe_stats();

    // Tensors.
    const WeightLoader wl(f);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      Glm4MoeLayer L;
      L.load_norms(wl, c, il);
      L.attn = layers::load_gqa(wl, c, il);
      L.load_ffn(wl, c, il);  // dense for the leading layers, then MoE with a shared expert
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(c, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_k; }
  int kv_v_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_v; }

  // Forward: the decoder skeleton (decoder.h) with GQA attention:
  //   q [n][n_head·hd], k, v [n][n_head_kv·hd] = W·h + b
  //   q, k ← rms_norm per head (hd) → NeoX RoPE on dims [0, rope.n_dims) of each head
  //   out [n][n_embd] = W_o · softmax(q·kᵀ/√hd) v
  void attention(const Glm4MoeLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    layers::gqa_attention(*pool_, cfg_, L.attn, seqs, il, h, n, out);
  }
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kGlm4moeFacts = {
    .keys = {"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "rope.dimension_count", "expert_count", "expert_used_count",
             "expert_feed_forward_length", "leading_dense_block_count", "feed_forward_length"},
    .tensors = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                "post_attention_norm.weight"},
    .one_of = {},
    .device_unsupported = {}};

std::unique_ptr<Model> make_glm4moe(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Glm4Moe>(std::move(f), opt);
}

}  // namespace moelsp::arch
