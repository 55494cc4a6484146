// The scheduler thread: continuous batching over the paged KV cache.
//
// Each iteration: take new submissions; end cancelled and timed-out requests
// (their blocks go back to the pool at once, full ones staying cached for the
// next keystroke's prompt); admit waiting requests by priority; build one
// step (step.cpp) — the next token of every generating sequence, then prompt
// chunks in priority order within `prefill_chunk` tokens — reserving KV
// blocks, and preempting the lowest-priority sequences not yet in the step
// when the pool is dry; run it as one forward pass; sample for every
// sequence that got logits (output.cpp).
//
// Performance model: a decode step streams the dense weights once and each
// routed expert once per step whatever the number of sequences, so batching
// k decodes costs far less than k steps; prompt chunks riding in a decode
// step make that step longer, which the chunk budget bounds.
#include <algorithm>

#include <fmt/format.h>

#include "internal.h"

namespace moelsp {
namespace {

// Highest priority first; among equals, the earliest submitted.
bool before(const std::unique_ptr<Live>& a, const std::unique_ptr<Live>& b) {
  if (a->priority() != b->priority()) return a->priority() > b->priority();
  return a->job->seq < b->job->seq;
}

}  // namespace

void Scheduler::loop() {
  Lives running, waiting;
  for (;;) {
    std::vector<std::function<void()>> tasks;
    bool stopping;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !queue_.empty() || !tasks_.empty() || !running.empty() || !waiting.empty(); });
      tasks.swap(tasks_);
      stopping = stop_;
      take_queued(running, waiting);
    }
    for (auto& t : tasks) t();
    if (stopping) {
      for (auto& l : running) l->job->state->cancel = true;
      for (auto& l : waiting) l->job->state->cancel = true;
    }
    // Cancelled and timed-out requests end first, so their blocks are free
    // (or cached) before anyone asks for more.
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
    admit_waiting(running, waiting);
    if (!running.empty()) {
      Step step = build_step(running);
      sort_after_step(running, waiting);
      if (!step.lives.empty()) run_step(step, running);
    }
    publish_metrics(int(running.size()), int(waiting.size()));
  }
}

void Scheduler::take_queued(Lives& running, Lives& waiting) {
  while (!queue_.empty()) {
    auto l = std::make_unique<Live>();
    l->job = std::move(queue_.front());
    queue_.pop_front();
    // An interactive newcomer retires the prompts still filling the cache
    // after their timeout (Request::finish_prompt): what they committed
    // stays cached, and the newcomer — typically the same document's
    // next keystroke — runs on from there instead of both prefilling it.
    if (l->priority() >= Priority::kCompletion)
      for (Lives* ls : {&running, &waiting})
        for (auto& d : *ls)
          if (d->detached) d->job->state->cancel = true;
    waiting.push_back(std::move(l));
  }
}

