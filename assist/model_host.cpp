// Loading, holding and describing the model the front ends serve.
#include "assist/model_host.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "assist/backend.h"
#include "assist/remote_backend.h"
#include "assist/service.h"
#include "engine/model.h"
#include "engine/plan.h"

namespace moelsp::assist {

using json = nlohmann::json;

const char* to_string(ModelPhase p) {
  switch (p) {
    case ModelPhase::Loading: return "loading";
    case ModelPhase::Ready: return "ready";
    case ModelPhase::Error: return "error";
  }
  return "error";
}

ModelHost::ModelHost(Service& service, Hooks hooks, Slot slot)
    : service_(service), hooks_(std::move(hooks)), slot_(slot) {}

void ModelHost::install(std::shared_ptr<Backend> b) {
  if (slot_ == Slot::Main) service_.set_backend(std::move(b));
  else service_.set_completion_backend(std::move(b));
}

void ModelHost::reserve(uint64_t ram_bytes, uint64_t vram_bytes) {
  std::lock_guard lock(mu_);
  reserved_ram_ = ram_bytes;
  reserved_vram_ = vram_bytes;
}

ModelHost::~ModelHost() { unload(); }

void ModelHost::load(const Settings& s, bool full_context) {
  if (loader_.joinable()) loader_.join();
  {
    std::lock_guard lock(mu_);
    loaded_ = {
        .model = s.model, .backend_url = s.backend_url, .plan = s.plan, .prompt_cache = prompt_cache_options(s).dir};
  }
  if (s.backend_url && !s.backend_url->empty()) return load_remote(s);
  if (!s.model || s.model->empty()) {
    fail("no model file named");
    if (hooks_.done) hooks_.done(snapshot());
    return;
  }
  {
    std::lock_guard lock(mu_);
    state_ = {.phase = ModelPhase::Loading, .message = "loading " + *s.model, .file = *s.model};
  }
  if (hooks_.loading) hooks_.loading(snapshot());
  loader_ = std::thread([this, s, full_context] { load_engine(s, full_context); });
}

void ModelHost::load_engine(Settings s, bool full_context) {
  try {
    PlanRequest req;
    req.over = s.plan;
    req.full_context = full_context;
    {
      std::lock_guard lock(mu_);
      req.reserved_ram_bytes = reserved_ram_;
      req.reserved_vram_bytes = reserved_vram_;
    }
    // The plan: threads, KV size and layout, expert prefetch/cache, batch
    // limits, each with its reason.
    PlannedModel pm = load_planned(*s.model, req);
    {  // (the plan is told even when building the engine fails: it says why)
      std::lock_guard lock(mu_);
      state_.plan_text = pm.plan.to_text();
    }
    EngineOptions eo = pm.plan.engine_options();
    eo.prompt_cache = prompt_cache_options(s);
    auto b = std::make_shared<EngineBackend>(std::make_unique<Engine>(pm.model, eo));
    install(b);
    std::lock_guard lock(mu_);
    state_.model = pm.model;
    state_.backend = b;
    state_.n_ctx = pm.plan.n_ctx;
    state_.ram_bytes = pm.plan.ram_bytes;
    state_.vram_bytes = pm.plan.vram_bytes;
    plan_json_ = std::make_shared<const json>(json::parse(pm.plan.to_json()));
    hw_json_ = std::make_shared<const json>(json::parse(pm.hw.to_json()));
    state_.phase = ModelPhase::Ready;
    state_.message = "model loaded: " + *s.model;
  } catch (const std::exception& e) {
    set(ModelPhase::Error, e.what());
  }
  if (hooks_.done) hooks_.done(snapshot());
}

// A remote server generates: nothing to load here. Its health shows in the
// status (backend.lastError) once requests go to it.
void ModelHost::load_remote(const Settings& s) {
  RemoteOptions o;
  o.url = *s.backend_url;
  o.api_key = s.backend_api_key.value_or("");
  o.model = s.backend_model.value_or("");
  if (s.backend_api) o.api = *s.backend_api;
  if (s.backend_fim_template) o.fim_template = *s.backend_fim_template;
  if (s.backend_ca_file) o.ca_file = *s.backend_ca_file;
  if (s.backend_verify_tls) o.verify_tls = *s.backend_verify_tls;
  try {
    auto b = std::make_shared<RemoteBackend>(o);
    {  // first: a completion that sees the remote backend in the service also sees it here (its privacy rules)
      std::lock_guard lock(mu_);
      state_ = {.phase = ModelPhase::Ready,
                .message = "remote backend " + o.url + " (" + o.api + ")",
                .backend_url = o.url,
                .remote = b};
    }
    install(b);
  } catch (const std::exception& e) {
    std::lock_guard lock(mu_);
    state_ = {.phase = ModelPhase::Error, .message = e.what(), .backend_url = o.url};
  }
  if (hooks_.done) hooks_.done(snapshot());
}

void ModelHost::unload() {
  if (loader_.joinable()) loader_.join();
  install(nullptr);
  std::lock_guard lock(mu_);
  state_ = {.phase = ModelPhase::Loading};
  plan_json_.reset();
  hw_json_.reset();
}

void ModelHost::fail(std::string message) { set(ModelPhase::Error, std::move(message)); }

void ModelHost::set(ModelPhase phase, std::string message) {
  std::lock_guard lock(mu_);
  state_.phase = phase;
  state_.message = std::move(message);
}

ModelHost::Snapshot ModelHost::snapshot() const {
  std::lock_guard lock(mu_);
  return state_;
}

ModelPhase ModelHost::phase() const {
  std::lock_guard lock(mu_);
  return state_.phase;
}

bool ModelHost::is_remote() const {
  std::lock_guard lock(mu_);
  return state_.remote != nullptr;
}

LoadKey ModelHost::loaded() const {
  std::lock_guard lock(mu_);
  return loaded_;
}

namespace {

json engine_status(const Model& model, const Engine& engine, const EngineMetrics& m) {
  const ExpertMetrics em = model.expert_metrics();
  json s;
  s["experts"] = {{"predictionAccuracy", em.accuracy()},      {"previousTokenAccuracy", em.baseline_accuracy()},
                  {"prefetchDistance", em.distance},          {"prefetchRequests", em.prefetch_requests},
                  {"prefetchBytes", em.prefetch_bytes},       {"prefetchReadBytes", em.prefetch_missing_bytes},
                  {"cacheExperts", em.cache_experts},         {"cachePinned", em.cache_pinned},
                  {"cacheHitRate", em.cache_hit_rate()},      {"cacheSwaps", em.cache_swaps},
                  {"majorFaults", em.major_faults},           {"minorFaults", em.minor_faults},
                  {"deviceBytesMoved", em.device_bytes_moved}};
  s["device"] = model.device_description();
  s["kvCache"] = {{"blocksTotal", m.kv.blocks_total},   {"blocksInUse", m.kv.blocks_in_use},
                  {"blocksCached", m.kv.blocks_cached}, {"blocksFree", m.kv.blocks_free},
                  {"evictions", m.kv.evictions},        {"prefixHitRate", m.prefix_hit_rate},
                  {"prefixHitTokens", m.kv.hit_tokens}};
  if (m.prompt_cache_on)
    s["promptCache"] = {{"dir", engine.options().prompt_cache.dir},
                        {"files", m.prompt_cache.files},
                        {"bytes", m.prompt_cache.bytes},
                        {"blocksWritten", m.prompt_cache.blocks_written},
                        {"blocksRestored", m.prompt_cache.blocks_restored},
                        {"filesRefused", m.prompt_cache.files_refused},
                        {"writesSkipped", m.prompt_cache.writes_skipped}};
  s["scheduler"] = {{"steps", m.steps},
                    {"meanBatch", m.mean_batch()},
                    {"lastBatch", m.last_batch},
                    {"maxBatch", m.max_batch},
                    {"requests", m.requests},
                    {"preemptions", m.preemptions},
                    {"meanQueueMs", m.mean_queue_ms()},
                    {"maxQueueMs", m.queue_ms_max},
                    {"running", m.running},
                    {"waiting", m.waiting},
                    {"draftSteps", m.draft_steps},
                    {"draftTokens", m.draft_tokens},
                    {"draftAccepted", m.draft_accepted}};
  return s;
}

}  // namespace

json ModelHost::status() const {
  Snapshot st;
  std::shared_ptr<const json> plan, hw;
  {
    std::lock_guard lock(mu_);
    st = state_;
    plan = plan_json_;
    hw = hw_json_;
  }
  json s = json::object();
  if (st.model) {
    s["model"] = st.model->config().name.empty() ? st.model->config().arch : st.model->config().name;
    s["plan"] = plan ? *plan : json::object();
    s["hardware"] = hw ? *hw : json::object();
  }
  if (st.model && st.backend) {
    const Engine& engine = st.backend->engine();
    const EngineMetrics m = engine.metrics();
    s.update(engine_status(*st.model, engine, m));
    s["plan"]["kvCache"]["bytes"] = m.kv.bytes;
    s["plan"]["kvCache"]["prefixCache"] = engine.options().prefix_cache;
  }
  if (st.remote) {
    const RemoteOptions& o = st.remote->options();
    s["model"] = o.model.empty() ? o.url : o.model;
    s["backend"] = {{"url", o.url},
                    {"api", o.api},
                    {"model", o.model},
                    {"fimTemplate", o.fim_template},
                    {"lastError", st.remote->last_error()}};
  }
  return s;
}

std::string ModelHost::metrics_text() const {
  Snapshot st = snapshot();
  if (!st.model || !st.backend) return "";
  const EngineMetrics k = st.backend->engine().metrics();
  const ExpertMetrics x = st.model->expert_metrics();
  std::string out;
  const auto gauge = [&](const char* name, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
           std::to_string(v) + "\n";
  };
  gauge("moelsp_kv_blocks_in_use", "KV blocks held by running sequences.", double(k.kv.blocks_in_use));
  gauge("moelsp_kv_blocks_cached", "KV blocks kept for the prefix cache.", double(k.kv.blocks_cached));
  gauge("moelsp_kv_blocks_free", "Free KV blocks.", double(k.kv.blocks_free));
  gauge("moelsp_prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / looked up.", k.prefix_hit_rate);
  gauge("moelsp_scheduler_running", "Sequences running.", k.running);
  gauge("moelsp_scheduler_waiting", "Requests waiting to be admitted.", k.waiting);
  gauge("moelsp_scheduler_mean_batch", "Mean sequences per step.", k.mean_batch());
  gauge("moelsp_expert_cache_hit_rate", "Hot-expert cache hit rate.", x.cache_hit_rate());
  gauge("moelsp_expert_prediction_accuracy", "Experts predicted layers ahead that were routed.", x.accuracy());
  gauge("moelsp_major_page_faults", "Major page faults during forward passes.", double(x.major_faults));
  // Per MoE layer: how evenly the router spreads tokens over experts
  // (normalised entropy, 1 = uniform) and how evenly the expert work was
  // split over threads ((max − min) / max). Read without a lock from the
  // scheduler's counters: they only grow, so a scrape is at worst a step old.
  std::string entropy =
      "# HELP moelsp_expert_activation_entropy Routed-token entropy per MoE layer (1 = uniform).\n"
      "# TYPE moelsp_expert_activation_entropy gauge\n";
  std::string imbalance =
      "# HELP moelsp_thread_load_imbalance Expert work (max - min) / max over threads per MoE layer.\n"
      "# TYPE moelsp_thread_load_imbalance gauge\n";
  const auto& stats = st.model->moe_stats();
  for (size_t layer = 0; layer < stats.size(); ++layer) {
    const MoeLayerStats& ls = stats[layer];
    if (ls.calls == 0 || ls.expert_tokens.size() < 2) continue;
    const std::string label = "{layer=\"" + std::to_string(layer) + "\"} ";
    entropy += "moelsp_expert_activation_entropy" + label + std::to_string(ls.entropy()) + "\n";
    imbalance += "moelsp_thread_load_imbalance" + label + std::to_string(ls.thread_imbalance()) + "\n";
  }
  return out + entropy + imbalance;
}

}  // namespace moelsp::assist
