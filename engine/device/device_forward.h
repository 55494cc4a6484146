// The forward pass on a compute device (kernels/gpu.h: a CUDA GPU, or the
// host emulation that tests it in every build).
//
// What runs where:
//  - on the device: embeddings, every norm, RoPE, attention (GQA, and MLA in
//    its absorbed form) over a device copy of the paged KV cache that uses the
//    host pool's block ids (a KvMirror of the pool), dense FFNs, the router,
//    shared experts, the resident routed experts, the output head;
//  - on the CPU, in parallel with the device's experts: the routed experts
//    not resident on the device (hybrid placement, `experts_per_layer`),
//    from the file's bytes with the CPU kernels.
// Weights come from the GGUF file by tensor name (not from the CPU engine's
// repacked copies); types the device kernels do not decode go up as F16,
// dequantized on the host.
//
// Resident experts start as the first experts_per_layer of each layer and
// follow the routing: after each pass the most used experts on the CPU swap
// in for the least used resident ones (rebalance(), a few per pass).
//
// With every expert resident, decode (up to 8 tokens) picks the experts on
// the device: the router's choice never leaves it, and one launch per
// matrix kind covers all tokens × k experts. Otherwise (prompts, hybrid
// placement) the choice is copied back to the host (one sync per MoE layer):
// the host groups tokens by expert, launches one matmul chain per expert
// used, and computes its own experts meanwhile. Decode steps are not
// captured in a CUDA graph yet.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../cpu/thread_pool.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "kernels/gpu.h"
#include "kernels/matmul.h"

namespace moelsp::device {

struct Placement {
  int experts_per_layer = -1;  // routed experts per layer resident on the device; −1: all
};

// What stops a model from running on the device ("" when nothing does): an
// architecture feature the device pass lacks (glm-dsa's sparse attention), or
// shapes its kernels cannot take (more than 512 experts, very large heads).
// Attention sinks, sliding windows, biases and gpt-oss's clamped SwiGLU run.
std::string unsupported(const ModelConfig& c, const gguf::File& f);

struct DeviceModel;  // the uploaded weights (weights.cpp)

class DeviceForward {
 public:
  // Uploads the weights. Throws ModelError naming what is unsupported or what
  // did not fit.
  DeviceForward(std::shared_ptr<kernels::gpu::Device> dev, const ModelConfig& c, const gguf::File& f, ThreadPool& pool,
                const Placement& p);
  ~DeviceForward();

  // Model::forward's contract: logits [batch.logit_rows()][n_vocab] on the
  // host; KV rows written to the device copy of each sequence's blocks.
  // `stats` gets the routing counts of every MoE layer.
  void forward(const Batch& batch, float* logits, const CancelCheck& cancel, std::vector<MoeLayerStats>& stats);

  kernels::gpu::Device& device() { return *dev_; }
  uint64_t weight_bytes() const;  // resident on the device
  int experts_per_layer() const;  // resident routed experts per MoE layer
  std::string describe() const;   // one line: device, weights, placement
  // Routed experts' residency since the last reset: per layer uses and those
  // on the device (cache_hits), resident experts (cache_experts), swaps and
  // the bytes they copied.
  ExpertMetrics metrics() const;
  void reset_metrics();

 private:
  void rebalance();  // after each pass: the most routed experts onto the device (forward.cpp)
  void upload_expert(const kernels::gpu::Mat& to, const kernels::MatView& from);
  void take_counts(std::vector<MoeLayerStats>& stats);
  std::shared_ptr<kernels::gpu::Device> dev_;
  const ModelConfig& c_;
  ThreadPool& pool_;
  std::unique_ptr<DeviceModel> m_;
};

}  // namespace moelsp::device
