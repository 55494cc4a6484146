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

struct Engine::Sequence {
  std::unique_ptr<KvCache> cache;
  std::vector<TokenId> tokens;  // what the cache holds
  bool busy = false;
  uint64_t last_used = 0;
};

// A request being served.
struct Engine::Live {
  std::shared_ptr<Job> job;
  Sequence* seq = nullptr;
  Result res;
  bool prefilled = false;
  size_t prefill_pos = 0;  // next prompt token to run
  std::vector<TokenId> prompt, history;
  std::vector<float> logits;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDecoder> dec;
  std::string pending;  // decoded text not yet emitted (may start a stop string)
  Clock::time_point t0, t1;
  FinishReason reason = FinishReason::Length;
  bool finished = false;
};

Engine::Engine(std::shared_ptr<Model> model, EngineOptions opt) : model_(std::move(model)), opt_(opt) {
  if (opt_.n_ctx <= 0) throw ModelError("context size must be positive");
  opt_.max_sequences = std::max(1, opt_.max_sequences);
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

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void finish(const Callbacks& cb, Handle::State& st, Result& res, FinishReason r) {
  res.reason = r;
  if (cb.on_done) cb.on_done(res);
  std::lock_guard lock(st.mu);
  st.result = res;
  st.done = true;
  st.cv.notify_all();
}

}  // namespace

Engine::Sequence* Engine::acquire(const std::vector<TokenId>& prompt) {
  // The idle sequence sharing the longest prefix; else a new one while the
  // pool has room; else the least recently used idle one.
  Sequence* best = nullptr;
  size_t best_len = 0;
  for (auto& s : sequences_)
    if (!s->busy) {
      const size_t n = common_prefix(prompt, s->tokens);
      if (!best || n > best_len || (n == best_len && s->last_used > best->last_used)) best = s.get(), best_len = n;
    }
  if ((!best || best_len == 0) && int(sequences_.size()) < opt_.max_sequences) {
    sequences_.push_back(std::make_unique<Sequence>());
    sequences_.back()->cache = model_->new_cache(opt_.n_ctx);
    return sequences_.back().get();
  }
  if (best && best_len == 0) {  // reuse the least recently used idle sequence
    for (auto& s : sequences_)
      if (!s->busy && s->last_used < best->last_used) best = s.get();
  }
  return best;  // null: every sequence is busy
}

void Engine::loop() {
  std::vector<std::unique_ptr<Live>> live;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !live.empty(); });
      if (stop_ && queue_.empty() && live.empty()) return;
      if (stop_)
        for (auto& l : live) l->job->state->cancel = true;
      // Admit queued jobs while sequences are free (highest priority first).
      while (!queue_.empty() && int(live.size()) < opt_.max_sequences) {
        auto it = std::max_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
          return a->req.priority < b->req.priority || (a->req.priority == b->req.priority && a->seq > b->seq);
        });
        auto l = std::make_unique<Live>();
        l->job = *it;
        queue_.erase(it);
        live.push_back(std::move(l));
      }
    }
    // Finish cancelled requests first, so that their sequences (and the KV
    // prefixes they hold) are free for the requests that replace them: an
    // editor cancels the previous completion on every keystroke.
    for (auto it = live.begin(); it != live.end();) {
      Live& c = **it;
      if (!c.job->state->cancel) {
        ++it;
        continue;
      }
      if (c.seq) {
        c.res.timings.generate_ms = c.prefilled ? std::chrono::duration<double, std::milli>(Clock::now() - c.t1).count() : 0;
        c.seq->busy = false;
        c.seq->last_used = ++clock_;
      }
      finish(c.job->cb, *c.job->state, c.res, FinishReason::Cancelled);
      it = live.erase(it);
    }
    if (live.empty()) continue;
    // Step the highest-priority live request (earliest first among equals).
    auto it = std::max_element(live.begin(), live.end(), [](const auto& a, const auto& b) {
      return a->job->req.priority < b->job->req.priority ||
             (a->job->req.priority == b->job->req.priority && a->job->seq > b->job->seq);
    });
    Live& l = **it;
    bool more = false;
    try {
      more = l.seq ? step(l) : start(l);
    } catch (const std::exception& e) {
      l.res.error = e.what();
      finish(l.job->cb, *l.job->state, l.res, FinishReason::Error);
      more = false;
    }
    if (!more) {
      if (l.seq) {
        l.seq->busy = false;
        l.seq->last_used = ++clock_;
      }
      live.erase(it);
    }
  }
}

bool Engine::start(Live& l) {
  Job& job = *l.job;
  const Request& req = job.req;
  const Model& m = *model_;
  if (job.state->cancel) {
    finish(job.cb, *job.state, l.res, FinishReason::Cancelled);
    return false;
  }
  l.prompt = req.prompt_tokens;
  if (l.prompt.empty()) l.prompt = m.tokenizer().encode(req.prompt, {.add_special = true, .parse_special = true});
  if (l.prompt.empty()) throw ModelError("empty prompt");
  l.res.timings.n_prompt = int(l.prompt.size());
  if (int(l.prompt.size()) >= opt_.n_ctx)
    throw ModelError(fmt::format("prompt of {} tokens does not fit the context of {}", l.prompt.size(), opt_.n_ctx));
  l.seq = acquire(l.prompt);
  if (!l.seq) return true;  // all sequences busy: try again on a later step
  l.seq->busy = true;
  l.logits.resize(size_t(m.config().n_vocab));
  l.sampler = std::make_unique<Sampler>(req.sampling, m.config().n_vocab);
  l.dec = std::make_unique<StreamingDecoder>(m.tokenizer());
  return true;
}

