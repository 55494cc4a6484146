// The plan's model footprint, load_planned(), and the Plan's printing; the
// decisions themselves are make_plan()'s steps in plan_steps.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "../arch/facts.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "kernels/cuda.h"
#include "plan_util.h"

namespace moelsp {

uint64_t kv_bytes_per_token(const ModelFootprint& m, KvType t) {
  const uint64_t f16 = m.kv_bytes_per_token_f16;
  switch (t) {
    case KvType::F32: return f16 * 2;
    case KvType::Q8_0: return f16 * kernels::traits(kernels::DType::Q8_0).type_size / 64;  // per 32 elements
    default: return f16;
  }
}

const char* to_string(WeightPlacement w) { return w == WeightPlacement::Ram ? "ram" : "stream"; }

uint64_t ModelFootprint::active_bytes() const {
  return dense_bytes - embd_bytes + uint64_t(n_moe_layers) * uint64_t(n_expert_used) * expert_bytes;
}

namespace {

// The tensors' bytes by role (dense, embedding, one mean expert; also as a
// device would hold them) into `s`, whose n_moe_layers and n_expert are set.
void add_tensor_bytes(const gguf::File& f, ModelFootprint& s) {
  uint64_t experts = 0, device_experts = 0;
  for (const auto& t : f.tensors()) {
    // A NextN/MTP block past the layers that run: in memory (file_bytes), never read per token.
    if (int il = -1; std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 && il >= s.n_layer) continue;
    // On a device: the file's blocks where its kernels decode them, else F16 rows padded to 32 values.
    const uint64_t cols = t.shape.empty() ? 1 : t.shape[0];
    const bool native = kernels::cuda::device_supports(t.type) && cols % 32 == 0;
    const uint64_t on_device = native || t.shape.size() < 2 ? t.n_bytes : t.n_elements / cols * ((cols + 31) / 32 * 64);
    if (t.name.find("_exps.") != std::string::npos) {
      experts += t.n_bytes;
      device_experts += on_device;
    } else {
      s.dense_bytes += t.n_bytes;
      s.device_dense_bytes += on_device;
      if (t.name == "token_embd.weight") s.embd_bytes = t.n_bytes;
    }
  }
  if (s.n_moe_layers > 0 && s.n_expert > 0) {
    s.expert_bytes = experts / uint64_t(s.n_moe_layers * s.n_expert);
    s.device_expert_bytes = device_experts / uint64_t(s.n_moe_layers * s.n_expert);
  }
}

}  // namespace

ModelFootprint footprint(const Model& m) {
  const ModelConfig& c = m.config();
  ModelFootprint s;
  s.name = c.name;
  s.arch = c.arch;
  s.file_bytes = m.file().file_size();
  s.n_layer = c.n_layer;
  s.n_expert = c.n_expert;
  s.n_expert_used = c.n_expert_used;
  s.n_ctx_train = c.n_ctx_train;
  for (int il = 0; il < c.n_layer; ++il) s.n_moe_layers += c.is_moe_layer(il) ? 1 : 0;
  add_tensor_bytes(m.file(), s);
  s.kv_bytes_per_token_f16 = m.kv_layout(KvType::F16).bytes_per_token();
  try {
    (void)m.kv_layout(KvType::Q8_0);
    s.kv_q8_ok = true;
  } catch (const std::exception&) {
    s.kv_q8_ok = false;
  }
  return s;
}

ModelFootprint footprint_of_header(const gguf::File& f) {
  ModelFootprint s;
  s.arch = f.get_or<std::string>("general.architecture", "");
  s.name = f.get_or<std::string>("general.name", s.arch);
  s.file_bytes = f.file_size();
  const auto key = [&](const char* k) { return s.arch + "." + k; };
  // A key that may be one number or one per layer (the largest counts).
  const auto num = [&](const char* k, uint64_t fallback) {
    const gguf::Value* v = f.find(key(k));
    if (!v) return fallback;
    if (const auto x = v->as<uint64_t>()) return *x;
    uint64_t most = 0;
    for (const uint64_t x : f.get_array<uint64_t>(key(k))) most = std::max(most, x);
    return most ? most : fallback;
  };
  // NextN/MTP blocks at the end of block_count are loaded, never run.
  s.n_layer = int(num("block_count", 0) - std::min(num("block_count", 0), num("nextn_predict_layers", 0)));
  s.n_expert = int(num("expert_count", 0));
  s.n_expert_used = int(num("expert_used_count", 0));
  s.n_ctx_train = int(num("context_length", 0));
  std::vector<bool> moe(size_t(std::max(0, s.n_layer)), false);
  for (const auto& t : f.tensors()) {
    int il = -1;
    if (t.name.find("_exps.") != std::string::npos && std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 && il >= 0 &&
        il < s.n_layer)
      moe[size_t(il)] = true;
  }
  s.n_moe_layers = int(std::count(moe.begin(), moe.end(), true));
  add_tensor_bytes(f, s);
  // KV rows as the architectures cache them: MLA its latent and rope key
  // (kv_lora_rank + rope dims), the others k and v of every kv head.
  const uint64_t layers = uint64_t(std::max(0, s.n_layer));
  if (const uint64_t lora = num("attention.kv_lora_rank", 0); lora > 0) {
    const uint64_t rope = num("rope.dimension_count", 64);
    // DeepSeek Sparse Attention caches the lightning indexer's key beside the latent.
    s.kv_bytes_per_token_f16 = layers * (lora + rope + num("attention.indexer.key_length", 0)) * 2;
    s.kv_q8_ok = lora % 32 == 0 && (lora + rope) % 32 == 0;
  } else {
    const uint64_t heads = num("attention.head_count", 1), kv_heads = num("attention.head_count_kv", heads);
    const uint64_t embd = num("embedding_length", 0);
    const uint64_t hk = num("attention.key_length", heads ? embd / heads : 0), hv = num("attention.value_length", hk);
    s.kv_bytes_per_token_f16 = layers * kv_heads * (hk + hv) * 2;
    s.kv_q8_ok = hk % 32 == 0 && hv % 32 == 0;
  }
  return s;
}

std::string device_unsupported_arch(std::string_view arch) {
  const arch::ArchFacts* facts = arch::facts_of(arch);
  if (!facts) return fmt::format("moelsp does not run the architecture '{}'", arch);
  return std::string(facts->device_unsupported);
}

int plan_threads(const HwProfile& hw, const PlanOverrides& over) {
  if (over.threads && *over.threads > 0) {
    // More threads than CPUs: every step waits for the threads the kernel
    // preempted (-t 64 on 2 cores took 15.7 s for 4 tokens). Refused unless forced.
    const int logical = std::max(1, hw.cpu.logical);
    const char* force = std::getenv("MOELSP_FORCE_THREADS");
    if (*over.threads > logical && !(force && std::string(force) == "1"))
      throw std::runtime_error(fmt::format(
          "setting threads: {} is more than the {} logical CPUs of this machine (allowed: 1..{}, or 0 for automatic; "
          "MOELSP_FORCE_THREADS=1 allows more)",
          *over.threads, logical, logical));
    return *over.threads;
  }
  return std::max(1, hw.cpu.physical > 0 ? hw.cpu.physical : hw.cpu.logical);
}

EngineOptions Plan::engine_options() const {
  EngineOptions e;
  e.n_ctx = n_ctx;
  e.kv_tokens = kv_tokens;
  e.block_size = block_size;
  e.kv_type = kv_type;
  e.max_batch = max_batch;
  e.prefill_chunk = prefill_chunk;
  return e;
}

ExpertOptions Plan::expert_options() const {
  ExpertOptions o;
  o.predict = prefetch;
  o.prefetch = prefetch;
  o.distance = std::max(1, prefetch_distance);
  o.cache_bytes = expert_cache_bytes;
  o.populate = weights == WeightPlacement::Ram;
  return o;
}

PlanRequest with_device(PlanRequest req, const Model& m) {
  req.gpu_why = kernels::cuda::compiled_in() ? m.device_unsupported() : "this build has no CUDA";
  req.gpu_forward = req.gpu_why.empty();
  return req;
}

PlannedModel load_planned(const std::string& path, const PlanRequest& req, ProfileOptions po) {
  PlannedModel r;
  if (po.model_path.empty()) po.model_path = path;
  r.hw = hardware_profile(po);
  r.model = std::shared_ptr<Model>(Model::load(path, {.threads = plan_threads(r.hw, req.over)}));
  r.footprint = footprint(*r.model);
  PlanRequest rq = with_device(req, *r.model);
  r.plan = make_plan(r.hw, r.footprint, rq);
  if (r.plan.ok && r.plan.backend == "cuda") {
    try {
      r.model->attach_device({.threads = 0,
                              .backend = ComputeBackend::Cuda,
                              .gpu = r.plan.gpu,
                              .gpu_experts_per_layer = r.plan.gpu_experts_per_layer});
    } catch (const ModelError& e) {
      // Uploading failed (out of device memory, a CUDA error): plan again for
      // the CPU, with the failure as the reason, rather than not loading.
      rq.gpu_forward = false;
      rq.gpu_why = std::string("moving the model there failed: ") + e.what();
      r.plan = make_plan(r.hw, r.footprint, rq);
    }
  }
  if (!r.plan.ok) throw ModelError(path + ": " + r.plan.error);
  for (const std::string& w : r.plan.warnings) spdlog::warn("plan for {}: {}", path, w);
  if (r.plan.backend == "cuda") {
    spdlog::info("{}: forward pass on {}", path, r.model->device_description());
    return r;  // the CPU engine's expert settings do not apply to the device pass
  }
  if (r.plan.weights == WeightPlacement::Ram) {
    const size_t n = r.model->repack_experts();
    if (n) spdlog::info("{}: {:.0f} MiB of experts repacked for the AVX-512 kernels", path, double(n) / (1 << 20));
  }
  r.model->configure_experts(r.plan.expert_options());
  return r;
}

std::string Plan::to_text() const {
  std::string o;
  if (!ok) o += "error: " + error + "\n";
  for (const Reason& r : reasons) o += fmt::format("{:<20} {:<22} {}\n", r.key, r.value, r.why);
  o += fmt::format("{:<20} {:<22} {}\n", "memory",
                   size_text(ram_bytes) + " RAM" + (vram_bytes ? ", " + size_text(vram_bytes) + " VRAM" : ""),
                   fmt::format("planned resident use (budget {}{})", size_text(ram_budget),
                               vram_budget ? ", VRAM " + size_text(vram_budget) : std::string()));
  return o;
}

std::string Plan::to_json() const {
  nlohmann::json reasons_j = nlohmann::json::array();
  for (const Reason& r : reasons) reasons_j.push_back({{"key", r.key}, {"value", r.value}, {"why", r.why}});
  nlohmann::json j = {{"ok", ok},
                      {"backend", backend},
                      {"threads", threads},
                      {"contextSize", n_ctx},
                      {"weights", to_string(weights)},
                      {"gpu",
                       {{"device", gpu},
                        {"expertsPerLayer", gpu_experts_per_layer},
                        {"vramBytes", vram_bytes},
                        {"vramBudget", vram_budget}}},
                      {"kvCache",
                       {{"type", moelsp::to_string(kv_type)},
                        {"blockSize", block_size},
                        {"tokens", kv_tokens},
                        {"paged", paged},
                        {"bytes", kv_bytes}}},
                      {"experts",
                       {{"cacheBytes", expert_cache_bytes},
                        {"cacheExperts", expert_cache_experts},
                        {"policy", expert_policy},
                        {"prefetch", prefetch},
                        {"prefetchDistance", prefetch_distance}}},
                      {"batch", {{"max", max_batch}, {"prefillChunk", prefill_chunk}}},
                      {"memory", {{"ramBytes", ram_bytes}, {"ramBudget", ram_budget}}},
                      {"reasons", reasons_j}};
  if (!ok) j["error"] = error;
  return j.dump();
}

}  // namespace moelsp
