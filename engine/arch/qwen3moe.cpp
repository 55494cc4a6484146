// qwen3moe (Qwen3-Coder-30B-A3B, Qwen3-30B-A3B): GQA with per-head q/k
// RMSNorm before NeoX RoPE; every layer MoE, softmax router, top-k,
// weights renormalised (llama.cpp always renormalises for this architecture).
#include "decoder.h"

namespace moelsp::arch {
namespace {

struct Qwen3MoeLayer : DecoderLayer {
  layers::GqaWeights attn;  // q/k/v/o and the per-head q/k norms
};

class Qwen3Moe final : public Decoder<Qwen3MoeLayer> {
 public:
  Qwen3Moe(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    // Hyperparameters (the common ones are read by Model).
    ModelConfig& c = cfg_;
    c.rope.type = RopeType::Neox;
    c.qk_norm = true;
    c.gating = Gating::Softmax;
    c.expert_weights_norm = true;
    c.n_ff_exp = int(req<uint32_t>(*file_, c.arch, "expert_feed_forward_length"));
    if (c.n_expert <= 0) throw ModelError(file_->path() + ": qwen3moe without qwen3moe.expert_count");

    // Tensors.
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      Qwen3MoeLayer L;
      L.load_norms(wl, c, il);
      L.attn = layers::load_gqa(wl, c, il);
      L.load_ffn(wl, c, il);  // MoE in every layer
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(c, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_k; }
  int kv_v_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_v; }

  // Forward: the decoder skeleton (decoder.h) with GQA attention, q and k normed per head inside.
  void attention(const Qwen3MoeLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    layers::gqa_attention(*pool_, cfg_, L.attn, seqs, il, h, n, out);
  }
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kQwen3moeFacts = {
    .keys = {"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_feed_forward_length"},
    .tensors = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight"},
    .one_of = {},
    .device_unsupported = {}};

std::unique_ptr<Model> make_qwen3moe(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Qwen3Moe>(std::move(f), opt);
}

}  // namespace moelsp::arch