bool Engine::step(Live& l) {
  Job& job = *l.job;
  const Request& req = job.req;
  auto& st = *job.state;
  Sequence& seq = *l.seq;
  KvCache& cache = *seq.cache;

  if (!l.prefilled) {
    if (l.prefill_pos == 0) {
      // Reuse the longest common prefix (always re-running at least the last
      // prompt token, for its logits).
      const size_t common = std::min({common_prefix(l.prompt, seq.tokens), size_t(cache.n_past()), l.prompt.size() - 1});
      cache.truncate(int(common));
      seq.tokens.resize(common);
      l.res.timings.n_prompt_cached = int(common);
      l.prefill_pos = common;
      l.t0 = Clock::now();
    }
    // The prompt runs in chunks, one per step: a cancelled request keeps the
    // chunks it finished in the sequence's cache (the next keystroke's
    // request reuses them), and a higher-priority request can run in between.
    const auto deadline = l.t0 + std::chrono::milliseconds(req.t_max_prompt_ms);
    bool timed_out = false;
    const CancelCheck cancel = [&] {
      if (st.cancel) return true;
      if (req.t_max_prompt_ms > 0 && Clock::now() > deadline) return timed_out = true;
      return false;
    };
    const size_t n = std::min(size_t(opt_.prefill_chunk), l.prompt.size() - l.prefill_pos);
    try {
      if (cancel()) throw Cancelled();
      model_->forward(std::span(l.prompt).subspan(l.prefill_pos, n), cache, l.logits.data(), false, cancel);
    } catch (const Cancelled&) {
      finish(job.cb, *job.state, l.res, timed_out ? FinishReason::Timeout : FinishReason::Cancelled);
      return false;
    }
    seq.tokens.insert(seq.tokens.end(), l.prompt.begin() + std::ptrdiff_t(l.prefill_pos),
                      l.prompt.begin() + std::ptrdiff_t(l.prefill_pos + n));
    l.prefill_pos += n;
    if (l.prefill_pos < l.prompt.size()) return true;
    l.history = l.prompt;
    l.t1 = Clock::now();
    l.res.timings.prompt_ms = std::chrono::duration<double, std::milli>(l.t1 - l.t0).count();
    l.prefilled = true;
    if (req.max_tokens <= 0) {
      finish(job.cb, *job.state, l.res, FinishReason::Length);
      return false;
    }
    return true;
  }

  // One generated token.
  const auto done = [&](FinishReason r) {
    if (r != FinishReason::Stop && r != FinishReason::Cancelled) {
      l.pending += l.dec->flush();
      l.res.text += l.pending;
      if (!l.pending.empty() && job.cb.on_token) job.cb.on_token(kNoToken, l.pending);
      l.pending.clear();
    }
    l.res.timings.generate_ms = std::chrono::duration<double, std::milli>(Clock::now() - l.t1).count();
    finish(job.cb, *job.state, l.res, r);
    return false;
  };
  if (st.cancel) return done(FinishReason::Cancelled);
  if (req.t_max_predict_ms > 0 && Clock::now() - l.t1 > std::chrono::milliseconds(req.t_max_predict_ms))
    return done(FinishReason::Timeout);
  const TokenId tok = l.sampler->sample(l.logits.data(), l.history);
  if (!req.ignore_eos && model_->tokenizer().is_eog(tok)) return done(FinishReason::Eos);
  l.res.tokens.push_back(tok);
  l.history.push_back(tok);
  ++l.res.timings.n_generated;
  l.pending += l.dec->push(tok);
  // A stop string ends generation; its text is not returned.
  size_t stop_at = std::string::npos;
  for (const auto& s : req.stop)
    if (!s.empty()) stop_at = std::min(stop_at, l.pending.find(s));
  const bool stopped = stop_at != std::string::npos;
  if (stopped) l.pending.resize(stop_at);
  const size_t emit = stopped ? l.pending.size() : l.pending.size() - held_back(l.pending, req.stop);
  if (emit > 0) {
    const std::string out = l.pending.substr(0, emit);
    l.pending.erase(0, emit);
    l.res.text += out;
    if (job.cb.on_token) job.cb.on_token(tok, out);
  }
  if (stopped) return done(FinishReason::Stop);
  if (int(l.res.tokens.size()) >= req.max_tokens) return done(FinishReason::Length);
  if (cache.n_past() >= cache.n_ctx()) return done(FinishReason::Length);  // context full
  try {
    model_->forward({&tok, 1}, cache, l.logits.data(), false, [&] { return bool(st.cancel); });
  } catch (const Cancelled&) {
    return done(FinishReason::Cancelled);
  }
  seq.tokens.push_back(tok);
  return true;
}

}  // namespace moelsp
