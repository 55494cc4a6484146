// The scheduler thread: continuous batching over the paged KV cache.
//
// Each iteration: take new submissions; end cancelled and timed-out requests
// (their blocks go back to the pool at once, full ones staying cached for the
// next keystroke's prompt); admit waiting requests by priority; build one
// step — the next token of every generating sequence, then prompt chunks in
// priority order within `prefill_chunk` tokens — reserving KV blocks, and
// preempting the lowest-priority sequences not yet in the step when the pool
// is dry; run it as one forward pass; sample for every sequence that got
// logits.
//
// Performance model: a decode step streams the dense weights once and each
// routed expert once per step whatever the number of sequences, so batching
// k decodes costs far less than k steps; prompt chunks riding in a decode
// step make that step longer, which the chunk budget bounds.
#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "engine/engine.h"
#include "internal.h"

namespace moelsp {
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

// Highest priority first; among equals, the earliest submitted.
bool before(const std::unique_ptr<Engine::Live>& a, const std::unique_ptr<Engine::Live>& b) {
  if (a->priority() != b->priority()) return a->priority() > b->priority();
  return a->job->seq < b->job->seq;
}

}  // namespace

void Engine::loop() {
  std::vector<std::unique_ptr<Live>> running, waiting;
  for (;;) {
    std::vector<std::function<void()>> tasks;
    bool stopping;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !queue_.empty() || !tasks_.empty() || !running.empty() || !waiting.empty(); });
      tasks.swap(tasks_);
      stopping = stop_;
      while (!queue_.empty()) {
        auto l = std::make_unique<Live>();
        l->finished = &finished_;
        l->job = std::move(queue_.front());
        queue_.pop_front();
        waiting.push_back(std::move(l));
      }
    }
    for (auto& t : tasks) t();
    if (stopping) {
      for (auto& l : running) l->job->state->cancel = true;
      for (auto& l : waiting) l->job->state->cancel = true;
    }
    // Cancelled and timed-out requests end first, so their blocks are free
    // (or cached) before anyone asks for more.
    const auto sweep = [&](std::vector<std::unique_ptr<Live>>& v) {
      std::erase_if(v, [&](const std::unique_ptr<Live>& p) {
        Live& l = *p;
        if (!l.decoding && l.seq && l.job->req.t_max_prompt_ms > 0 &&
            ms_since(l.t0) > double(l.job->req.t_max_prompt_ms))
          l.timed_out = true;
        if (!l.wants_out() && !l.ended) return false;
        if (l.decoding) l.res.timings.generate_ms = ms_since(l.t1);
        l.end(l.timed_out ? FinishReason::Timeout : FinishReason::Cancelled);
        return true;
      });
    };
    sweep(running);
    sweep(waiting);
    if (running.empty() && waiting.empty()) {
      publish_metrics(0, 0);
      if (stopping) {
        std::lock_guard lock(mu_);
        if (queue_.empty()) return;
      }
      continue;
    }
    schedule_step(running, waiting);
    publish_metrics(int(running.size()), int(waiting.size()));
  }
}

bool Engine::admit(Live& l) {
  const Request& req = l.job->req;
  const Model& m = *model_;
  std::vector<TokenId> prompt = req.prompt_tokens;
  if (prompt.empty()) prompt = m.tokenizer().encode(req.prompt, {.add_special = true, .parse_special = true});
  if (prompt.empty()) throw ModelError("empty prompt");
  // Fit: leave room to generate min(max_tokens, n_ctx / 4) tokens.
  const int room = std::max(1, std::min(std::max(req.max_tokens, 1), opt_.n_ctx / 4));
  const int limit = opt_.n_ctx - room;
  if (int(prompt.size()) > limit) {
    if (req.fit == Request::Fit::Error)
      throw ModelError(fmt::format("prompt of {} tokens does not fit the context of {} (with room for {} new tokens)",
                                   prompt.size(), opt_.n_ctx, room));
    const int keep = std::clamp(req.keep_start, 0, limit / 2);
    const int cut = int(prompt.size()) - limit;
    prompt.erase(prompt.begin() + keep, prompt.begin() + keep + cut);
    l.res.timings.n_prompt_cut = cut;
  }
  l.res.timings.n_prompt = int(prompt.size());
  l.todo = prompt;
  l.history = std::move(prompt);
  l.sampler = std::make_unique<Sampler>(req.sampling, m.config().n_vocab);
  l.dec = std::make_unique<StreamingDecoder>(m.tokenizer());
  l.admitted = true;
  return true;
}

void Engine::preempt(Live& l) {
  // What the sequence still has to run, after what its cache held: on
  // resumption all of it runs again (the prefix cache usually still holds
  // the full blocks), and the last token's logits are the ones it would have
  // produced next, so the output continues unchanged.
  std::vector<TokenId> redo = l.seq->tokens();
  if (l.decoding) redo.push_back(l.feed);
  else redo.insert(redo.end(), l.todo.begin() + std::ptrdiff_t(l.todo_pos), l.todo.end());
  l.todo = std::move(redo);
  l.todo_pos = 0;
  l.decoding = false;
  l.seq.reset();
  ++l.res.timings.n_preempted;
  ++metrics_.preemptions;
}

