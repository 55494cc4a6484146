// deepseek2: DeepSeek-V2/V3, DeepSeek-Coder-V2-Lite, GLM-4.7-Flash.
//
// Multi-head latent attention (layers/mla.h: the cache holds one compressed
// latent plus a shared RoPE key per token and layer; plain or absorbed form,
// whichever costs less). The first leading_dense_block_count layers are
// dense; the rest are MoE with shared experts, softmax or sigmoid gating,
// optional selection bias and group limit.
#include "../layers/mla.h"
#include "decoder.h"

namespace moelsp::arch {
namespace {

struct Deepseek2Layer : DecoderLayer {
  layers::MlaWeights attn;
};

class Deepseek2 final : public Decoder<Deepseek2Layer> {
 public:
  Deepseek2(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    // Hyperparameters (the common ones are read by Model).
    read_mla_config(*file_, cfg_);
    read_moe_config(*file_, cfg_);

    // Tensors.
    const WeightLoader wl(*file_);
    emb_.load(wl, cfg_);
    for (int il = 0; il < cfg_.n_layer; ++il) {
      Deepseek2Layer L;
      L.load_norms(wl, cfg_, il);
      L.attn = layers::load_mla(wl, cfg_, il);
      L.load_ffn(wl, cfg_, il);  // dense for the first leading_dense_block_count layers, then MoE
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(cfg_, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.kv_lora_rank + cfg_.qk_rope; }  // [latent | k_pe]
  int kv_v_dim() const override { return 0; }

  // Forward: the decoder skeleton (decoder.h) with MLA as its attention:
  //   q [n][n_head·(nope + rope)] = W_qb · rms_norm(W_qa · h)   (or W_q · h)
  //   [c | k_pe] [n][lora + rope] = W_kva · h → cache (c normed, k_pe rotated)
  //   o [n][n_head·v] = attention, plain or absorbed (layers/mla.h)
  //   out [n][n_embd] = W_o · o
  void attention(const Deepseek2Layer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    layers::mla_attention(*pool_, cfg_, L.attn, seqs, il, h, n, out);
  }
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kDeepseek2Facts = {
    .keys = {"block_count", "embedding_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
             "attention.kv_lora_rank", "attention.key_length", "attention.value_length", "rope.dimension_count",
             "expert_count", "expert_used_count", "expert_feed_forward_length", "leading_dense_block_count",
             "feed_forward_length"},
    .tensors = {"attn_norm.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight",
                "ffn_norm.weight"},
    .one_of = {{{"attn_q.weight"}, {"attn_q_a.weight", "attn_q_b.weight"}},
               {{"attn_kv_b.weight"}, {"attn_k_b.weight", "attn_v_b.weight"}}},
    .device_unsupported = {}};

std::unique_ptr<Model> make_deepseek2(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Deepseek2>(std::move(f), opt);
}

}  // namespace moelsp::arch
