// The engine's API side: handles, submission, options, metrics, and the
// scheduler's life (construction, shutdown, delivery of results). The
// scheduler thread's work is in scheduler.cpp (admission, preemption),
// step.cpp (building and running a forward pass) and output.cpp (sampling
// and emitting text).
#include "engine/engine.h"

#include <algorithm>
#include <future>

#include "internal.h"

namespace moelsp {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Eos: return "eos";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Timeout: return "timeout";
    case FinishReason::Error: return "error";
  }
  return "?";
}

void Handle::cancel() { s_->cancel = true; }

Result Handle::wait() {
  std::unique_lock lock(s_->mu);
  s_->cv.wait(lock, [&] { return s_->done; });
  return s_->result;
}

bool Handle::done() const {
  std::lock_guard lock(s_->mu);
  return s_->done;
}

Engine::Engine(std::shared_ptr<Model> model, EngineOptions opt)
    : sched_(std::make_unique<Scheduler>(std::move(model), opt)) {}
Engine::~Engine() = default;
Handle Engine::submit(Request req, Callbacks cb) { return sched_->submit(std::move(req), std::move(cb)); }
const Model& Engine::model() const { return sched_->model(); }
const EngineOptions& Engine::options() const { return sched_->options(); }
EngineMetrics Engine::metrics() const { return sched_->metrics(); }
void Engine::inspect_pool(const std::function<void(const BlockPool&)>& fn) { sched_->inspect_pool(fn); }

Scheduler::Scheduler(std::shared_ptr<Model> model, EngineOptions opt) : model_(std::move(model)), opt_(opt) {
  if (opt_.n_ctx <= 0) throw ModelError("context size must be positive");
  // Positions past the training context (for rope-scaled models already the
  // extended one) are outside what the model was trained for.
  const int trained = model_->config().n_ctx_train;
  if (trained > 0 && opt_.n_ctx > trained) opt_.n_ctx = trained;
  opt_.max_batch = std::max(1, opt_.max_batch);
  opt_.prefill_chunk = std::max(1, opt_.prefill_chunk);
  if (opt_.kv_tokens <= 0) opt_.kv_tokens = 4 * int64_t(opt_.n_ctx);
  const KvLayout layout = model_->kv_layout(opt_.kv_type, opt_.block_size);
  const int64_t n_blocks = (opt_.kv_tokens + layout.block_size - 1) / layout.block_size;
  pool_ = std::make_unique<BlockPool>(layout, n_blocks, model_->fingerprint(), opt_.prefix_cache);
  metrics_.kv = published_.kv = pool_->stats();
  if (!opt_.prompt_cache.dir.empty()) {
    if (!opt_.prefix_cache)
      throw ModelError("the prompt cache on disk needs the prefix cache (it maps stored blocks as cached ones)");
    prompt_cache_ = std::make_unique<PromptCache>(opt_.prompt_cache, *pool_, [this](std::function<void()> f) {
      {
        std::lock_guard lock(mu_);
        tasks_.push_back(std::move(f));
      }
      cv_.notify_one();
    });
    metrics_.prompt_cache_on = published_.prompt_cache_on = true;
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    for (auto& j : queue_) j->state->cancel = true;
  }
  cv_.notify_all();
  thread_.join();
}

Handle Scheduler::submit(Request req, Callbacks cb) {
  auto job = std::make_shared<Job>();
  job->req = std::move(req);
  job->cb = std::move(cb);
  job->state = std::make_shared<Handle::State>();
  Handle h(job->state);
  {
    std::lock_guard lock(mu_);
    job->seq = seq_++;
    job->t_submit = Clock::now();
    if (stop_) job->state->cancel = true;
    queue_.push_back(job);
  }
  cv_.notify_one();
  return h;
}

EngineMetrics Scheduler::metrics() const {
  std::lock_guard lock(mu_);
  return published_;
}

void Scheduler::inspect_pool(const std::function<void(const BlockPool&)>& fn) {
  std::promise<void> done;
  {
    std::lock_guard lock(mu_);
    tasks_.push_back([&] {
      try {
        fn(*pool_);
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_one();
  done.get_future().get();
}

void Scheduler::end(Live& l, FinishReason r) {
  l.seq.reset();
  if (l.phase == Phase::Ended) return;
  if (l.detached) {  // answered already (Request::finish_prompt)
    l.phase = Phase::Ended;
    return;
  }
  l.phase = Phase::Ended;
  l.res.reason = r;
  l.job->result = l.res;
  finished_.push_back(l.job);
}

void Scheduler::publish_metrics(int running, int waiting) {
  metrics_.kv = pool_->stats();
  metrics_.prefix_hit_rate =
      metrics_.kv.lookup_tokens ? double(metrics_.kv.hit_tokens) / double(metrics_.kv.lookup_tokens) : 0.0;
  metrics_.running = running;
  if (prompt_cache_) metrics_.prompt_cache = prompt_cache_->stats();
  metrics_.waiting = waiting;
  {
    std::lock_guard lock(mu_);
    published_ = metrics_;
  }
  deliver();
}

void Scheduler::deliver() {
  for (auto& job : finished_) {
    if (job->cb.on_done) job->cb.on_done(job->result);
    Handle::State& st = *job->state;
    std::lock_guard lock(st.mu);
    st.result = job->result;
    st.done = true;
    st.cv.notify_all();
  }
  finished_.clear();
}

}  // namespace moelsp
