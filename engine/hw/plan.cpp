// make_plan(): the decisions and their reasons. The performance model:
// decoding reads active_bytes() per token, so a token costs at least
// active_bytes / memory bandwidth when the weights are in RAM, and the missing
// experts' bytes / disk rate when they stream from the file. Memory is spent
// in this order: working buffers, the dense weights (every token reads them),
// the KV cache for the requested context, then experts.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/gguf.h"
#include "engine/plan.h"

namespace moelsp {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20, kGiB = uint64_t(1) << 30;

std::string sz(uint64_t b) {
  if (b >= kGiB) return fmt::format("{:.1f} GiB", double(b) / double(kGiB));
  return fmt::format("{} MiB", (b + kMiB / 2) / kMiB);
}

uint64_t kv_bpt(const ModelFootprint& m, KvType t) {
  const uint64_t f16 = m.kv_bytes_per_token_f16;
  switch (t) {
    case KvType::F32: return f16 * 2;
    case KvType::Q8_0: return f16 * 34 / 64;  // 34 bytes per 32 elements
    default: return f16;
  }
}

constexpr const char* kUser = "set by the user";

}  // namespace

const char* to_string(WeightPlacement w) { return w == WeightPlacement::Ram ? "ram" : "stream"; }

uint64_t ModelFootprint::active_bytes() const {
  return dense_bytes - embd_bytes + uint64_t(n_moe_layers) * uint64_t(n_expert_used) * expert_bytes;
}

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
  uint64_t experts = 0;
  for (const auto& t : m.file().tensors()) {
    if (t.name.find("_exps.") != std::string::npos) {
      experts += t.n_bytes;
    } else {
      s.dense_bytes += t.n_bytes;
      if (t.name == "token_embd.weight") s.embd_bytes = t.n_bytes;
    }
  }
  if (s.n_moe_layers > 0 && s.n_expert > 0) s.expert_bytes = experts / uint64_t(s.n_moe_layers * s.n_expert);
  s.kv_bytes_per_token_f16 = m.kv_layout(KvType::F16).bytes_per_token();
  try {
    (void)m.kv_layout(KvType::Q8_0);
    s.kv_q8_ok = true;
  } catch (const std::exception&) {
    s.kv_q8_ok = false;
  }
  return s;
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

PlannedModel load_planned(const std::string& path, const PlanRequest& req, ProfileOptions po) {
  PlannedModel r;
  if (po.model_path.empty()) po.model_path = path;
  r.hw = hardware_profile(po);
  r.model = std::shared_ptr<Model>(Model::load(path, {.threads = plan_threads(r.hw, req.over)}));
  r.footprint = footprint(*r.model);
  r.plan = make_plan(r.hw, r.footprint, req);
  if (!r.plan.ok) throw ModelError(path + ": " + r.plan.error);
  for (const std::string& w : r.plan.warnings) spdlog::warn("plan for {}: {}", path, w);
  r.model->configure_experts(r.plan.expert_options());
  return r;
}

