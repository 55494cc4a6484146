// make_plan() as a pipeline of small steps. Each step reads the inputs and
// what the steps before it decided (PlanState), sets its own fields of the
// Plan, and adds its reasons — and a warning for each fallback — in the
// order they print. The order is the order in which memory is spent:
// working buffers, the dense weights (every token reads them), the KV cache
// for the requested context, then experts. A GPU step places dense weights
// and KV in VRAM first and the most-routed experts after them; what it
// leaves on the CPU is what the CPU steps place.
//
// The performance model: decoding reads active_bytes() per token, so a token
// costs at least active_bytes / memory bandwidth when the weights are in
// RAM, and the missing experts' bytes / disk rate when they stream from the
// file.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/plan.h"
#include "kernels/isa.h"
#include "plan_util.h"

namespace moelsp {
namespace {

constexpr const char* kUser = "set by the user";

// The inputs, the plan being built, and what earlier steps decided that
// later ones read.
struct PlanState {
  PlanState(const HwProfile& h, const ModelFootprint& fp, const PlanRequest& r) : hw(h), m(fp), req(r), ov(r.over) {}

  const HwProfile& hw;
  const ModelFootprint& m;
  const PlanRequest& req;
  const PlanOverrides& ov;
  Plan p;

  int conc = 1;                     // sequences expected at once
  std::string kv_type_why;          // the KV type's reason (a later step may change the type)
  uint64_t work = 0;                // working buffers (activations, logits, scratch)
  int64_t kv_want = 0, kv_min = 0;  // KV tokens: a context per stream, and at least one context
  const GpuProfile* gpu = nullptr;  // the device used, if any
  bool kv_on_gpu = false;
  uint64_t kv_ram_bpt = 0;   // KV bytes per token in RAM (0: the KV is in VRAM)
  uint64_t cpu_weights = 0;  // weight bytes the CPU side holds or streams
  uint64_t cpu_dense = 0;    // of which every token reads (or needs resident)
  std::string weights_why;

  void why(std::string key, std::string value, std::string reason) {
    p.reasons.push_back({std::move(key), std::move(value), std::move(reason)});
  }
  // Replaces the reason given earlier for `key` (a later step changed it).
  void rewhy(const std::string& key, std::string value, std::string reason) {
    for (Plan::Reason& r : p.reasons)
      if (r.key == key) r = {key, std::move(value), std::move(reason)};
  }
  void warn(std::string w) { p.warnings.push_back(std::move(w)); }

