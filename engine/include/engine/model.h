// A loaded model: configuration from GGUF metadata, weights mapped from the
// file, a tokenizer, and the forward pass of its architecture.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kv.h"
#include "engine/tokenizer.h"

namespace moelsp {

namespace gguf {
class File;
}
class ThreadPool;
class ExpertRuntime;
namespace device {
class DeviceForward;
}
struct ExpertLayer;

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class RopeType { Norm, Neox };  // rotate adjacent pairs / the two halves of the rotated dims

struct RopeConfig {
  int n_dims = 0;
  float freq_base = 10000.0f;
  RopeType type = RopeType::Norm;
  // YaRN (rope.scaling.type = yarn): frequencies interpolated by 1/factor
  // below the correction range, extrapolated above it.
  bool yarn = false;
  float freq_scale = 1.0f;  // 1 / rope.scaling.factor
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;  // scale applied to cos/sin
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
  float corr_low = 0, corr_high = 0;  // YaRN correction range in pair indices
};

// How router logits become expert weights: softmax over all experts, or
// sigmoid scores (both then pick the top k, optionally renormalised), or
// (gpt-oss) pick the top k logits and softmax over those k only.
enum class Gating { Softmax, Sigmoid, SoftmaxChosen };

struct ModelConfig {
  std::string arch;
  std::string name;
  int n_vocab = 0, n_embd = 0, n_layer = 0, n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0;
  int head_dim_k = 0, head_dim_v = 0;  // per head, as attention sees them
  float rms_eps = 1e-6f;
  float kq_scale = 1.0f;
  RopeConfig rope;
  bool qk_norm = false;  // qwen3: per-head RMSNorm of q and k
  // Per layer: the sliding window's size, 0 for full causal attention (empty:
  // every layer full). Set by the architecture (gpt-oss); both passes read it.
  std::vector<int> layer_window;
  // The norm ahead of the FFN, "blk.N.{ffn_norm}.weight": ffn_norm, or
  // post_attention_norm (glm4moe, gpt-oss). Set by the architecture.
  std::string ffn_norm = "ffn_norm";
  // Feed-forward
  int n_ff = 0;      // dense layers
  int n_ff_exp = 0;  // one routed expert
  int n_expert = 0, n_expert_used = 0, n_expert_shared = 0;
  int n_layer_dense_lead = 0;  // the first layers are dense (deepseek2)
  Gating gating = Gating::Softmax;
  bool expert_weights_norm = false;
  float expert_weights_scale = 1.0f;
  int n_group = 1, n_group_used = 1;
  // gpt-oss's expert activation: min(g, 7)·σ(1.702·min(g, 7))·(clamp(u, −7, 7) + 1)
  // in place of SwiGLU's silu(g)·u (kernels/hd_activations.h).
  bool swiglu_oai = false;
  // MLA (deepseek2)
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0;

  bool is_moe_layer(int il) const { return n_expert > 0 && il >= n_layer_dense_lead; }
  int window(int il) const { return size_t(il) < layer_window.size() ? layer_window[size_t(il)] : 0; }
};

// One sequence's share of a forward pass: the next `n_tokens` tokens of the
// batch, at positions seq->n_past() onward. Its KV rows go into the
// sequence's blocks (reserved beforehand with KvSequence::reserve).
struct BatchSeq {
  KvSequence* seq = nullptr;
  int n_tokens = 0;
  bool all_logits = false;  // a logits row for every token, else for the last one only
};

// Several sequences advanced by one forward pass: every weight matrix streams
// once for all of their tokens (continuous batching's decode steps, and
// prompt chunks riding along with them).
struct Batch {
  std::vector<TokenId> tokens;  // the sequences' tokens, one after the other
  std::vector<BatchSeq> seqs;
  void add(KvSequence& seq, std::span<const TokenId> toks, bool all_logits = false);
  int logit_rows() const;  // rows forward() writes, in sequence order
};

// Returns true to abandon the forward pass (checked between layers).
using CancelCheck = std::function<bool()>;

class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("cancelled") {}
};