void Engine::schedule_step(std::vector<std::unique_ptr<Live>>& running, std::vector<std::unique_ptr<Live>>& waiting) {
  const int bs = pool_->layout().block_size;
  // Admission, by priority, while the step has room and the pool has blocks
  // for the newcomer's first chunk (always when nothing else runs, so a
  // request too large for the pool fails instead of waiting forever).
  std::stable_sort(waiting.begin(), waiting.end(), before);
  std::stable_sort(running.begin(), running.end(), before);
  for (auto it = waiting.begin(); it != waiting.end();) {
    Live& l = **it;
    if (int(running.size()) >= opt_.max_batch) {
      // A full step: a waiting request outranking the lowest running one takes its place.
      Live& last = *running.back();
      if (last.priority() >= l.priority()) break;
      preempt(last);
      std::unique_ptr<Live> out = std::move(running.back());
      running.pop_back();
      it = waiting.insert(it + 1, std::move(out)) - 1;
    }
    if (!l.admitted) {
      try {
        admit(l);
      } catch (const std::exception& e) {
        l.res.error = e.what();
        l.end(FinishReason::Error);
        it = waiting.erase(it);
        continue;
      }
    }
    // Short of blocks, a request still comes in when it outranks someone
    // running: the step then takes that one's blocks (preemption).
    const int64_t first = std::min<int64_t>(int64_t(l.todo.size()), opt_.prefill_chunk);
    if (!running.empty() && pool_->available() < (first + bs - 1) / bs + int64_t(running.size()) &&
        l.priority() <= running.back()->priority())
      break;
    if (l.t0 == Clock::time_point{}) {
      l.t0 = Clock::now();
      l.res.timings.queue_ms = std::chrono::duration<double, std::milli>(l.t0 - l.job->t_submit).count();
      ++metrics_.requests;
      metrics_.queue_ms_total += l.res.timings.queue_ms;
      metrics_.queue_ms_max = std::max(metrics_.queue_ms_max, l.res.timings.queue_ms);
    }
    l.seq = std::make_unique<KvSequence>(*pool_);
    // At least the last token runs again, for its logits.
    const int mapped = l.seq->map_prefix(l.todo, int(l.todo.size()) - 1);
    l.todo_pos = size_t(mapped);
    if (l.res.timings.n_preempted == 0) l.res.timings.n_prompt_cached = mapped;
    running.push_back(std::move(*it));
    it = waiting.erase(it);
    std::stable_sort(running.begin(), running.end(), before);
  }
  if (running.empty()) return;

  // The step (running is in priority order). Blocks come from the pool, else
  // from preempting the lowest-priority sequences not yet in this step.
  Batch batch;
  std::vector<Live*> in_batch;
  std::vector<int> n_of;
  int64_t budget = opt_.prefill_chunk;
  const int top = running.front()->priority();
  const int floor = opt_.interactive_alone && top >= Priority::kCompletion ? top : INT_MIN;
  for (size_t i = 0; i < running.size(); ++i) {
    Live& l = *running[i];
    if (!l.seq) continue;             // preempted in this loop
    if (l.priority() < floor) break;  // paused while an interactive request runs (the rest rank lower still)
    std::span<const TokenId> toks;
    if (l.decoding) {
      toks = {&l.feed, 1};
    } else {
      const int64_t n = std::min<int64_t>(int64_t(l.todo.size() - l.todo_pos), budget);
      if (n <= 0) continue;
      toks = std::span<const TokenId>(l.todo).subspan(l.todo_pos, size_t(n));
    }
    bool ok;
    while (!(ok = l.seq->reserve(int(toks.size())))) {
      Live* victim = nullptr;
      for (size_t j = running.size(); j-- > i + 1;)
        if (running[j]->seq) {
          victim = running[j].get();
          break;
        }
      if (!victim) break;
      preempt(*victim);
    }
    if (!ok) {
      if (in_batch.empty() && i == 0) {  // the whole pool to itself and it still does not fit
        l.res.error =
            fmt::format("the request needs {} KV blocks of {} tokens; the pool has {} in all",
                        l.seq->blocks_needed(int(toks.size())) + int(l.seq->blocks().size()), bs, pool_->n_blocks());
        l.end(FinishReason::Error);
      }
      continue;
    }
    if (!l.decoding) budget -= int64_t(toks.size());
    batch.add(*l.seq, toks);
    in_batch.push_back(&l);
    n_of.push_back(int(toks.size()));
  }
  // Preempted sequences wait again; ended ones leave.
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->ended) {
      it = running.erase(it);
    } else if (!(*it)->seq) {
      waiting.push_back(std::move(*it));
      it = running.erase(it);
    } else {
      ++it;
    }
  }
  if (batch.seqs.empty()) return;

  std::vector<float> logits(size_t(batch.logit_rows()) * size_t(model_->config().n_vocab));
  // A forward pass is abandoned only when every request in it wants out.
  const CancelCheck cancel = [&] {
    for (Live* l : in_batch)
      if (!l->wants_out()) return false;
    return true;
  };
  try {
    model_->forward(batch, logits.data(), cancel);
  } catch (const Cancelled&) {
    return;  // the next sweep ends them
  } catch (const std::exception& e) {
    for (Live* l : in_batch) {
      l->res.error = e.what();
      l->end(FinishReason::Error);
    }
    std::erase_if(running, [](const auto& l) { return l->ended; });
    return;
  }
  ++metrics_.steps;
  metrics_.step_seqs += int64_t(in_batch.size());
  metrics_.step_tokens += int64_t(batch.tokens.size());
  metrics_.last_batch = int(in_batch.size());
  metrics_.max_batch = std::max(metrics_.max_batch, metrics_.last_batch);

  const size_t nv = size_t(model_->config().n_vocab);
  for (size_t k = 0; k < in_batch.size(); ++k) {
    Live& l = *in_batch[k];
    if (!l.decoding) {
      l.todo_pos += size_t(n_of[k]);
      if (l.todo_pos < l.todo.size()) continue;
      if (l.t1 == Clock::time_point{}) {  // the request's own prompt (not a recomputation after preemption)
        l.t1 = Clock::now();
        l.res.timings.prompt_ms = std::chrono::duration<double, std::milli>(l.t1 - l.t0).count();
      }
      l.decoding = true;
      l.todo.clear();
      l.todo_pos = 0;
      if (l.job->req.max_tokens <= 0) {
        l.end(FinishReason::Length);
        continue;
      }
    }
    after_logits(l, logits.data() + k * nv);
  }
  std::erase_if(running, [](const auto& l) { return l->ended; });
}