Plan make_plan(const HwProfile& hw, const ModelFootprint& m, const PlanRequest& req) {
  const PlanOverrides& ov = req.over;
  Plan p;
  const auto why = [&](std::string key, std::string value, std::string reason) {
    p.reasons.push_back({std::move(key), std::move(value), std::move(reason)});
  };
  const auto warn = [&](std::string w) { p.warnings.push_back(std::move(w)); };

  // ---- threads, context --------------------------------------------------------
  p.threads = plan_threads(hw, ov);
  why("threads", std::to_string(p.threads),
      ov.threads ? kUser
                 : fmt::format("one per physical core ({} cores, {} hardware threads): the kernels are bound by a "
                               "core's vector units, which its hardware threads share{}",
                               hw.cpu.physical, hw.cpu.logical,
                               hw.cpu.numa_nodes > 1 ? fmt::format("; {} NUMA nodes share them", hw.cpu.numa_nodes) : ""));
  const int n_train = m.n_ctx_train > 0 ? m.n_ctx_train : 1 << 20;
  p.n_ctx = std::min(n_train, ov.n_ctx ? *ov.n_ctx : req.n_ctx > 0 ? req.n_ctx : std::min(4096, n_train));
  why("context", std::to_string(p.n_ctx),
      ov.n_ctx || req.n_ctx > 0 ? fmt::format("as requested, at most the training context {}", m.n_ctx_train)
      : p.n_ctx < 4096          ? "the model's training context (beyond it a model degrades)"
                                : "4,096 tokens: an editor's prompt of prefix + suffix + context from other files");
  if (const int asked = ov.n_ctx ? *ov.n_ctx : req.n_ctx; asked > p.n_ctx)
    warn(fmt::format("context {} asked for, but the model was trained for {}: using {}", asked, m.n_ctx_train, p.n_ctx));
  const int conc = std::max(1, req.concurrency);

  // ---- KV layout ---------------------------------------------------------------
  p.paged = ov.paged.value_or(true);
  p.block_size = p.paged ? ov.block_size.value_or(16) : p.n_ctx;
  why("kvCache.paged", p.paged ? "yes" : "no (one block per sequence)",
      ov.paged ? kUser
               : "paged: decode after 2,000 tokens measured 1.06x (qwen3moe) and 1.20x (deepseek2 MLA) the speed of one "
                 "contiguous block (bench_kv --layout), and blocks are what the prefix cache shares between prompts");
  why("kvCache.blockSize", std::to_string(p.block_size),
      ov.block_size || ov.paged ? kUser
                                : "16 tokens: the prefix cache's unit (a partly matching block is copied, so an edit "
                                  "recomputes from the changed token); decode measured as fast as with 64");
  p.kv_type = ov.kv_type ? kv_type_from_name(*ov.kv_type) : KvType::F16;
  std::string kv_type_why = ov.kv_type ? kUser : "f16: max |Δlogit| ≤ 0.005 against f32 at half the bytes";

  // ---- memory budgets ------------------------------------------------------------
  const uint64_t usable = hw.mem.usable();
  // Headroom for the rest of the system (editor, OS) and our own code and
  // heap: a tenth of what is usable, at least 512 MiB when that leaves most of it.
  const uint64_t headroom = std::max<uint64_t>(usable / 10, std::min<uint64_t>(512 * kMiB, usable / 5));
  p.ram_budget = usable > headroom ? usable - headroom : 0;
  // Activations of a 256-token chunk (a few [256 × n_ff] buffers), logits,
  // tokenizer tables, per-thread scratch: an estimate with room to spare
  // (a 256 × 10,944 f32 buffer is 11 MiB).
  const uint64_t work = 256 * kMiB;
  const auto kv_tokens_fit = [&](uint64_t room, KvType t) -> int64_t {
    const uint64_t bpt = std::max<uint64_t>(1, kv_bpt(m, t));
    return int64_t(room / bpt) / p.block_size * p.block_size;
  };
  const int64_t kv_want = ov.kv_tokens ? *ov.kv_tokens : int64_t(p.n_ctx) * conc;
  const int64_t kv_min = ov.kv_tokens ? *ov.kv_tokens : p.n_ctx;

  // ---- GPU ---------------------------------------------------------------------
  const GpuProfile* gpu = nullptr;
  if (!(ov.gpu && *ov.gpu < 0) && !hw.gpus.empty()) {
    if (!hw.cuda_build) {
      why("backend", "cpu", "a GPU is present but this build has no CUDA (configure with MOELSP_CUDA=ON)");
      warn(fmt::format("GPU {} ({}) unused: this build has no CUDA (configure with MOELSP_CUDA=ON)", hw.gpus[0].index,
                       hw.gpus[0].name));
    } else if (!req.gpu_forward) {
      why("backend", "cpu",
          fmt::format("GPU {} ({}, {}) found, but this version computes on the CPU (the CUDA forward pass is a later "
                      "issue)",
                      hw.gpus[0].index, hw.gpus[0].name, sz(hw.gpus[0].vram_total)));
      warn(fmt::format("GPU {} ({}) unused: this version computes on the CPU", hw.gpus[0].index, hw.gpus[0].name));
    } else {
      for (const GpuProfile& g : hw.gpus)
        if (ov.gpu ? g.index == *ov.gpu : (!gpu || g.vram_total > gpu->vram_total)) gpu = &g;
    }
  }
  uint64_t cpu_weights = m.file_bytes;  // weight bytes the CPU side holds or streams
  uint64_t cpu_dense = m.dense_bytes;   // of which every token reads (or needs resident)
  bool kv_on_gpu = false;
  if (gpu) {
    const uint64_t vram = gpu->vram_free ? gpu->vram_free : gpu->vram_total;
    const uint64_t reserve = std::max<uint64_t>(512 * kMiB, gpu->vram_total / 20);
    p.vram_budget = vram > reserve ? vram - reserve : 0;
    const uint64_t gpu_work = kGiB;  // cuBLAS workspace, activations of a 512-token chunk
    const uint64_t gpu_dense = m.dense_bytes - m.embd_bytes + gpu_work;
    // One context of KV comes before experts, experts before KV for more streams.
    const uint64_t per_expert_all_layers = std::max<uint64_t>(1, uint64_t(m.n_moe_layers) * m.expert_bytes);
    const uint64_t bpt = std::max<uint64_t>(1, kv_bpt(m, p.kv_type));
    int64_t kv = kv_want;
    if (gpu_dense + uint64_t(kv) * bpt + uint64_t(m.n_expert) * per_expert_all_layers > p.vram_budget) kv = kv_min;
    if (gpu_dense + uint64_t(kv) * bpt > p.vram_budget) {
      why("backend", "cpu", fmt::format("GPU {} ({}): dense weights {} + KV {} exceed its {} budget", gpu->index, gpu->name,
                                        sz(gpu_dense), sz(uint64_t(kv) * bpt), sz(p.vram_budget)));
      warn(fmt::format("GPU {} ({}) unused: dense weights {} + KV {} exceed its {} budget", gpu->index, gpu->name,
                       sz(gpu_dense), sz(uint64_t(kv) * bpt), sz(p.vram_budget)));
      gpu = nullptr;
    } else {
      p.backend = "cuda";
      p.gpu = gpu->index;
      kv_on_gpu = true;
      const uint64_t left = p.vram_budget - gpu_dense - uint64_t(kv) * bpt;
      p.gpu_experts_per_layer = int(std::min<uint64_t>(uint64_t(m.n_expert), left / per_expert_all_layers));
      if (ov.gpu_experts_per_layer) p.gpu_experts_per_layer = std::clamp(*ov.gpu_experts_per_layer, 0, m.n_expert);
      // What the experts leave (less than one expert's share) serves more streams.
      const uint64_t rest = left - std::min<uint64_t>(left, uint64_t(p.gpu_experts_per_layer) * per_expert_all_layers);
      kv = std::min<int64_t>(kv_want, kv + int64_t(rest / bpt) / p.block_size * p.block_size);
      p.kv_tokens = kv;
      p.vram_bytes = gpu_dense + uint64_t(kv) * bpt +
                     uint64_t(p.gpu_experts_per_layer) * per_expert_all_layers;
      if (p.vram_bytes > p.vram_budget) {
        p.ok = false;
        p.error = fmt::format("out of GPU memory: {} experts per layer need {} of VRAM, the budget is {}",
                              p.gpu_experts_per_layer, sz(p.vram_bytes), sz(p.vram_budget));
      }
      why("backend", fmt::format("cuda (GPU {}: {})", gpu->index, gpu->name),
          fmt::format("dense weights {} and KV {} fit its {} budget", sz(m.dense_bytes - m.embd_bytes),
                      sz(uint64_t(kv) * bpt), sz(p.vram_budget)));
      why("gpu.expertsPerLayer", fmt::format("{} of {}", p.gpu_experts_per_layer, m.n_expert),
          ov.gpu_experts_per_layer ? kUser
          : p.gpu_experts_per_layer == m.n_expert
              ? fmt::format("all experts fit ({} of VRAM in all)", sz(p.vram_bytes))
              : fmt::format("as many as fit in the {} left ({} per expert across {} layers); the most routed ones go "
                            "there, the rest compute on the CPU",
                            sz(left), sz(per_expert_all_layers), m.n_moe_layers));
      cpu_weights = m.embd_bytes + uint64_t(m.n_expert - p.gpu_experts_per_layer) * per_expert_all_layers;
      cpu_dense = m.embd_bytes;
      p.max_batch = 32;
      p.prefill_chunk = 512;
    }
  }
  if (!gpu && p.backend == "cpu" && (hw.gpus.empty() || (ov.gpu && *ov.gpu < 0)))
    why("backend", "cpu", hw.gpus.empty() ? (hw.gpu_error.empty() ? "no GPU found" : "GPU error: " + hw.gpu_error) : kUser);

  // ---- CPU side: RAM or streaming --------------------------------------------------
  const uint64_t kv_ram_bpt = kv_on_gpu ? 0 : kv_bpt(m, p.kv_type);
  const auto fits = [&](uint64_t weights, int64_t kv) { return work + weights + uint64_t(kv) * kv_ram_bpt <= p.ram_budget; };
  std::string weights_why;
  if (!kv_on_gpu) p.kv_tokens = kv_want;
  if (ov.weights) {
    p.weights = *ov.weights == "stream" ? WeightPlacement::Stream : WeightPlacement::Ram;
    weights_why = kUser;
  } else if (fits(cpu_weights, kv_on_gpu ? 0 : kv_want)) {
    p.weights = WeightPlacement::Ram;
    weights_why = fmt::format("{} of weights + {} of KV fit the {} this process may use", sz(cpu_weights),
                              sz(uint64_t(p.kv_tokens) * kv_ram_bpt), sz(p.ram_budget));
  } else if (fits(cpu_weights, kv_on_gpu ? 0 : kv_min)) {
    p.weights = WeightPlacement::Ram;
    if (!kv_on_gpu) p.kv_tokens = std::max<int64_t>(kv_min, kv_tokens_fit(p.ram_budget - work - cpu_weights, p.kv_type));
    weights_why = fmt::format("{} of weights fit the {} budget with the KV cache cut to {} tokens", sz(cpu_weights),
                              sz(p.ram_budget), p.kv_tokens);
    if (p.kv_tokens < kv_want)
      warn(fmt::format("KV cache cut to {} tokens ({} wanted) to fit {} of weights in the {} memory budget", p.kv_tokens,
                       kv_want, sz(cpu_weights), sz(p.ram_budget)));
  } else {
    p.weights = WeightPlacement::Stream;
    weights_why = fmt::format("{} of weights exceed the {} this process may use: dense parts stay in RAM, experts are read "
                              "from the file as the router picks them",
                              sz(cpu_weights), sz(p.ram_budget));
    warn(fmt::format("{} of weights exceed the {} memory budget: experts are streamed from the file (slower decode)",
                     sz(cpu_weights), sz(p.ram_budget)));
  }
  if (p.weights == WeightPlacement::Stream && !kv_on_gpu) {
    // Memory goes to experts before extra KV: keep one context per expected stream only while it costs ≤ ¼ of the budget.
    int64_t cap = kv_tokens_fit(p.ram_budget / 4, p.kv_type);
    p.kv_tokens = std::max<int64_t>(kv_min, std::min<int64_t>(kv_want, cap));
    if (!fits(cpu_dense, p.kv_tokens) && !ov.kv_type && m.kv_q8_ok && p.kv_type != KvType::Q8_0) {
      p.kv_type = KvType::Q8_0;
      kv_type_why = "q8_0: f16 rows for the context do not fit beside the dense weights (|Δlogit| ≈ 0.06 against f32)";
      warn("KV cache stored as q8_0: f16 rows do not fit beside the dense weights");
    }
    const int n_ctx_before = p.n_ctx;
    while (!fits(cpu_dense, p.kv_tokens) && p.n_ctx > 1024 && !ov.n_ctx && !ov.kv_tokens) {
      p.n_ctx /= 2;
      p.kv_tokens = p.n_ctx;
      for (Plan::Reason& r : p.reasons)
        if (r.key == "context") r = {r.key, std::to_string(p.n_ctx), "halved until the dense weights and one context of KV fit in memory"};
    }
    if (p.n_ctx < n_ctx_before)
      warn(fmt::format("context halved from {} to {} tokens to fit the dense weights and one context of KV in memory",
                       n_ctx_before, p.n_ctx));
    if (!fits(cpu_dense, p.kv_tokens)) {
      p.ok = false;
      p.error = fmt::format("out of memory: the dense weights ({}) + KV for {} tokens ({}) + working buffers ({}) exceed the "
                            "{} this process may use",
                            sz(cpu_dense), p.kv_tokens, sz(uint64_t(p.kv_tokens) * kv_ram_bpt), sz(work), sz(p.ram_budget));
    }
  }
  p.kv_bytes = uint64_t(p.kv_tokens) * kv_bpt(m, p.kv_type);
  why("weights", to_string(p.weights), weights_why);
  why("kvCache.type", to_string(p.kv_type), kv_type_why);
  why("kvCache.tokens", std::to_string(p.kv_tokens),
      ov.kv_tokens ? kUser
      : p.kv_tokens >= kv_want
          ? fmt::format("{} contexts of {} ({} expected streams), {}{}", conc, p.n_ctx, conc, sz(p.kv_bytes),
                        kv_on_gpu ? " of VRAM" : "")
          : fmt::format("cut to what memory allows ({}); requests wait or are preempted beyond it", sz(p.kv_bytes)));

  // ---- experts: cache and prefetch --------------------------------------------------
  const uint64_t all_experts_cpu = cpu_weights - cpu_dense;
  if (p.weights == WeightPlacement::Stream && p.ok && m.n_expert > 0) {
    const uint64_t used = work + cpu_dense + uint64_t(p.kv_tokens) * kv_ram_bpt;
    const uint64_t left = p.ram_budget > used ? p.ram_budget - used : 0;
    // Half of what is left holds the most-routed experts (their pages locked,
    // never evicted for a streamed read); the other half stays page cache for
    // the experts being streamed and their readahead.
    p.expert_cache_bytes = ov.expert_cache_mb ? uint64_t(*ov.expert_cache_mb) * kMiB : std::min(all_experts_cpu, left / 2);
    p.expert_cache_experts = m.expert_bytes ? int(p.expert_cache_bytes / m.expert_bytes) : 0;
    p.expert_policy = "frequency (decayed counts of routed tokens); pages locked (or copied), a few swapped per step";
    why("experts.cacheMb", fmt::format("{} ({} experts)", sz(p.expert_cache_bytes), p.expert_cache_experts),
        ov.expert_cache_mb ? kUser
                           : fmt::format("half of the {} left after dense weights and KV; the other half stays page cache "
                                         "for streamed experts",
                                         sz(left)));
    const double bw = hw.mem_bw_gbs > 0 ? hw.mem_bw_gbs : 10.0;
    const double disk = hw.disk.read_gbs > 0 ? hw.disk.read_gbs : (hw.disk.rotational ? 0.15 : 0.5);
    const double t_layer = double(m.active_bytes()) / std::max(1, m.n_layer) / (bw * 1e9);
    const double cached_share = m.n_moe_layers && m.n_expert
                                    ? double(p.expert_cache_experts) / double(m.n_moe_layers * m.n_expert)
                                    : 0;
    const double t_fetch = double(m.n_expert_used) * double(m.expert_bytes) * (1 - std::min(1.0, cached_share)) / (disk * 1e9);
    const int d = std::clamp(int(std::ceil(t_fetch / std::max(1e-9, t_layer))), 1, 2);
    p.prefetch = ov.prefetch.value_or(true);
    p.prefetch_distance = ov.prefetch_distance.value_or(d);
    why("experts.prefetch", p.prefetch ? fmt::format("{} layer(s) ahead", p.prefetch_distance) : "off",
        ov.prefetch || ov.prefetch_distance
            ? kUser
            : fmt::format("fetching a layer's missing experts takes ~{:.2f} ms ({:.2f} GB/s disk) vs ~{:.3f} ms to compute a "
                          "layer ({:.0f} GB/s memory): request them {} layer(s) ahead, as far as the prediction stays accurate",
                          t_fetch * 1e3, disk, t_layer * 1e3, bw, p.prefetch_distance));
    p.ram_bytes = used + p.expert_cache_bytes;
  } else {
    p.expert_policy = "none";
    p.prefetch = ov.prefetch.value_or(false) && m.n_expert > 0;
    p.prefetch_distance = p.prefetch ? ov.prefetch_distance.value_or(1) : 0;
    if (ov.expert_cache_mb && m.n_expert > 0) p.expert_cache_bytes = uint64_t(*ov.expert_cache_mb) * kMiB;
    why("experts.prefetch", p.prefetch ? fmt::format("{} layer(s) ahead", p.prefetch_distance) : "off",
        m.n_expert == 0 ? "a dense model: no experts"
        : ov.prefetch   ? kUser
                        : "every expert is resident: nothing to fetch");
    p.ram_bytes = work + cpu_weights + uint64_t(p.kv_tokens) * kv_ram_bpt;
  }
  if (ov.max_batch) p.max_batch = *ov.max_batch;
  why("batch.max", std::to_string(p.max_batch),
      ov.max_batch ? kUser
      : gpu        ? "a GPU step costs about the same up to a few dozen tokens"
                   : "continuous batching shares each weight read; on a CPU near its compute limit more sequences per "
                     "step only lengthen the step");
  if (p.ok && p.weights == WeightPlacement::Ram && p.ram_bytes > p.ram_budget && !ov.weights) {
    p.ok = false;
    p.error = fmt::format("out of memory: the plan needs {} but {} is usable", sz(p.ram_bytes), sz(p.ram_budget));
  }
  return p;
}