// Routing statistics of one MoE layer, accumulated over forward passes.
struct MoeLayerStats {
  std::vector<int64_t> expert_tokens;               // tokens routed to each expert
  double thread_load_max = 0, thread_load_min = 0;  // planned work of the busiest / idlest thread, summed
  int64_t calls = 0;
  // How evenly the router spreads tokens over experts: the entropy of the
  // distribution over log(experts), 1 = uniform (0 with no tokens).
  double entropy() const;
  // How evenly the expert work was split over threads: (max − min) / max.
  double thread_imbalance() const;
};

// How routed experts' bytes are managed (engine/model/experts.cpp). Set from
// the plan (engine/plan.h): prefetch when the weights stream from the file.
struct ExpertOptions {
  // Predict each token's experts `distance` layers ahead: layer l+d's router
  // on layer l's residual stream, or — per layer, when it has been the more
  // accurate so far — the experts the previous token used there.
  bool predict = false;
  bool prefetch = false;         // and request their bytes (madvise WILLNEED + touch, on a helper thread)
  int distance = 1;              // layers ahead
  uint64_t cache_bytes = 0;      // the most-routed experts held in RAM (0: none)
  bool pin = true;               // hold them by mlock of their file pages; false (or lock refused): copies
  int cache_swaps_per_step = 4;  // experts copied in per forward pass at most (bounds the added latency)
  bool populate = false;         // request the whole file's pages at once (weights planned resident)
};

// Expert prediction and caching, accumulated since the last reset.
struct ExpertLayerMetrics {
  int64_t tokens = 0;          // tokens routed here for which a prediction was made
  int64_t predicted_hits = 0;  // of their k experts, how many were predicted
  int64_t baseline_hits = 0;   // ... how many the previous token also used here
  int64_t chosen_hits = 0;     // ... how many the predictor in use for this layer had (the better of the two so far)
  int64_t routed = 0;          // expert uses (tokens × k)
  int64_t cache_hits = 0;      // uses of experts the hot cache held
};
struct ExpertMetrics {
  std::vector<ExpertLayerMetrics> layers;
  int k = 0, distance = 0;
  int64_t prefetch_requests = 0, prefetch_bytes = 0;  // experts' ranges requested
  int64_t prefetch_missing_bytes = 0;                 // of those, pages not in memory (what was read ahead)
  int64_t cache_experts = 0, cache_swaps = 0;
  bool cache_pinned = false;                   // held by mlock (else copies)
  int64_t major_faults = 0, minor_faults = 0;  // during forward passes (getrusage, whole process)
  int64_t forwards = 0;
  // On a device (hybrid placement): the cache is the device's resident
  // experts, cache_swaps the experts moved there, and these their bytes.
  int64_t device_bytes_moved = 0;
  double accuracy() const;           // predicted hits / (tokens × k), all layers
  double baseline_accuracy() const;  // the previous token's experts as the prediction
  double chosen_accuracy() const;    // what prefetch used: per layer, whichever of the two has been better
  double cache_hit_rate() const;
};

// Weight bytes this process has read and rearranged for the kernels so far
// (repacked at load, and the experts repacked after planning), all models
// together: what a progress bar of loading counts. Safe from any thread.
uint64_t weights_prepared_bytes();

// Where the forward pass runs. Emulated: the device forward pass on the host
// emulation of a device (kernels/gpu.h) — slow, for tests and for checking
// the device path on a machine without a GPU.
enum class ComputeBackend { Cpu, Cuda, Emulated };
const char* to_string(ComputeBackend b);

struct LoadOptions {
  int threads = 0;  // 0: physical cores
  ComputeBackend backend = ComputeBackend::Cpu;
  int gpu = 0;                     // CUDA device index (ComputeBackend::Cuda)
  int gpu_experts_per_layer = -1;  // routed experts per layer resident on the device; −1: all
};

