// qwen3moe (Qwen3-Coder-30B-A3B, Qwen3-30B-A3B): GQA with per-head q/k
// RMSNorm before NeoX RoPE; every layer MoE, softmax router, top-k,
// weights renormalised (llama.cpp always renormalises for this architecture).
#include <fmt/format.h>

#include "../model/experts.h"
#include "arch.h"

namespace moelsp::arch {
namespace {

class Qwen3Moe final : public Model {
 public:
  Qwen3Moe(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Model(std::move(file), options) {
    ModelConfig& c = cfg_;
    c.rope.type = RopeType::Neox;
    c.qk_norm = true;
    c.gating = Gating::Softmax;
    c.expert_weights_norm = true;
    c.n_ff_exp = int(req<uint32_t>(*file_, c.arch, "expert_feed_forward_length"));
    if (c.n_expert <= 0) throw ModelError(file_->path() + ": qwen3moe without qwen3moe.expert_count");
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = fmt::format("blk.{}.", il);
      Layer L;
      L.attn_norm = wl.vec(b + "attn_norm.weight", c.n_embd);
      L.ffn_norm = wl.vec(b + "ffn_norm.weight", c.n_embd);
      L.attn = layers::load_gqa(wl, c, il);
      L.moe = layers::load_moe(wl, c, il);
      layers_.push_back(std::move(L));
    }
    init_experts(expert_layers(c, layers_));
  }

 protected:
  int kv_k_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_k; }
  int kv_v_dim() const override { return cfg_.n_head_kv * cfg_.head_dim_v; }

  void forward_impl(const Batch& batch, float* logits, const CancelCheck& cancel) override {
    const ModelConfig& c = cfg_;
    const auto tokens = std::span(batch.tokens);
    const auto seqs = layers::seq_spans(batch);
    const int n = int(tokens.size());
    const size_t nd = size_t(n) * size_t(c.n_embd);
    std::vector<float> x(nd), h(nd), y(nd);  // [n][n_embd]
    emb_.embed(tokens, c.n_embd, x.data());
    for (int il = 0; il < c.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      // attention: x += attn(norm(x)), q/k normed per head inside
      layers::rms_norm(x.data(), L.attn_norm.data(), c.n_embd, c.rms_eps, h.data(), n);
      layers::gqa_attention(*pool_, c, L.attn, seqs, il, h.data(), n, y.data());
      layers::add(x.data(), y.data(), nd);
      // MoE: x += moe(norm(x))
      if (experts_) experts_->predict(*pool_, il, x.data(), n);  // layer il + d's experts, from here
      layers::rms_norm(x.data(), L.ffn_norm.data(), c.n_embd, c.rms_eps, h.data(), n);
      layers::moe(*pool_, c, L.moe, h.data(), n, y.data(), {&moe_stats_[size_t(il)], experts_.get(), il});
      layers::add(x.data(), y.data(), nd);
      if (cancel && cancel()) throw Cancelled();
    }
    emb_.logits(*pool_, c, x.data(), batch, logits);  // [batch.logit_rows()][n_vocab]
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    layers::GqaWeights attn;
    layers::MoeWeights moe;
  };
  Embeddings emb_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_qwen3moe(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Qwen3Moe>(std::move(f), opt);
}

}  // namespace moelsp::arch