std::string Plan::to_text() const {
  std::string o;
  if (!ok) o += "error: " + error + "\n";
  for (const Reason& r : reasons) o += fmt::format("{:<20} {:<22} {}\n", r.key, r.value, r.why);
  o += fmt::format("{:<20} {:<22} {}\n", "memory", sz(ram_bytes) + " RAM" + (vram_bytes ? ", " + sz(vram_bytes) + " VRAM" : ""),
                   fmt::format("planned resident use (budget {}{})", sz(ram_budget),
                               vram_budget ? ", VRAM " + sz(vram_budget) : std::string()));
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
                      {"gpu", {{"device", gpu}, {"expertsPerLayer", gpu_experts_per_layer}, {"vramBytes", vram_bytes},
                               {"vramBudget", vram_budget}}},
                      {"kvCache", {{"type", moelsp::to_string(kv_type)}, {"blockSize", block_size}, {"tokens", kv_tokens},
                                   {"paged", paged}, {"bytes", kv_bytes}}},
                      {"experts", {{"cacheBytes", expert_cache_bytes}, {"cacheExperts", expert_cache_experts},
                                   {"policy", expert_policy}, {"prefetch", prefetch}, {"prefetchDistance", prefetch_distance}}},
                      {"batch", {{"max", max_batch}, {"prefillChunk", prefill_chunk}}},
                      {"memory", {{"ramBytes", ram_bytes}, {"ramBudget", ram_budget}}},
                      {"reasons", reasons_j}};
  if (!ok) j["error"] = error;
  return j.dump();
}

}  // namespace moelsp
