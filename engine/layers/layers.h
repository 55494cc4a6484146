// Building blocks of the forward passes. Activations are row-major f32
// matrices: one row per token. All loops that matter run on the ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "../cpu/thread_pool.h"
#include "../model/weights.h"
#include "engine/model.h"
#include "kernels/convert.h"
#include "kernels/hd_route.h"
#include "kernels/quantize.h"

namespace moelsp {
class ExpertRuntime;
}

namespace moelsp::layers {

// y[m][w.rows] = x[m][w.cols] · Wᵀ, rows split across threads. x is quantized
// once for the int8 kernels (not once per thread or per chunk of rows); pass
// xq (quantize_input) to share that between several matrices with one input.
void linear(ThreadPool& pool, const kernels::MatView& w, const float* x, int64_t m, float* y,
            const kernels::QuantizedActs* xq = nullptr);
// Several matrices over the same x in one parallel loop (q, k and v; MLA's
// q_a and kv_a): x quantized once, and one loop's wake-up and tail instead of
// one per matrix (k and v alone are loops too short to stream at full speed).
// Every w has x's width. The values are linear()'s, one matrix at a time.
struct LinearOut {
  const kernels::MatView* w;
  float* y;  // [m][w->rows]
};
void linear_fused(ThreadPool& pool, std::span<const LinearOut> outs, const float* x, int64_t m,
                  const kernels::QuantizedActs* xq = nullptr);
// x[m][w.cols] quantized as linear() would for w (rows spread over the threads
// when there are many); `out` serves every matrix whose weights take the same
// block format (the others quantize for themselves).
void quantize_input(ThreadPool& pool, const kernels::MatView& w, const float* x, int64_t m,
                    kernels::QuantizedActs& out);

// y = x / sqrt(mean(x²) + eps) · w, for each of m rows of n (y may alias x).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m = 1, int64_t ld = -1);

// Rotates `n_heads` vectors at x + h·stride + offset (each cfg.n_dims long) for
// position `pos`: adjacent pairs (Norm) or halves (Neox), with YaRN if set.
void rope(float* x, int n_heads, int64_t stride, int64_t offset, int pos, const RopeConfig& cfg);
// cos/sin of pair i < min(n_dims / 2, 512) at position `pos` (ggml's
// rope_yarn, YaRN's ramp and scale included): what rope() rotates by, and the
// tables the device forward pass uploads.
void rope_angles(const RopeConfig& cfg, int pos, float* cs, float* sn);
// Fills cfg.corr_low/high from the YaRN parameters.
void rope_yarn_init(RopeConfig& cfg);

// A batch's sequences as the layers see them: activation rows [begin, begin + n)
// belong to `seq`, at positions pos0 onward.
struct SeqSpan {
  KvSequence* seq = nullptr;
  int begin = 0, n = 0, pos0 = 0;
};
std::vector<SeqSpan> seq_spans(const Batch& b);

// FloatBuf for a layer's temporaries, which the code overwrites in full: an
// allocator that leaves new elements uninitialized, where std::vector's
// value-initialization zeroed them first (memset was ~5 % of a qwen3moe-mid
// prompt's time, spent on buffers written again at once).
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using FloatBuf = std::vector<float, UninitAllocator<float>>;

// Writes one KV row part (n floats) in the cache's type.
inline void store_kv(kernels::DType t, const float* src, uint8_t* dst, int64_t n) {
  if (t == kernels::DType::F16) kernels::fp32_to_fp16_row(src, reinterpret_cast<uint16_t*>(dst), size_t(n));
  else kernels::quantize_row(t, src, dst, n);
}

// Causal attention of n_tokens queries at positions pos0.. over keys/values at
// positions [0, pos0 + t] for query t. Head h reads kv head h / (n_head / n_head_kv).
struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens][ldq], head h at h·hd_k
  int64_t ldq = 0;
  PagedRows k, v;  // per position: kv head g's key at element g·hd_k of k's row, value at g·hd_v of v's
  int n_tokens = 0, pos0 = 0;
  int n_head = 0, n_head_kv = 0, hd_k = 0, hd_v = 0;
  float scale = 1.0f;
  int window = 0;                // > 0: query t sees only keys t − window + 1 … t (sliding window)
  const float* sinks = nullptr;  // [n_head] or null: a logit per head in the softmax's denominator only
  float* out = nullptr;          // [n_tokens][ldo], head h at h·hd_v
  int64_t ldo = 0;
};
void attention(ThreadPool& pool, const AttentionArgs& a);
// Several sequences' attention (a batch of decode steps) in one parallel loop;
// each sequence's results are the bits attention() gives it alone.
void attention(ThreadPool& pool, std::span<const AttentionArgs> batch);