  bool fits(uint64_t weights, int64_t kv) const { return work + weights + uint64_t(kv) * kv_ram_bpt <= p.ram_budget; }
  // Whole blocks of KV of type t that `room` bytes hold.
  int64_t kv_tokens_fit(uint64_t room, KvType t) const {
    const uint64_t bpt = std::max<uint64_t>(1, kv_bytes_per_token(m, t));
    return int64_t(room / bpt) / p.block_size * p.block_size;
  }
};

void plan_threads_and_context(PlanState& s) {
  const HwProfile& hw = s.hw;
  Plan& p = s.p;
  p.threads = plan_threads(hw, s.ov);
  s.why("threads", std::to_string(p.threads),
        s.ov.threads
            ? kUser
            : fmt::format("one per physical core ({} cores, {} hardware threads): the kernels are bound by a "
                          "core's vector units, which its hardware threads share{}",
                          hw.cpu.physical, hw.cpu.logical,
                          hw.cpu.numa_nodes > 1 ? fmt::format("; {} NUMA nodes share them", hw.cpu.numa_nodes) : ""));
  const int n_train = s.m.n_ctx_train > 0 ? s.m.n_ctx_train : 1 << 20;
  const int asked = s.ov.n_ctx ? *s.ov.n_ctx : s.req.n_ctx;
  const bool full = asked <= 0 && s.req.full_context;
  p.n_ctx = std::min(n_train, asked > 0 ? asked : full ? n_train : std::min(4096, n_train));
  s.why("context", std::to_string(p.n_ctx),
        asked > 0 ? fmt::format("as requested, at most the training context {}", s.m.n_ctx_train)
        : full    ? "the model's whole training context: coding agents send prompts of tens of thousands of tokens"
        : p.n_ctx < 4096 ? "the model's training context (beyond it a model degrades)"
                         : "4,096 tokens: an editor's prompt of prefix + suffix + context from other files");
  if (asked > p.n_ctx)
    s.warn(fmt::format("context {} asked for, but the model was trained for {}: using {}", asked, s.m.n_ctx_train,
                       p.n_ctx));
  s.conc = std::max(1, s.req.concurrency);
}

// BF16 rows where the CPU's kernels read them with vdpbf16ps (the
// avx512-bf16 level) and the context is long enough for attention to weigh:
// at depth the scores and P·V take half the instructions of f16 rows, so a
// long prompt's prefill runs much faster, for a logit error between f16's and
// q8_0's. A GPU forward pass keeps f16 (its kernels were measured with it);
// editor-sized contexts (4,096) keep f16, where attention is a small share.
constexpr int kBf16MinContext = 8192;
constexpr const char* kBf16Why =
    "bf16: this CPU reads bf16 rows with vdpbf16ps (avx512-bf16 kernels); at a long context that pays: "
    "a 512-token prompt at depth 16,384 ran 1.3-1.7x faster than with f16 (qwen3moe-mid), "
    "at max |Δlogit| ≤ 0.05 against f32 (f16: 0.005)";

bool bf16_attention_pays(const PlanState& s) {
  const HwProfile& hw = s.hw;
  const bool gpu_pass = !hw.gpus.empty() && hw.cuda_build && s.req.gpu_forward && !(s.ov.gpu && *s.ov.gpu < 0);
  return !gpu_pass && hw.cpu.avx512_bf16 && hw.cpu.kernel_isa == kernels::isa_name(kernels::Isa::Avx512Bf16) &&
         s.p.n_ctx >= kBf16MinContext;
}

void plan_kv_layout(PlanState& s) {
  Plan& p = s.p;
  const PlanOverrides& ov = s.ov;
  p.paged = ov.paged.value_or(true);
  p.block_size = p.paged ? ov.block_size.value_or(16) : p.n_ctx;
  s.why("kvCache.paged", p.paged ? "yes" : "no (one block per sequence)",
        ov.paged
            ? kUser
            : "paged: decode after 2,000 tokens measured 1.06x (qwen3moe) and 1.20x (deepseek2 MLA) the speed of "
              "one contiguous block (bench_kv --layout), and blocks are what the prefix cache shares between prompts");
  s.why("kvCache.blockSize", std::to_string(p.block_size),
        ov.block_size || ov.paged ? kUser
                                  : "16 tokens: the prefix cache's unit (a partly matching block is copied, so an edit "
                                    "recomputes from the changed token); decode measured as fast as with 64");
  p.kv_type = ov.kv_type ? kv_type_from_name(*ov.kv_type) : KvType::F16;
  s.kv_type_why = ov.kv_type ? kUser : "f16: max |Δlogit| ≤ 0.005 against f32 at half the bytes";
  if (!ov.kv_type && bf16_attention_pays(s)) {
    p.kv_type = KvType::BF16;
    s.kv_type_why = kBf16Why;
  }
}

void plan_budgets(PlanState& s) {
  Plan& p = s.p;
  const uint64_t usable = s.hw.mem.usable();
  // Headroom for the rest of the system (editor, OS) and our own code and
  // heap: a tenth of what is usable, at least 512 MiB when that leaves most of it.
  const uint64_t headroom = std::max<uint64_t>(usable / 10, std::min<uint64_t>(512 * kMiB, usable / 5));
  p.ram_budget = usable > headroom ? usable - headroom : 0;
  // Activations of a 256-token chunk (a few [256 × n_ff] buffers), logits,
  // tokenizer tables, per-thread scratch: an estimate with room to spare
  // (a 256 × 10,944 f32 buffer is 11 MiB).
  s.work = 256 * kMiB;
  s.kv_want = s.ov.kv_tokens ? *s.ov.kv_tokens : int64_t(p.n_ctx) * s.conc;
  s.kv_min = s.ov.kv_tokens ? *s.ov.kv_tokens : p.n_ctx;
  s.cpu_weights = s.m.file_bytes;
  s.cpu_dense = s.m.dense_bytes;
}

// The whole training context (PlanRequest::full_context) only while the
// weights and one context of KV fit in RAM: halved until they do (not below
// 4,096), so a long context never pushes the weights out to streaming.
void plan_full_context(PlanState& s) {
  Plan& p = s.p;
  if (!s.req.full_context || s.ov.n_ctx || s.req.n_ctx > 0 || s.ov.kv_tokens) return;
  const uint64_t bpt = kv_bytes_per_token(s.m, p.kv_type);
  const auto fits = [&](int n) { return s.work + s.cpu_weights + uint64_t(n) * bpt <= p.ram_budget; };
  // Weights that cannot be resident at all stream from the file: then
  // plan_kv_size weighs the context against the experts' cache.
  if (!fits(0)) return;
  const int before = p.n_ctx;
  while (p.n_ctx > 4096 && !fits(p.n_ctx)) p.n_ctx = std::max(4096, p.n_ctx / 2);
  if (p.n_ctx < before) {
    s.rewhy("context", std::to_string(p.n_ctx),
            fmt::format("the training context {} halved until the weights ({}) and one context of KV ({}) fit the {} "
                        "this process may use",
                        before, size_text(s.cpu_weights), size_text(uint64_t(p.n_ctx) * bpt), size_text(p.ram_budget)));
    s.warn(fmt::format("context {} instead of the model's {}: more does not fit in memory beside the weights", p.n_ctx,
                       before));
  }
  if (!p.paged) p.block_size = p.n_ctx;  // one block per sequence
  s.kv_want = int64_t(p.n_ctx) * s.conc;
  s.kv_min = p.n_ctx;
}

// Which device, if any: the user's, or the one with the most memory.
const GpuProfile* choose_gpu(PlanState& s) {
  const HwProfile& hw = s.hw;
  if ((s.ov.gpu && *s.ov.gpu < 0) || hw.gpus.empty()) return nullptr;
  if (!hw.cuda_build) {
    s.why("backend", "cpu", "a GPU is present but this build has no CUDA (configure with MOELSP_CUDA=ON)");
    s.warn(fmt::format("GPU {} ({}) unused: this build has no CUDA (configure with MOELSP_CUDA=ON)", hw.gpus[0].index,
                       hw.gpus[0].name));
    return nullptr;
  }
  if (!s.req.gpu_forward || s.p.kv_type == KvType::Q8_0) {
    const std::string why = s.p.kv_type == KvType::Q8_0 ? "the GPU's KV cache holds f16, bf16 or f32 rows, not q8_0"
                            : s.req.gpu_why.empty()     ? "the GPU forward pass cannot run this model"
                                                        : s.req.gpu_why;
    s.why("backend", "cpu",
          fmt::format("GPU {} ({}, {}) found, but {}", hw.gpus[0].index, hw.gpus[0].name,
                      size_text(hw.gpus[0].vram_total), why));
    s.warn(fmt::format("GPU {} ({}) unused: {}", hw.gpus[0].index, hw.gpus[0].name, why));
    return nullptr;
  }
  const GpuProfile* gpu = nullptr;
  for (const GpuProfile& g : hw.gpus)
    if (s.ov.gpu ? g.index == *s.ov.gpu : (!gpu || g.vram_total > gpu->vram_total)) gpu = &g;
  return gpu;
}

// GPU: dense weights and one context of KV first, then as many experts of
// every layer as fit, then KV for more streams with what is left.
void plan_gpu(PlanState& s) {
  const GpuProfile* gpu = choose_gpu(s);
  const ModelFootprint& m = s.m;
  Plan& p = s.p;
  if (gpu) {
    const uint64_t vram = gpu->vram_free ? gpu->vram_free : gpu->vram_total;
    const uint64_t reserve = std::max<uint64_t>(512 * kMiB, gpu->vram_total / 20);
    p.vram_budget = vram > reserve ? vram - reserve : 0;
    const uint64_t gpu_work = kGiB;  // cuBLAS workspace, activations of a 512-token chunk
    // The device pass holds every dense weight, the embedding table included,
    // at its size there (types its kernels do not decode go up as F16).
    const uint64_t dev_dense = m.device_dense_bytes ? m.device_dense_bytes : m.dense_bytes;
    const uint64_t dev_expert = m.device_expert_bytes ? m.device_expert_bytes : m.expert_bytes;
    const uint64_t gpu_dense = dev_dense + gpu_work;
    // One context of KV comes before experts, experts before KV for more streams.
    const uint64_t per_expert_all_layers = std::max<uint64_t>(1, uint64_t(m.n_moe_layers) * dev_expert);
    const uint64_t bpt = std::max<uint64_t>(1, kv_bytes_per_token(m, p.kv_type));
    int64_t kv = s.kv_want;
    if (gpu_dense + uint64_t(kv) * bpt + uint64_t(m.n_expert) * per_expert_all_layers > p.vram_budget) kv = s.kv_min;
    if (gpu_dense + uint64_t(kv) * bpt > p.vram_budget) {
      s.why("backend", "cpu",
            fmt::format("GPU {} ({}): dense weights {} + KV {} exceed its {} budget", gpu->index, gpu->name,
                        size_text(gpu_dense), size_text(uint64_t(kv) * bpt), size_text(p.vram_budget)));
      s.warn(fmt::format("GPU {} ({}) unused: dense weights {} + KV {} exceed its {} budget", gpu->index, gpu->name,
                         size_text(gpu_dense), size_text(uint64_t(kv) * bpt), size_text(p.vram_budget)));
      gpu = nullptr;
    } else {
      p.backend = "cuda";
      p.gpu = gpu->index;
      s.kv_on_gpu = true;
      const uint64_t left = p.vram_budget - gpu_dense - uint64_t(kv) * bpt;
      p.gpu_experts_per_layer = int(std::min<uint64_t>(uint64_t(m.n_expert), left / per_expert_all_layers));
      if (s.ov.gpu_experts_per_layer) p.gpu_experts_per_layer = std::clamp(*s.ov.gpu_experts_per_layer, 0, m.n_expert);
      // What the experts leave (less than one expert's share) serves more streams.
      const uint64_t rest = left - std::min<uint64_t>(left, uint64_t(p.gpu_experts_per_layer) * per_expert_all_layers);
      kv = std::min<int64_t>(s.kv_want, kv + int64_t(rest / bpt) / p.block_size * p.block_size);
      p.kv_tokens = kv;
      p.vram_bytes = gpu_dense + uint64_t(kv) * bpt + uint64_t(p.gpu_experts_per_layer) * per_expert_all_layers;
      if (p.vram_bytes > p.vram_budget) {
        p.ok = false;
        p.error = fmt::format("out of GPU memory: {} experts per layer need {} of VRAM, the budget is {}",
                              p.gpu_experts_per_layer, size_text(p.vram_bytes), size_text(p.vram_budget));
      }
      s.why("backend", fmt::format("cuda (GPU {}: {})", gpu->index, gpu->name),
            fmt::format("dense weights {} and KV {} fit its {} budget", size_text(dev_dense),
                        size_text(uint64_t(kv) * bpt), size_text(p.vram_budget)));
      s.why("gpu.expertsPerLayer", fmt::format("{} of {}", p.gpu_experts_per_layer, m.n_expert),
            s.ov.gpu_experts_per_layer ? kUser
            : p.gpu_experts_per_layer == m.n_expert
                ? fmt::format("all experts fit ({} of VRAM in all)", size_text(p.vram_bytes))
                : fmt::format("as many as fit in the {} left ({} per expert across {} layers); the most routed ones "
                              "go there, the rest compute on the CPU",
                              size_text(left), size_text(per_expert_all_layers), m.n_moe_layers));
      s.cpu_weights = m.embd_bytes + uint64_t(m.n_expert - p.gpu_experts_per_layer) * uint64_t(m.n_moe_layers) *
                                         m.expert_bytes;  // the CPU's experts at their size in the file
      s.cpu_dense = m.embd_bytes;
      p.max_batch = 32;
      p.prefill_chunk = 512;
    }
  }
  s.gpu = gpu;
  if (!gpu && p.backend == "cpu" && (s.hw.gpus.empty() || (s.ov.gpu && *s.ov.gpu < 0)))
    s.why("backend", "cpu",
          s.hw.gpus.empty() ? (s.hw.gpu_error.empty() ? "no GPU found" : "GPU error: " + s.hw.gpu_error) : kUser);
}

// The CPU side's weights: all in RAM when they and the KV fit (the KV cut
// to one context if that is what it takes), else streamed from the file.
void plan_weights(PlanState& s) {
  Plan& p = s.p;
  s.kv_ram_bpt = s.kv_on_gpu ? 0 : kv_bytes_per_token(s.m, p.kv_type);
  if (!s.kv_on_gpu) p.kv_tokens = s.kv_want;
  const int64_t kv_want = s.kv_on_gpu ? 0 : s.kv_want, kv_min = s.kv_on_gpu ? 0 : s.kv_min;
  if (s.ov.weights) {
    p.weights = *s.ov.weights == "stream" ? WeightPlacement::Stream : WeightPlacement::Ram;
    s.weights_why = kUser;
  } else if (s.fits(s.cpu_weights, kv_want)) {
    p.weights = WeightPlacement::Ram;
    s.weights_why = fmt::format("{} of weights + {} of KV fit the {} this process may use", size_text(s.cpu_weights),
                                size_text(uint64_t(p.kv_tokens) * s.kv_ram_bpt), size_text(p.ram_budget));
  } else if (s.fits(s.cpu_weights, kv_min)) {
    p.weights = WeightPlacement::Ram;
    if (!s.kv_on_gpu)
      p.kv_tokens = std::max<int64_t>(s.kv_min, s.kv_tokens_fit(p.ram_budget - s.work - s.cpu_weights, p.kv_type));
    s.weights_why = fmt::format("{} of weights fit the {} budget with the KV cache cut to {} tokens",
                                size_text(s.cpu_weights), size_text(p.ram_budget), p.kv_tokens);
    if (p.kv_tokens < s.kv_want)
      s.warn(fmt::format("KV cache cut to {} tokens ({} wanted) to fit {} of weights in the {} memory budget",
                         p.kv_tokens, s.kv_want, size_text(s.cpu_weights), size_text(p.ram_budget)));
  } else {
    p.weights = WeightPlacement::Stream;
    s.weights_why = fmt::format(
        "{} of weights exceed the {} this process may use: dense parts stay in RAM, experts are "
        "read from the file as the router picks them",
        size_text(s.cpu_weights), size_text(p.ram_budget));
    s.warn(fmt::format("{} of weights exceed the {} memory budget: experts are streamed from the file (slower decode)",
                       size_text(s.cpu_weights), size_text(p.ram_budget)));
  }
}

// The KV cache in RAM when experts stream: memory goes to experts before
// extra KV, so one context per expected stream only while it costs ≤ ¼ of the
// budget; then q8_0 rows, then a halved context, before giving up.
void plan_kv_size(PlanState& s) {
  Plan& p = s.p;
  if (p.weights == WeightPlacement::Stream && !s.kv_on_gpu) {
    const int64_t cap = s.kv_tokens_fit(p.ram_budget / 4, p.kv_type);
    p.kv_tokens = std::max<int64_t>(s.kv_min, std::min<int64_t>(s.kv_want, cap));
    if (!s.fits(s.cpu_dense, p.kv_tokens) && !s.ov.kv_type && s.m.kv_q8_ok && p.kv_type != KvType::Q8_0) {
      p.kv_type = KvType::Q8_0;
      s.kv_ram_bpt = kv_bytes_per_token(s.m, p.kv_type);  // the fit checks below count q8_0 rows
      s.kv_type_why =
          "q8_0: f16 rows for the context do not fit beside the dense weights (|Δlogit| ≈ 0.06 against f32)";
      s.warn("KV cache stored as q8_0: f16 rows do not fit beside the dense weights");
    }
    const int n_ctx_before = p.n_ctx;
    while (!s.fits(s.cpu_dense, p.kv_tokens) && p.n_ctx > 1024 && !s.ov.n_ctx && !s.ov.kv_tokens) {
      p.n_ctx /= 2;
      p.kv_tokens = p.n_ctx;
      s.rewhy("context", std::to_string(p.n_ctx), "halved until the dense weights and one context of KV fit in memory");
    }
    if (p.n_ctx < n_ctx_before)
      s.warn(fmt::format("context halved from {} to {} tokens to fit the dense weights and one context of KV in memory",
                         n_ctx_before, p.n_ctx));
    if (!s.fits(s.cpu_dense, p.kv_tokens)) {
      p.ok = false;
      p.error = fmt::format(
          "out of memory: the dense weights ({}) + KV for {} tokens ({}) + working buffers ({}) exceed "
          "the {} this process may use",
          size_text(s.cpu_dense), p.kv_tokens, size_text(uint64_t(p.kv_tokens) * s.kv_ram_bpt), size_text(s.work),
          size_text(p.ram_budget));
    }
  }
  p.kv_bytes = uint64_t(p.kv_tokens) * kv_bytes_per_token(s.m, p.kv_type);
  s.why("weights", to_string(p.weights), s.weights_why);
  s.why("kvCache.type", to_string(p.kv_type), s.kv_type_why);
  s.why("kvCache.tokens", std::to_string(p.kv_tokens),
        s.ov.kv_tokens ? kUser
        : p.kv_tokens >= s.kv_want
            ? fmt::format("{} contexts of {} ({} expected streams), {}{}", s.conc, p.n_ctx, s.conc,
                          size_text(p.kv_bytes), s.kv_on_gpu ? " of VRAM" : "")
            : fmt::format("cut to what memory allows ({}); requests wait or are preempted beyond it",
                          size_text(p.kv_bytes)));
}

// Streamed experts: the most-routed ones held in RAM, the predicted ones
// requested ahead of the layer that needs them.
void plan_experts(PlanState& s) {
  Plan& p = s.p;
  const ModelFootprint& m = s.m;
  const PlanOverrides& ov = s.ov;
  const uint64_t kv_ram = uint64_t(p.kv_tokens) * s.kv_ram_bpt;
  if (p.weights == WeightPlacement::Stream && p.ok && m.n_expert > 0) {
    const uint64_t all_experts_cpu = s.cpu_weights - s.cpu_dense;
    const uint64_t used = s.work + s.cpu_dense + kv_ram;
    const uint64_t left = p.ram_budget > used ? p.ram_budget - used : 0;
    // Half of what is left holds the most-routed experts (their pages locked,
    // never evicted for a streamed read); the other half stays page cache for
    // the experts being streamed and their readahead.
    p.expert_cache_bytes =
        ov.expert_cache_mb ? uint64_t(*ov.expert_cache_mb) * kMiB : std::min(all_experts_cpu, left / 2);
    p.expert_cache_experts = m.expert_bytes ? int(p.expert_cache_bytes / m.expert_bytes) : 0;
    p.expert_policy = "frequency (decayed counts of routed tokens); pages locked (or copied), a few swapped per step";
    s.why("experts.cacheMb", fmt::format("{} ({} experts)", size_text(p.expert_cache_bytes), p.expert_cache_experts),
          ov.expert_cache_mb ? kUser
                             : fmt::format("half of the {} left after dense weights and KV; the other half stays page "
                                           "cache for streamed experts",
                                           size_text(left)));
    const double bw = s.hw.mem_bw_gbs > 0 ? s.hw.mem_bw_gbs : 10.0;
    const double disk = s.hw.disk.read_gbs > 0 ? s.hw.disk.read_gbs : (s.hw.disk.rotational ? 0.15 : 0.5);
    const double t_layer = double(m.active_bytes()) / std::max(1, m.n_layer) / (bw * 1e9);
    const double cached_share =
        m.n_moe_layers && m.n_expert ? double(p.expert_cache_experts) / double(m.n_moe_layers * m.n_expert) : 0;
    const double t_fetch =
        double(m.n_expert_used) * double(m.expert_bytes) * (1 - std::min(1.0, cached_share)) / (disk * 1e9);
    const int d = std::clamp(int(std::ceil(t_fetch / std::max(1e-9, t_layer))), 1, 2);
    p.prefetch = ov.prefetch.value_or(true);
    p.prefetch_distance = ov.prefetch_distance.value_or(d);
    s.why("experts.prefetch", p.prefetch ? fmt::format("{} layer(s) ahead", p.prefetch_distance) : "off",
          ov.prefetch || ov.prefetch_distance
              ? kUser
              : fmt::format("fetching a layer's missing experts takes ~{:.2f} ms ({:.2f} GB/s disk) vs ~{:.3f} ms to "
                            "compute a layer ({:.0f} GB/s memory): request them {} layer(s) ahead, as far as the "
                            "prediction stays accurate",
                            t_fetch * 1e3, disk, t_layer * 1e3, bw, p.prefetch_distance));
    p.ram_bytes = used + p.expert_cache_bytes;
  } else {
    p.expert_policy = "none";
    p.prefetch = ov.prefetch.value_or(false) && m.n_expert > 0;
    p.prefetch_distance = p.prefetch ? ov.prefetch_distance.value_or(1) : 0;
    if (ov.expert_cache_mb && m.n_expert > 0) p.expert_cache_bytes = uint64_t(*ov.expert_cache_mb) * kMiB;
    s.why("experts.prefetch", p.prefetch ? fmt::format("{} layer(s) ahead", p.prefetch_distance) : "off",
          m.n_expert == 0 ? "a dense model: no experts"
          : ov.prefetch   ? kUser
                          : "every expert is resident: nothing to fetch");
    p.ram_bytes = s.work + s.cpu_weights + kv_ram;
  }
}

void plan_batch(PlanState& s) {
  Plan& p = s.p;
  if (s.ov.max_batch) p.max_batch = *s.ov.max_batch;
  s.why("batch.max", std::to_string(p.max_batch),
        s.ov.max_batch ? kUser
        : s.gpu        ? "a GPU step costs about the same up to a few dozen tokens"
                       : "continuous batching shares each weight read; on a CPU near its compute limit more sequences "
                         "per step only lengthen the step");
}

void check_memory(PlanState& s) {
  Plan& p = s.p;
  if (p.ok && p.weights == WeightPlacement::Ram && p.ram_bytes > p.ram_budget && !s.ov.weights) {
    p.ok = false;
    p.error = fmt::format("out of memory: the plan needs {} but {} is usable", size_text(p.ram_bytes),
                          size_text(p.ram_budget));
  }
}

}  // namespace

namespace {

// The machine less what another model of this process holds (at least a
// byte left: 0 reads as "unknown" in the profile).
HwProfile less_reserved(const HwProfile& hw, const PlanRequest& req) {
  HwProfile h = hw;
  const auto take = [](uint64_t& v, uint64_t n) { v = v > n ? v - n : 1; };
  if (req.reserved_ram_bytes) {
    if (!h.mem.available) h.mem.available = h.mem.total;
    take(h.mem.available, req.reserved_ram_bytes);
    if (h.mem.cgroup_limit) take(h.mem.cgroup_limit, req.reserved_ram_bytes);
  }
  if (req.reserved_vram_bytes)
    for (GpuProfile& g : h.gpus) take(g.vram_free, req.reserved_vram_bytes);
  return h;
}

}  // namespace

Plan make_plan(const HwProfile& hw_in, const ModelFootprint& m, const PlanRequest& req) {
  const HwProfile hw = less_reserved(hw_in, req);
  PlanState s(hw, m, req);
  for (const auto step : {plan_threads_and_context, plan_kv_layout, plan_budgets, plan_full_context, plan_gpu,
                          plan_weights, plan_kv_size, plan_experts, plan_batch, check_memory})
    step(s);
  return std::move(s.p);
}

}  // namespace moelsp