void Scheduler::sort_after_step(Lives& running, Lives& waiting) {
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->phase == Phase::Ended) {
      it = running.erase(it);
    } else if ((*it)->phase == Phase::Waiting) {
      waiting.push_back(std::move(*it));
      it = running.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::sweep(Lives& lives) {
  std::erase_if(lives, [&](const std::unique_ptr<Live>& p) {
    Live& l = *p;
    const int64_t max_prompt_ms = l.job->req.t_max_prompt_ms;
    const bool timed_out =
        !l.detached && l.phase == Phase::Prefill && max_prompt_ms > 0 && ms_since(l.t0) > double(max_prompt_ms);
    if (timed_out && l.job->req.finish_prompt && !l.cancelled()) {
      // Answer now; keep prefilling behind interactive work.
      l.res.reason = FinishReason::Timeout;
      l.job->result = l.res;
      finished_.push_back(l.job);
      l.detached = true;
      l.detached_priority = Priority::kBackground;
      return false;
    }
    if (!timed_out && !l.cancelled() && l.phase != Phase::Ended) return false;
    if (l.phase == Phase::Decode) l.res.timings.generate_ms = ms_since(l.t1);
    end(l, timed_out ? FinishReason::Timeout : FinishReason::Cancelled);
    return true;
  });
}

// By priority, while the step has room and the pool has blocks for the
// newcomer's first chunk (always when nothing else runs, so a request too
// large for the pool fails instead of waiting forever).
void Scheduler::admit_waiting(Lives& running, Lives& waiting) {
  std::stable_sort(waiting.begin(), waiting.end(), before);
  std::stable_sort(running.begin(), running.end(), before);
  for (auto it = waiting.begin(); it != waiting.end();) {
    Live& l = **it;
    if (int(running.size()) >= opt_.max_batch) {
      // A full step: a waiting request outranking the lowest running one takes its place.
      Live& last = *running.back();
      if (last.priority() >= l.priority()) return;
      preempt(last);
      std::unique_ptr<Live> out = std::move(running.back());
      running.pop_back();
      it = waiting.insert(it + 1, std::move(out)) - 1;
    }
    switch (admit(l, running)) {
      case Admission::Admitted:
        running.push_back(std::move(*it));
        it = waiting.erase(it);
        std::stable_sort(running.begin(), running.end(), before);
        break;
      case Admission::Failed: it = waiting.erase(it); break;
      case Admission::NoBlocks: return;
    }
  }
}

// Why a prompt is refused and what to do: a larger context where the model
// was trained for one, else a model with a longer context (an agent's
// prompt alone is 8-30k tokens; the embedded default model holds 512).
std::string Scheduler::context_advice(size_t prompt_tokens, int room) const {
  const int trained = model_->config().n_ctx_train;
  const std::string what =
      fmt::format("prompt of {} tokens does not fit the context of {} (with room for {} new tokens)", prompt_tokens,
                  opt_.n_ctx, room);
  if (trained > opt_.n_ctx)
    return what + fmt::format(
                      ": start the server with a larger context (--context-size, setting contextSize; this "
                      "model was trained for {} tokens)",
                      trained);
  return what + fmt::format(
                    ": this model was trained for {} tokens; use a model with a longer context (-m FILE.gguf, "
                    "setting model; README: Choose a model)",
                    trained > 0 ? trained : opt_.n_ctx);
}

// Tokenizes the prompt and fits it to the context; throws what makes it unservable.
void Scheduler::prepare(Live& l) {
  const Request& req = l.job->req;
  const Model& m = *model_;
  std::vector<TokenId> prompt = req.prompt_tokens;
  if (prompt.empty()) prompt = m.tokenizer().encode(req.prompt, {.add_special = true, .parse_special = true});
  if (prompt.empty()) throw RequestError(ErrorKind::Request, "empty prompt: nothing to continue from");
  // Fit: leave room to generate min(max_tokens, n_ctx / 4) tokens.
  const int room = std::max(1, std::min(std::max(req.max_tokens, 1), opt_.n_ctx / 4));
  const int limit = opt_.n_ctx - room;
  if (int(prompt.size()) > limit) {
    if (req.fit == Request::Fit::Error)
      throw RequestError(ErrorKind::ContextLength, context_advice(prompt.size(), room));
    const int keep = std::clamp(req.keep_start, 0, limit / 2);
    const int cut = int(prompt.size()) - limit;
    prompt.erase(prompt.begin() + keep, prompt.begin() + keep + cut);
    l.res.timings.n_prompt_cut = cut;
  }
  l.res.timings.n_prompt = int(prompt.size());
  l.todo = prompt;
  l.history = std::move(prompt);
  l.sampler = std::make_unique<Sampler>(req.sampling, m.config().n_vocab);
  if (req.constraint.active()) {
    if (!vocab_trie_) vocab_trie_ = make_vocab_trie(m.tokenizer());
    if (req.constraint.triggers.empty()) {
      l.grammar = std::make_unique<GrammarMatcher>(req.constraint.grammar);
      if (!l.grammar->accept(req.constraint.prefix))
        throw RequestError(ErrorKind::Request, "the output's grammar rejects the text the answer starts with");
    }
  }
  l.dec = std::make_unique<StreamingDecoder>(m.tokenizer());
  l.phase = Phase::Waiting;
}

Admission Scheduler::admit(Live& l, const Lives& running) {
  if (l.phase == Phase::New) {
    try {
      prepare(l);
    } catch (const RequestError& e) {
      l.res.error = e.what();
      l.res.error_kind = e.kind;
      end(l, FinishReason::Error);
      return Admission::Failed;
    } catch (const std::exception& e) {
      l.res.error = e.what();
      end(l, FinishReason::Error);
      return Admission::Failed;
    }
  }
  // Short of blocks, a request still comes in when it outranks someone
  // running: the step then takes that one's blocks (preemption).
  const int64_t bs = pool_->layout().block_size;
  const int64_t first = std::min<int64_t>(int64_t(l.todo.size()), opt_.prefill_chunk);
  if (!running.empty() && pool_->available() < (first + bs - 1) / bs + int64_t(running.size()) &&
      l.priority() <= running.back()->priority())
    return Admission::NoBlocks;
  start(l);
  return Admission::Admitted;
}

void Scheduler::start(Live& l) {
  if (l.t0 == Clock::time_point{}) {
    l.t0 = Clock::now();
    l.res.timings.queue_ms = std::chrono::duration<double, std::milli>(l.t0 - l.job->t_submit).count();
    ++metrics_.requests;
    metrics_.queue_ms_total += l.res.timings.queue_ms;
    metrics_.queue_ms_max = std::max(metrics_.queue_ms_max, l.res.timings.queue_ms);
  }
  l.seq = std::make_unique<KvSequence>(*pool_);
  // At least the last token runs again, for its logits. What the pool lacks
  // of the prompt may be on disk: read into the pool first, mapped as cached.
  PromptCache::Holds holds(*pool_);
  const int restored = prompt_cache_ ? prompt_cache_->restore(*pool_, l.todo, int(l.todo.size()) - 1, holds) : 0;
  const int mapped = l.seq->map_prefix(l.todo, int(l.todo.size()) - 1);
  l.todo_pos = size_t(mapped);
  if (l.res.timings.n_preempted == 0) {
    l.res.timings.n_prompt_cached = mapped;
    l.res.timings.n_prompt_restored = std::min(restored, mapped);
  }
  l.phase = Phase::Prefill;
}

void Scheduler::preempt(Live& l) {
  // What the sequence still has to run, after what its cache held: on
  // resumption all of it runs again (the prefix cache usually still holds
  // the full blocks), and the last token's logits are the ones it would have
  // produced next, so the output continues unchanged.
  std::vector<TokenId> redo = l.seq->tokens();
  if (l.phase == Phase::Decode) redo.push_back(l.feed);
  else redo.insert(redo.end(), l.todo.begin() + std::ptrdiff_t(l.todo_pos), l.todo.end());
  l.todo = std::move(redo);
  l.todo_pos = 0;
  l.phase = Phase::Waiting;
  l.seq.reset();
  ++l.res.timings.n_preempted;
  ++metrics_.preemptions;
}

}  // namespace moelsp
