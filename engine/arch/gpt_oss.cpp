// gpt-oss (gpt-oss-20b, gpt-oss-120b; llama.cpp's LLM_ARCH_OPENAI_MOE).
//
// GQA with q/k/v/o biases, NeoX RoPE with YaRN on every head dim (cos and sin
// scaled by 1 + 0.1·ln factor), and per-head attention sinks: a learned logit
// that joins each softmax's denominator only. Layers alternate a sliding
// window (even layers: query t sees keys t − window + 1 … t) with full
// causal attention. Every layer is MoE, no shared experts: the router's
// logits (+ bias) pick the top k, their softmax weighs them; experts have
// biases and the clamped SwiGLU (ModelConfig::swiglu_oai). The experts are
// MXFP4 in the released files. The pre-FFN norm is post_attention_norm; the
// lm_head is its own output.weight.
#include <fmt/format.h>

#include "decoder.h"

namespace moelsp::arch {
namespace {

struct GptOssLayer : DecoderLayer {
  layers::GqaWeights attn;  // q/k/v/o and their biases, sinks, this layer's window
};

class GptOss final : public Decoder<GptOssLayer> {
 public:
  GptOss(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Decoder(std::move(file), options) {
    // Hyperparameters (the common ones are read by Model).
    ModelConfig& c = cfg_;
    const gguf::File& f = *file_;
    c.rope.type = RopeType::Neox;
    c.gating = Gating::SoftmaxChosen;
    c.swiglu_oai = true;
    c.ffn_norm = "post_attention_norm";
    c.n_ff_exp = int(req<uint32_t>(f, c.arch, "expert_feed_forward_length"));
    if (c.n_expert <= 0) throw ModelError(fmt::format("{}: {} without {}.expert_count", f.path(), c.arch, c.arch));
    const int window = int(req<uint32_t>(f, c.arch, "attention.sliding_window"));
    // Which layers slide: every `pattern`-th layer is full, the others use the
    // window; gpt-oss files carry no pattern key and alternate, window first.
    const int pattern = int(opt<uint32_t>(f, c.arch, "attention.sliding_window_pattern", 2));
    if (window <= 0 || pattern <= 0)
      throw ModelError(
          fmt::format("{}: {}.attention.sliding_window {} (pattern {})", f.path(), c.arch, window, pattern));
    for (int il = 0; il < c.n_layer; ++il) c.layer_window.push_back(il % pattern < pattern - 1 ? window : 0);

    // Tensors.
    const WeightLoader wl(f);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      GptOssLayer L;
      L.load_norms(wl, c, il);
      L.attn = layers::load_gqa(wl, c, il);
      if (L.attn.sinks.empty())
        throw ModelError(fmt::format("{}: missing tensor 'blk.{}.attn_sinks.weight'", f.path(), il));
      L.attn.window = c.window(il);
      L.load_ffn(wl, c, il);  // MoE in every layer
      if (L.moe.router_bias.empty() || L.moe.gate_b.empty() || L.moe.up_b.empty() || L.moe.down_b.empty())
        throw ModelError(fmt::format("{}: layer {} lacks the router or expert biases gpt-oss has", f.path(), il));
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(c, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_k; }
  int kv_v_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_v; }

  // Forward: the decoder skeleton (decoder.h) with GQA attention:
  //   q [n][n_head·hd], k, v [n][n_head_kv·hd] = W·h + b;  NeoX YaRN RoPE on q, k
  //   p = softmax over the visible keys (window on even layers) with the head's sink in the denominator
  //   out [n][n_embd] = W_o · p v + b_o
  void attention(const GptOssLayer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                 float* out) override {
    layers::gqa_attention(*pool_, cfg_, L.attn, seqs, il, h, n, out);
  }
};

}  // namespace

// What a file must hold (inspect checks it before a load) and the device pass's support.
const ArchFacts kGptOssFacts = {
    .keys = {"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "attention.sliding_window", "expert_count", "expert_used_count",
             "expert_feed_forward_length"},
    .tensors = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                "attn_sinks.weight", "post_attention_norm.weight"},
    .one_of = {},
    .device_unsupported = {}};

std::unique_ptr<Model> make_gpt_oss(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<GptOss>(std::move(f), opt);
}

}  // namespace moelsp::arch