TokenLogprob Engine::logprob_of(const float* logits, TokenId tok, int top_n) const {
  const Tokenizer& t = model_->tokenizer();
  const int nv = int(t.n_vocab());
  // log-softmax: x − max − log Σ exp(x − max), in double for the sum.
  const float mx = *std::max_element(logits, logits + nv);
  double sum = 0;
  for (int i = 0; i < nv; ++i) sum += std::exp(double(logits[i] - mx));
  const float log_z = mx + float(std::log(sum));
  TokenLogprob out{tok, t.piece(tok, true), logits[tok] - log_z, {}};
  if (top_n > 0) {
    std::vector<TokenId> ids(static_cast<size_t>(nv));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(),
                      [&](TokenId a, TokenId b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int i = 0; i < top_n; ++i)
      out.top.push_back({ids[size_t(i)], t.piece(ids[size_t(i)], true), logits[ids[size_t(i)]] - log_z});
  }
  return out;
}

bool Engine::after_logits(Live& l, const float* logits) {
  const Request& req = l.job->req;
  const Callbacks& cb = l.job->cb;
  const auto done = [&](FinishReason r) {
    if (r != FinishReason::Stop && r != FinishReason::Cancelled) {
      l.pending += l.dec->flush();
      l.res.text += l.pending;
      if (!l.pending.empty() && cb.on_token) cb.on_token(kNoToken, l.pending);
      l.pending.clear();
    }
    l.res.timings.generate_ms = ms_since(l.t1);
    l.end(r);
    return false;
  };
  if (l.job->state->cancel) return done(FinishReason::Cancelled);
  if (req.t_max_predict_ms > 0 && ms_since(l.t1) > double(req.t_max_predict_ms)) return done(FinishReason::Timeout);
  // Damaged weights (NaN/Inf somewhere the loader's sampling missed) show
  // here: an error, not a stream of token 0. ~20 µs for a 150k vocabulary.
  const int nv = int(model_->tokenizer().n_vocab());
  for (int i = 0; i < nv; ++i)
    if (!std::isfinite(logits[i])) {
      l.res.error = fmt::format(
          "the model computed a non-finite logit (token {}): its weights are damaged or "
          "their type is computed wrongly",
          i);
      return done(FinishReason::Error);
    }
  const TokenId tok = l.sampler->sample(logits, l.history);
  if (!req.ignore_eos && model_->tokenizer().is_eog(tok)) return done(FinishReason::Eos);
  if (req.logprobs >= 0) {
    l.res.logprobs.push_back(logprob_of(logits, tok, std::min(req.logprobs, kMaxTopLogprobs)));
    if (cb.on_logprob) cb.on_logprob(l.res.logprobs.back());
  }
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
    if (cb.on_token) cb.on_token(tok, out);
  }
  if (stopped || (emit > 0 && cb.should_stop && cb.should_stop(l.res.text))) return done(FinishReason::Stop);
  if (int(l.res.tokens.size()) >= req.max_tokens) return done(FinishReason::Length);
  if (l.seq->n_past() >= opt_.n_ctx) return done(FinishReason::Length);  // no position left for `tok`
  l.feed = tok;
  return true;
}

}  // namespace moelsp
