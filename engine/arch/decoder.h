// The pre-norm decoder every supported architecture is, written once:
//
//   x = embed(tokens)                                   x, h, y: [n][n_embd]
//   for each layer il:
//     x += attention_il(rms_norm(x, attn_norm))          the architecture's own
//     (the expert runtime predicts layer il + d's experts from x here)
//     x += ffn_il(rms_norm(x, ffn_norm))                 MoE or dense SwiGLU
//   logits = lm_head(rms_norm(x, output_norm))          [batch.logit_rows()][n_vocab]
//
// An architecture file derives its Model from Decoder<Layer> (its Layer from
// DecoderLayer): the constructor reads the hyperparameters and loads the
// tensors (load_norms, its attention's tensors, load_ffn, then
// init_experts), and attention() is its own forward code. Activations come
// from x_, h_ and y_, kept between passes (llama2.c's RunState), so a decode
// step allocates none of them once the largest pass has sized them.
#pragma once

#include <span>
#include <vector>

#include "../model/experts.h"
#include "arch.h"

namespace moelsp::arch {

struct DecoderLayer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  Weight gate, up, down;                   // a dense FFN layer: {n_embd, n_ff}, …, {n_ff, n_embd}
  layers::MoeWeights moe;                  // a MoE layer (cfg.is_moe_layer)

  // blk.{il}.attn_norm and the pre-FFN norm: ffn_norm, or post_attention_norm
  // in the files of glm4moe and gpt-oss (the same place in the layer).
  void load_norms(const WeightLoader& wl, const ModelConfig& c, int il);  // attn_norm and c.ffn_norm
  // The FFN: routed (and shared) experts where cfg.is_moe_layer(il), else a dense SwiGLU.
  void load_ffn(const WeightLoader& wl, const ModelConfig& c, int il);
};

template <class Layer>
class Decoder : public Model {
 protected:
  using Model::Model;

  // out [n][n_embd] = the layer's attention over h [n][n_embd] (normed), for
  // the batch's sequences (each appends its new rows to its KV cache).
  virtual void attention(const Layer& L, std::span<const layers::SeqSpan> seqs, int il, const float* h, int n,
                         float* out) = 0;

  size_t repack_experts() override {
    const size_t before = repacked_weight_bytes();
    for (int il = 0; il < cfg_.n_layer; ++il)
      if (cfg_.is_moe_layer(il)) {
        layers::MoeWeights& w = layers_[size_t(il)].moe;
        for (Weight* m : {&w.gate, &w.up, &w.down}) repack_dense(*m);
      }
    const size_t n = repacked_weight_bytes() - before;
    if (n > 0 && experts_) init_experts(expert_layers(cfg_, layers_));  // the runtime's views, anew
    return n;
  }

  void forward_impl(const Batch& batch, float* logits, const CancelCheck& cancel) override {
    const ModelConfig& c = cfg_;
    const auto seqs = layers::seq_spans(batch);
    const int n = int(batch.tokens.size());
    const size_t nd = size_t(n) * size_t(c.n_embd);
    x_.assign(nd, 0.0f);
    h_.assign(nd, 0.0f);
    y_.assign(nd, 0.0f);
    float* x = x_.data();  // [n][n_embd] the residual stream
    float* h = h_.data();  // [n][n_embd] a block's normed input
    float* y = y_.data();  // [n][n_embd] a block's output
    emb_.embed(batch.tokens, c.n_embd, x);
    for (int il = 0; il < c.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      layers::rms_norm(x, L.attn_norm.data(), c.n_embd, c.rms_eps, h, n);
      attention(L, seqs, il, h, n, y);
      layers::add(x, y, nd);
      if (experts_) experts_->predict(*pool_, il, x, n);  // layer il + d's experts, from here
      layers::rms_norm(x, L.ffn_norm.data(), c.n_embd, c.rms_eps, h, n);
      if (c.is_moe_layer(il))
        layers::moe(*pool_, c, L.moe, h, n, y,
                    {.stats = &moe_stats_[size_t(il)], .experts = experts_.get(), .layer = il});
      else layers::swiglu(*pool_, L.gate.m, L.up.m, L.down.m, h, n, y);
      layers::add(x, y, nd);
      if (cancel && cancel()) throw Cancelled();
    }
    emb_.logits(*pool_, c, x, batch, logits);
  }

  Embeddings emb_;
  std::vector<Layer> layers_;
  std::vector<float> x_, h_, y_;  // the activations above; forward passes run one at a time
};

}  // namespace moelsp::arch
