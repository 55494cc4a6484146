// The weights of a model resident on a device (internal to engine/device).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/matmul.h"

namespace moelsp::device {

using kernels::gpu::Mat;

struct DeviceLayer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;  // [n_embd]
  // GQA
  Mat wq, wk, wv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;  // biases or null
  const float *q_norm = nullptr, *k_norm = nullptr;                        // [head_dim] per-head norms or null
  const float* sinks = nullptr;                                            // [n_head] attention sinks or null
  int window = 0;                                                          // sliding window, 0: full causal
  // MLA: q (or q_a → norm → q_b), kv_a, and per head k_absorb [lora][nope] (q_nope → q_lat), v_up [v][lora]
  Mat wq_a, wq_b, wkv_a;
  const float *q_a_norm = nullptr, *kv_a_norm = nullptr;
  std::vector<Mat> k_absorb, v_up;
  // Dense FFN
  Mat gate, up, down;
  // MoE: the router, the selection bias, the shared experts, and each routed
  // expert's matrices (data null where the expert is not resident: the CPU
  // computes it from cpu_gate/up/down, views of the file's bytes).
  Mat router;
  const float* router_bias = nullptr;  // [n_expert] added to the logits (gpt-oss)
  const float* sel_bias = nullptr;     // [n_expert] added for the choice only
  // Expert biases (gpt-oss), [n_expert][rows] on the device; the same on the host for the CPU's experts.
  const float *gate_b = nullptr, *up_b = nullptr, *down_b = nullptr;
  std::vector<float> cpu_gate_b, cpu_up_b, cpu_down_b;
  Mat shared_gate, shared_up, shared_down;
  std::vector<Mat> e_gate, e_up, e_down;
  std::vector<kernels::MatView> cpu_gate, cpu_up, cpu_down;  // every expert (also the upload source of a swap)
  // Residency: experts_per_layer slots per matrix kind; which expert each
  // holds, where each expert is (−1: on the CPU), and decayed routing counts.
  std::vector<int> slot_of, in_slot;
  std::vector<double> heat;
  uint8_t* slot_base[3] = {};  // gate, up, down: slot s at slot_base + s · slot_bytes
  size_t slot_bytes[3] = {};
};

struct DeviceModel {
  std::vector<kernels::gpu::Buffer> buffers;  // owns every upload
  uint64_t bytes = 0;
  Mat token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DeviceLayer> layers;
  int experts_per_layer = 0;                    // resident routed experts per MoE layer
  int converted = 0;                            // matrices uploaded as F16 (a type the device does not decode)
  std::vector<kernels::gpu::Buffer> workspace;  // the forward pass's activations (forward.cpp's slots)
  // Since the last reset (read by other threads: Model::expert_metrics): per
  // layer expert uses and those served on the device; experts moved there.
  std::unique_ptr<std::atomic<int64_t>[]> routed, hits;
  std::atomic<int64_t> swaps{0}, bytes_moved{0};
  uint64_t rebalance_turn = 0;
  // Routing counts of passes whose experts were picked on the device
  // ([n_layer][n_expert] int64 there), and what the host has taken of them.
  kernels::gpu::Buffer counts;
  std::vector<int64_t> counts_seen;  // the layer DeviceForward::rebalance starts at, in turn
};

}  // namespace moelsp::device