// down(silu(gate·x) ⊙ up·x) for m rows; out [m][down.rows].
void swiglu(ThreadPool& pool, const kernels::MatView& gate, const kernels::MatView& up, const kernels::MatView& down,
            const float* x, int64_t m, float* out);

struct MoeWeights {
  Weight router;                               // {n_embd, n_expert}
  std::vector<float> router_bias;              // [n_expert] added to the logits (gpt-oss), empty when absent
  std::vector<float> selection_bias;           // exp_probs_b: added to scores for selection only
  std::vector<float> gate_b, up_b, down_b;     // [n_expert][rows] expert biases (gpt-oss), empty when absent
  Weight gate, up, down;                       // 3-D: {n_embd, n_ff_exp, n_expert}, …, {n_ff_exp, n_embd, n_expert}
  Weight shared_gate, shared_up, shared_down;  // optional fused shared experts
};

// Per-layer routing statistics (accumulated), for metrics.
using MoeStats = MoeLayerStats;

// The routed-expert tensors of layer `il` (router, gate/up/down experts of
// n_ff_exp rows, optional exp_probs_b selection bias and fused shared experts).
MoeWeights load_moe(const WeightLoader& wl, const ModelConfig& c, int il);

// The MoE layer's definition, one for the CPU pass (moe() below) and the
// device pass (device/forward.cpp): the router's parameters (kernels/hd_route.h
// routes a token with them, on either), and the expert activation of one
// token's rows, h = act(g + b_g, u + b_u): SwiGLU, or gpt-oss's clamped form
// (ModelConfig::swiglu_oai, kernels/hd_activations.h); biases may be null.
kernels::hd::RouteParams route_params(const ModelConfig& cfg);
void expert_activation(bool oai, const float* g, const float* u, const float* gb, const float* ub, float* h, int64_t n);

// The router's choice for m rows of x: chosen [m][k] experts and their
// combine weights [m][k] (gating, selection bias, group limit, top-k, norm).
void route(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t m, int* chosen,
           float* weight);

// What a MoE layer reports to and reads from: statistics, and the expert
// runtime (engine/model/experts.h) that predicts, prefetches and caches.
struct MoeHooks {
  MoeStats* stats = nullptr;
  ExpertRuntime* experts = nullptr;
  int layer = -1;
};

// Router → top-k (with optional group limit) → weighted SwiGLU experts (+ shared).
void moe(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t m, float* out,
         const MoeHooks& hooks = {});

}  // namespace moelsp::layers

namespace moelsp::layers {

// Grouped-query self-attention of one layer: projections (+ biases where the
// file has them: glm4moe, gpt-oss), optional per-head q/k RMSNorm (qwen3,
// glm4moe), RoPE on the first rope.n_dims of each head, append to the KV
// cache, causal attention (optionally windowed, with sinks: gpt-oss), output
// projection (+ bias). h [n][n_embd] → out [n][n_embd].
struct GqaWeights {
  Weight wq, wk, wv, wo;
  std::vector<float> bq, bk, bv, bo;  // biases, empty when absent
  std::vector<float> q_norm, k_norm;  // per head (head_dim), empty when absent
  std::vector<float> sinks;           // [n_head] attention sinks, empty when absent
  int window = 0;                     // sliding window of this layer, 0 = full causal
};
void gqa_attention(ThreadPool& pool, const ModelConfig& c, const GqaWeights& w, std::span<const SeqSpan> seqs,
                   int layer, const float* h, int n, float* out);
// q/k norms are required when c.qk_norm and loaded when present otherwise;
// biases and sinks are loaded when present.
GqaWeights load_gqa(const WeightLoader& wl, const ModelConfig& c, int layer);

// y[m][b.size()] += b for each row.
void add_bias(float* y, const std::vector<float>& b, int64_t m);

// Adds `y` into `x` (residual connection).
inline void add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace moelsp::layers
