// llama: dense Llama-style models, and Mixtral-style MoE when expert_count > 0
// (softmax over the router logits, top-k, weights renormalised over the k).
#include "decoder.h"

namespace moelsp::arch {
namespace {

struct LlamaLayer : DecoderLayer {
  layers::GqaWeights attn;
};

class Llama final : public Decoder<LlamaLayer> {
 public:
  Llama(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    // Hyperparameters (the common ones are read by Model).
    ModelConfig& c = cfg_;
    c.rope.type = RopeType::Norm;
    c.expert_weights_norm = true;
    c.gating = Gating::Softmax;
    c.n_ff_exp = c.n_ff;
    if (c.n_ff <= 0) throw ModelError(file_->path() + ": missing llama.feed_forward_length");

    // Tensors.
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      LlamaLayer L;
      L.load_norms(wl, c, il);
      L.attn = layers::load_gqa(wl, c, il);
      L.load_ffn(wl, c, il);  // MoE when expert_count > 0, else dense
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(c, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_k; }
  int kv_v_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_v; }

  // Forward: the decoder skeleton (decoder.h) with GQA attention.
  void attention(const LlamaLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    layers::gqa_attention(*pool_, cfg_, L.attn, seqs, il, h, n, out);
  }
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kLlamaFacts = {.keys = {"block_count", "embedding_length", "attention.head_count",
                                        "attention.layer_norm_rms_epsilon", "feed_forward_length"},
                               .tensors = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                           "attn_output.weight", "ffn_norm.weight"},
                               .one_of = {},
                               .device_unsupported = {}};

std::unique_ptr<Model> make_llama(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Llama>(std::move(f), opt);
}

}  // namespace moelsp::arch
