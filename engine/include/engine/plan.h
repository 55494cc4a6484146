// The automatic plan: from the hardware profile, the model file and the
// requested context/concurrency, every setting the engine needs — threads,
// where the weights live (RAM, streamed from the file, GPU), KV cache size and
// layout, the expert cache, prefetch distance and batch limits — each with a
// one-line reason. Users override any choice (flag, config file, LSP setting);
// the plan then says so.
//
// make_plan() is a pure function of its inputs, so its decisions are tested on
// synthetic profiles (an H100, a laptop GPU, a small-memory box) that this
// machine is not.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv_type.h"
#include "engine/profile.h"

namespace moelsp {

class Model;
namespace gguf {
class File;
}
struct EngineOptions;  // engine.h
struct ExpertOptions;  // model.h

// What the planner needs to know of a model (from its file: tensor sizes by
// role, and its KV row layout).
struct ModelFootprint {
  std::string name, arch;
  uint64_t file_bytes = 0;
  uint64_t embd_bytes = 0;    // token embedding table (one row read per token)
  uint64_t dense_bytes = 0;   // all weights but the routed experts, embedding table included
  uint64_t expert_bytes = 0;  // one routed expert of one layer (gate + up + down), mean over layers
  int n_layer = 0, n_moe_layers = 0, n_expert = 0, n_expert_used = 0;
  int n_ctx_train = 0;
  uint64_t kv_bytes_per_token_f16 = 0;  // all layers, F16 rows
  bool kv_q8_ok = false;                // head sizes allow Q8_0 rows
  // As uploaded to a GPU (types its kernels do not decode go up as F16): the
  // dense weights (embedding table included) and one expert. 0: as above.
  uint64_t device_dense_bytes = 0, device_expert_bytes = 0;
  uint64_t experts_total() const { return uint64_t(n_moe_layers) * uint64_t(n_expert) * expert_bytes; }
  // Bytes one decoded token reads: dense weights (one embedding row) + k experts per MoE layer.
  uint64_t active_bytes() const;
};
ModelFootprint footprint(const Model& m);
// The same from a file's header alone (gguf::File::from_header: a model not
// downloaded yet): the tensors' sizes by role, the KV row from the
// attention keys (MLA's latent and rope key, else k and v per kv head).
// For a split model, set file_bytes to all parts' size after.
ModelFootprint footprint_of_header(const gguf::File& f);
// Why the GPU forward pass cannot run an architecture ("" when it can): a
// plan made before the model is loaded (Model::device_unsupported needs the
// loaded model, which also checks its head sizes).
std::string device_unsupported_arch(std::string_view arch);

// Overrides: set fields replace the planner's choice.
struct PlanOverrides {
  std::optional<int> threads;
  std::optional<int> n_ctx;
  std::optional<std::string> weights;  // "ram" or "stream"
  std::optional<std::string> kv_type;  // f16, bf16, f32, q8_0
  std::optional<int64_t> kv_tokens;
  std::optional<int> block_size;
  std::optional<bool> paged;  // false: one block per sequence (a contiguous cache)
  std::optional<int64_t> expert_cache_mb;
  std::optional<bool> prefetch;
  std::optional<int> prefetch_distance;
  std::optional<int> max_batch;
  std::optional<int> gpu;                    // device index; −1: do not use a GPU
  std::optional<int> gpu_experts_per_layer;  // routed experts per layer kept in VRAM

  bool operator==(const PlanOverrides&) const = default;  // == PlanOverrides{}: nothing overridden
};

struct PlanRequest {
  int n_ctx = 0;        // 0: min(4096, the training context), or the whole of it with full_context
  int concurrency = 4;  // sequences expected at once (completion + chat + a few background)
  // Whether the engine can run this model on a GPU; when not, gpu_why says
  // why (load_planned() sets both from the build and the model:
  // Model::device_unsupported) and the plan names it as the reason.
  bool gpu_forward = false;
  std::string gpu_why = {};
  PlanOverrides over;
  // The HTTP server: coding agents send prompts of tens of thousands of
  // tokens, so without a context asked for, the model's whole training
  // context — halved until the weights and one context of KV fit in memory.
  bool full_context = false;
  // Memory another model of this process already holds (the language
  // server's completion model beside its chat model): planned as taken, from
  // RAM (and the cgroup's limit) and from each GPU's free memory. Page-cache
  // pages of a mapped model still count as available to the kernel, so the
  // profile alone would not see them as used.
  uint64_t reserved_ram_bytes = 0, reserved_vram_bytes = 0;
};

enum class WeightPlacement { Ram, Stream };
const char* to_string(WeightPlacement w);

struct Plan {
  bool ok = true;
  std::string error;  // !ok: what does not fit, in numbers

  std::string backend = "cpu";  // "cpu" or "cuda"
  int threads = 1;
  int n_ctx = 4096;
  WeightPlacement weights = WeightPlacement::Ram;
  // GPU (backend "cuda"): dense weights + KV in VRAM, then the most-routed
  // experts of every layer; the rest computed on the CPU from RAM/stream.
  int gpu = -1;
  int gpu_experts_per_layer = 0;
  uint64_t vram_bytes = 0, vram_budget = 0;
  // KV cache
  KvType kv_type = KvType::F16;
  int block_size = 16;
  int64_t kv_tokens = 0;
  bool paged = true;
  uint64_t kv_bytes = 0;
  // Experts (streamed weights): the most-routed experts held in RAM (pinned pages), and
  // predicted experts requested `prefetch_distance` layers ahead.
  uint64_t expert_cache_bytes = 0;
  int expert_cache_experts = 0;
  std::string expert_policy;
  bool prefetch = false;
  int prefetch_distance = 0;
  // Scheduler
  int max_batch = 8, prefill_chunk = 256;
  // Memory
  uint64_t ram_bytes = 0, ram_budget = 0;  // planned resident use, what the plan may use

  struct Reason {
    std::string key, value, why;
  };
  std::vector<Reason> reasons;
  // Fallbacks: where the plan gives less than was asked for or than the
  // machine could do with a different build (a GPU unused, weights
  // streamed, the KV cache or context cut). load_planned() logs each as a
  // warning; the reasons above say the same in context.
  std::vector<std::string> warnings;

  EngineOptions engine_options() const;
  ExpertOptions expert_options() const;
  std::string to_text() const;
  std::string to_json() const;
};

// req with gpu_forward and gpu_why set for this model and build (whether the
// device forward pass can run it): what load_planned() and `moelsp profile` plan with.
PlanRequest with_device(PlanRequest req, const Model& m);

// Threads the plan uses (needed before the model is loaded: the thread pool is built at load).
int plan_threads(const HwProfile& hw, const PlanOverrides& over);
Plan make_plan(const HwProfile& hw, const ModelFootprint& model, const PlanRequest& req);

// The usual start-up: profile this machine (measurements cached), load the
// model with the planned threads, plan, and apply the expert settings. Throws
// ModelError with Plan::error when the plan does not fit the machine.
struct PlannedModel {
  std::shared_ptr<Model> model;
  HwProfile hw;
  ModelFootprint footprint;
  Plan plan;
};
PlannedModel load_planned(const std::string& path, const PlanRequest& req, ProfileOptions po = {});

}  // namespace moelsp
