// llama: dense Llama-style models, and Mixtral-style MoE when expert_count > 0
// (softmax over the router logits, top-k, weights renormalised over the k).
#include <fmt/format.h>

#include "../model/experts.h"
#include "arch.h"

namespace moelsp::arch {
namespace {

class Llama final : public Model {
 public:
  Llama(std::unique_ptr<gguf::File> file, const LoadOptions& options) : Model(std::move(file), options) {
    ModelConfig& c = cfg_;
    c.rope.type = RopeType::Norm;
    c.expert_weights_norm = true;
    c.gating = Gating::Softmax;
    c.n_ff_exp = c.n_ff;
    if (c.n_ff <= 0) throw ModelError(file_->path() + ": missing llama.feed_forward_length");
    const WeightLoader wl(*file_);
    emb_.load(wl, c);
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = fmt::format("blk.{}.", il);
      Layer L;
      L.attn_norm = wl.vec(b + "attn_norm.weight", c.n_embd);
      L.ffn_norm = wl.vec(b + "ffn_norm.weight", c.n_embd);
      L.attn = layers::load_gqa(wl, c, il);
      if (c.n_expert > 0) {
        L.moe = layers::load_moe(wl, c, il);
      } else {
        L.gate = wl.get(b + "ffn_gate.weight", {c.n_embd, c.n_ff});
        L.up = wl.get(b + "ffn_up.weight", {c.n_embd, c.n_ff});
        L.down = wl.get(b + "ffn_down.weight", {c.n_ff, c.n_embd});
      }
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
      // attention block: x += attn(norm(x))
      layers::rms_norm(x.data(), L.attn_norm.data(), c.n_embd, c.rms_eps, h.data(), n);
      layers::gqa_attention(*pool_, c, L.attn, seqs, il, h.data(), n, y.data());
      layers::add(x.data(), y.data(), nd);
      // feed-forward block: x += ffn(norm(x))
      if (experts_) experts_->predict(*pool_, il, x.data(), n);  // layer il + d's experts, from here
      layers::rms_norm(x.data(), L.ffn_norm.data(), c.n_embd, c.rms_eps, h.data(), n);
      if (c.n_expert > 0)
        layers::moe(*pool_, c, L.moe, h.data(), n, y.data(), {&moe_stats_[size_t(il)], experts_.get(), il});
      else layers::swiglu(*pool_, L.gate.m, L.up.m, L.down.m, h.data(), n, y.data());
      layers::add(x.data(), y.data(), nd);
      if (cancel && cancel()) throw Cancelled();
    }
    emb_.logits(*pool_, c, x.data(), batch, logits);  // [batch.logit_rows()][n_vocab]
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    layers::GqaWeights attn;
    Weight gate, up, down;  // dense
    layers::MoeWeights moe;
  };
  Embeddings emb_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_llama(std::unique_ptr<gguf::File> f, const LoadOptions& opt) {
  return std::make_unique<Llama>(std::move(f), opt);
}

}  // namespace moelsp::arch
