#include "engine/engine.h"

#include <algorithm>

#include <fmt/format.h>

namespace moelsp {

using Clock = std::chrono::steady_clock;

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

struct Handle::State {
  std::atomic<bool> cancel{false};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result result;
};

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

struct Engine::Job {
  Request req;
  Callbacks cb;
  std::shared_ptr<Handle::State> state;
  uint64_t seq = 0;
};

Engine::Engine(std::shared_ptr<Model> model, EngineOptions opt) : model_(std::move(model)), opt_(opt) {
  if (opt_.n_ctx <= 0) throw ModelError("context size must be positive");
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    for (auto& j : queue_) j->state->cancel = true;
  }
  cv_.notify_all();
  thread_.join();
}

Handle Engine::submit(Request req, Callbacks cb) {
  auto job = std::make_shared<Job>();
  job->req = std::move(req);
  job->cb = std::move(cb);
  job->state = std::make_shared<Handle::State>();
  Handle h(job->state);
  {
    std::lock_guard lock(mu_);
    job->seq = seq_++;
    if (stop_) job->state->cancel = true;
    queue_.push_back(job);
  }
  cv_.notify_one();
  return h;
}

void Engine::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto it = std::max_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
        return a->req.priority < b->req.priority || (a->req.priority == b->req.priority && a->seq > b->seq);
      });
      job = *it;
      queue_.erase(it);
    }
    run(*job);
  }
}

namespace {

// Longest suffix of `text` that is a proper prefix of some stop string: text we
// must hold back because the next token could complete a stop string.
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops)
    for (size_t len = std::min(s.size() - 1, text.size()); len > hold; --len)
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  return hold;
}

}  // namespace

void Engine::run(Job& job) {
  Result res;
  const Request& req = job.req;
  auto& st = *job.state;
  const Model& m = *model_;
  const int n_vocab = m.config().n_vocab;
  auto finish = [&](FinishReason r) {
    res.reason = r;
    if (job.cb.on_done) job.cb.on_done(res);
    std::lock_guard lock(st.mu);
    st.result = res;
    st.done = true;
    st.cv.notify_all();
  };
  try {
    if (st.cancel) return finish(FinishReason::Cancelled);
    std::vector<TokenId> prompt = req.prompt_tokens;
    if (prompt.empty()) prompt = m.tokenizer().encode(req.prompt, {.add_special = true, .parse_special = true});
    if (prompt.empty()) throw ModelError("empty prompt");
    res.timings.n_prompt = int(prompt.size());
    if (int(prompt.size()) >= opt_.n_ctx)
      throw ModelError(fmt::format("prompt of {} tokens does not fit the context of {}", prompt.size(), opt_.n_ctx));

    // Reuse the longest common prefix with the previous sequence (at least one
    // token is always run again, to get the logits of the last prompt position).
    if (!cache_) cache_ = m.new_cache(opt_.n_ctx);
    size_t common = 0;
    while (common < prompt.size() && common < cached_tokens_.size() && common < size_t(cache_->n_past()) &&
           prompt[common] == cached_tokens_[common])
      ++common;
    common = std::min(common, prompt.size() - 1);
    cache_->truncate(int(common));
    cached_tokens_.resize(common);
    res.timings.n_prompt_cached = int(common);

    const auto t0 = Clock::now();
    const auto prompt_deadline = t0 + std::chrono::milliseconds(req.t_max_prompt_ms);
    bool timed_out = false;
    const CancelCheck prompt_cancel = [&] {
      if (st.cancel) return true;
      if (req.t_max_prompt_ms > 0 && Clock::now() > prompt_deadline) return timed_out = true;
      return false;
    };
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    try {
      model_->forward(std::span(prompt).subspan(common), *cache_, logits.data(), false, prompt_cancel);
    } catch (const Cancelled&) {
      return finish(timed_out ? FinishReason::Timeout : FinishReason::Cancelled);
    }
    cached_tokens_ = prompt;
    const auto t1 = Clock::now();
    res.timings.prompt_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();

    Sampler sampler(req.sampling, n_vocab);
    std::vector<TokenId> history = prompt;
    StreamingDecoder dec(m.tokenizer());
    std::string pending;  // decoded text not yet emitted (may start a stop string)
    const auto cancel_check = [&] { return bool(st.cancel); };
    FinishReason reason = FinishReason::Length;
    for (int i = 0; i < req.max_tokens; ++i) {
      if (st.cancel) {
        reason = FinishReason::Cancelled;
        break;
      }
      if (req.t_max_predict_ms > 0 &&
          Clock::now() - t1 > std::chrono::milliseconds(req.t_max_predict_ms)) {
        reason = FinishReason::Timeout;
        break;
      }
      const TokenId tok = sampler.sample(logits.data(), history);
      if (!req.ignore_eos && m.tokenizer().is_eog(tok)) {
        reason = FinishReason::Eos;
        break;
      }
      res.tokens.push_back(tok);
      history.push_back(tok);
      ++res.timings.n_generated;
      pending += dec.push(tok);
      // A stop string ends generation; its text is not returned.
      size_t stop_at = std::string::npos;
      for (const auto& s : req.stop)
        if (!s.empty()) stop_at = std::min(stop_at, pending.find(s));
      if (stop_at != std::string::npos) {
        pending.resize(stop_at);
        reason = FinishReason::Stop;
      }
      const size_t emit = reason == FinishReason::Stop ? pending.size() : pending.size() - held_back(pending, req.stop);
      if (emit > 0) {
        const std::string out = pending.substr(0, emit);
        pending.erase(0, emit);
        res.text += out;
        if (job.cb.on_token) job.cb.on_token(tok, out);
      }
      if (reason == FinishReason::Stop) break;
      if (i + 1 == req.max_tokens) break;
      if (cache_->n_past() >= cache_->n_ctx()) break;  // context full: finish with what we have
      try {
        model_->forward({&tok, 1}, *cache_, logits.data(), false, cancel_check);
      } catch (const Cancelled&) {
        reason = FinishReason::Cancelled;
        break;
      }
      cached_tokens_.push_back(tok);
    }
    if (reason != FinishReason::Stop && reason != FinishReason::Cancelled) {
      pending += dec.flush();
      res.text += pending;
      if (!pending.empty() && job.cb.on_token) job.cb.on_token(kNoToken, pending);
    }
    res.timings.generate_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    finish(reason);
  } catch (const std::exception& e) {
    res.error = e.what();
    finish(FinishReason::Error);
  }
}

}  // namespace moelsp