class Model {
 public:
  // Loads and validates; throws ModelError naming the file and what is wrong
  // (unknown architecture, missing hyperparameter or tensor, unsupported type).
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opt = {});
  virtual ~Model();

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::File& file() const { return *file_; }
  int threads() const;

  // The KV row layout of this model (MLA: latent + rope key; GQA: K and V of
  // every kv head). Throws ModelError when `type` cannot hold its rows (Q8_0
  // needs head sizes that are multiples of 32).
  KvLayout kv_layout(KvType type = KvType::F16, int block_size = 16) const;
  std::unique_ptr<KvCache> new_cache(int n_ctx, KvType type = KvType::F16) const;
  // Names the weights (file identity and shape): seeds the prefix cache's hashes.
  uint64_t fingerprint() const { return fingerprint_; }

  // Per-layer MoE statistics since the last reset (empty entries for dense
  // layers). Not synchronised: read them when no forward pass runs.
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  void reset_moe_stats();

  // Repacks the routed experts' matrices for the AVX-512 kernels
  // (kernels/repack.h) into memory the model owns, and hands their file pages
  // back. Only for a plan that holds every weight in RAM
  // (WeightPlacement::Ram): streamed experts must stay the file's pages, which
  // the kernel can drop and read again. Call before configure_experts, when no
  // forward pass runs. Returns the bytes repacked (0 where the CPU, the kernel
  // setting, MOELSP_REPACK=off or the weight types rule it out).
  virtual size_t repack_experts() { return 0; }

  // Expert prediction, prefetch and the hot-expert cache. Call when no forward
  // pass runs (the scheduler thread, or before the engine starts).
  void configure_experts(const ExpertOptions& o);
  const ExpertOptions& expert_options() const;
  ExpertMetrics expert_metrics() const;  // safe from any thread
  void reset_expert_metrics();

  // Runs `tokens` at positions cache.n_past() onward, appends them to the
  // cache, and writes logits: one row of n_vocab per token when all_logits,
  // else only the last token's row. Throws Cancelled if `cancel` says so
  // (the cache then keeps only the positions before this call).
  void forward(std::span<const TokenId> tokens, KvCache& cache, float* logits, bool all_logits,
               const CancelCheck& cancel = {});
  // Runs a batch of sequences (each distinct, with blocks reserved for its
  // tokens); on success commits every sequence's tokens to its KV rows. Logits
  // rows follow the batch order (Batch::logit_rows()).
  void forward(const Batch& batch, float* logits, const CancelCheck& cancel = {});

  // Moves the forward pass to a device (LoadOptions::backend, gpu,
  // gpu_experts_per_layer; Model::load calls it, load_planned() after
  // planning). Throws ModelError naming what the device path lacks for this
  // model (device_unsupported) or what failed; the model then stays on the CPU.
  void attach_device(const LoadOptions& opt);
  // Why this model cannot run on a device ("" when it can).
  std::string device_unsupported() const;
  // Where forward() runs, and on a device: what it holds ("" on the CPU).
  ComputeBackend backend() const;
  std::string device_description() const;
  // The routed experts resident on the device per MoE layer (0 on the CPU).
  int device_experts_per_layer() const;

 protected:
  // Takes the file, builds the tokenizer and the thread pool, and reads the
  // architecture-independent configuration.
  Model(std::unique_ptr<gguf::File> file, const LoadOptions& opt);
  virtual void forward_impl(const Batch& batch, float* logits, const CancelCheck& cancel) = 0;
  virtual int kv_k_dim() const = 0;
  virtual int kv_v_dim() const = 0;
  // Called by an architecture's constructor once its layers are in place
  // (arch.h's expert_layers makes the list); nothing when no layer is MoE.
  void init_experts(std::vector<ExpertLayer> layers);

  ModelConfig cfg_;
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<MoeLayerStats> moe_stats_;
  std::unique_ptr<ExpertRuntime> experts_;  // set by init_experts
  uint64_t fingerprint_ = 0;

 private:
  std::unique_ptr<device::DeviceForward> device_;
  ComputeBackend backend_ = ComputeBackend::Cpu;
};

}  // namespace moelsp
