// Building and running one step: a single forward pass over the next token
// of every decoding sequence and prompt chunks, in priority order.
//
// Blocks come from the pool, else from preempting the lowest-priority
// sequences not yet in this step. The prompt budget (`prefill_chunk` tokens
// per step, all prompts together) bounds how much longer prompt chunks make
// a step that also carries decodes.
#include <climits>

#include <fmt/format.h>

#include "internal.h"

namespace moelsp {

std::span<const TokenId> Live::next_tokens(int64_t budget) const {
  if (phase == Phase::Decode) return spec.empty() ? std::span<const TokenId>(&feed, 1) : std::span<const TokenId>(spec);
  const int64_t n = std::min<int64_t>(int64_t(todo.size() - todo_pos), budget);
  if (n <= 0) return {};
  return std::span<const TokenId>(todo).subspan(todo_pos, size_t(n));
}

Step Scheduler::build_step(Lives& running) {
  // running is in priority order (admit_waiting sorted it).
  Step step;
  // A request alone gets 4× the prompt budget: no one's decode waits behind
  // its step (a newcomer's cancel or admission still comes between layers
  // or steps), and MLA's plain form re-expands every cached latent once per
  // step, so bigger steps expand far fewer of them (a 1,757-token prompt:
  // ~2,800 positions instead of ~7,000).
  int64_t budget = running.size() == 1 ? 4 * int64_t(opt_.prefill_chunk) : opt_.prefill_chunk;
  const int top = running.front()->priority();
  const int floor = opt_.interactive_alone && top >= Priority::kCompletion ? top : INT_MIN;
  for (size_t i = 0; i < running.size(); ++i) {
    Live& l = *running[i];
    if (l.phase != Phase::Prefill && l.phase != Phase::Decode) continue;  // preempted in this loop
    const StepAdd r = add_to_step(step, budget, floor, running, i);
    if (r == StepAdd::Paused) break;  // the rest rank lower still
    if (r == StepAdd::NoBlocks && step.lives.empty() && i == 0) {
      // The whole pool to itself and it still does not fit.
      const int n = int(l.next_tokens(budget).size());
      l.res.error = fmt::format("the request needs {} KV blocks of {} tokens; the pool has {} in all",
                                l.seq->blocks_needed(n) + int(l.seq->blocks().size()), pool_->layout().block_size,
                                pool_->n_blocks());
      end(l, FinishReason::Error);
    }
  }
  return step;
}

StepAdd Scheduler::add_to_step(Step& step, int64_t& budget, int floor, Lives& running, size_t i) {
  Live& l = *running[i];
  // Paused while an interactive request runs (keeping its blocks).
  if (l.priority() < floor) return StepAdd::Paused;
  if (l.phase == Phase::Decode) {  // a draft to verify, if the text offers one (draft.cpp)
    l.spec.clear();
    if (const int room = draft_room(l); room > 0) {
      const std::vector<TokenId> draft = lookup_draft(l.history, room);
      if (!draft.empty()) {
        l.spec.push_back(l.feed);
        l.spec.insert(l.spec.end(), draft.begin(), draft.end());
        if (!l.seq->reserve(int(l.spec.size()))) l.spec.clear();  // a draft never preempts anyone
      }
    }
  }
  const std::span<const TokenId> toks = l.next_tokens(budget);
  if (toks.empty()) return StepAdd::NothingToRun;
  while (!l.seq->reserve(int(toks.size()))) {
    // The victim: the lowest-ranked sequence after this one still holding blocks.
    Live* victim = nullptr;
    for (size_t j = running.size(); j-- > i + 1;)
      if (running[j]->running()) {
        victim = running[j].get();
        break;
      }
    if (!victim) return StepAdd::NoBlocks;
    preempt(*victim);
  }
  if (l.phase == Phase::Prefill) budget -= int64_t(toks.size());
  const bool verify = !l.spec.empty();
  step.batch.add(*l.seq, toks, verify);
  step.lives.push_back(&l);
  step.n_tokens.push_back(int(toks.size()));
  step.n_rows.push_back(verify ? int(toks.size()) : 1);
  return StepAdd::Added;
}

void Scheduler::run_step(Step& step, Lives& running) {
  const size_t nv = size_t(model_->config().n_vocab);
  std::vector<float> logits(size_t(step.batch.logit_rows()) * nv);
  // A forward pass is abandoned only when every request in it wants out.
  const CancelCheck cancel = [&] {
    for (Live* l : step.lives)
      if (!l->cancelled()) return false;
    return true;
  };
  try {
    model_->forward(step.batch, logits.data(), cancel);
  } catch (const Cancelled&) {
    return;  // the next sweep ends them
  } catch (const std::exception& e) {
    for (Live* l : step.lives) {
      l->res.error = e.what();
      end(*l, FinishReason::Error);
    }
    std::erase_if(running, [](const auto& l) { return l->phase == Phase::Ended; });
    return;
  }
  ++metrics_.steps;
  metrics_.step_seqs += int64_t(step.lives.size());
  metrics_.step_tokens += int64_t(step.batch.tokens.size());
  metrics_.last_batch = int(step.lives.size());
  metrics_.max_batch = std::max(metrics_.max_batch, metrics_.last_batch);
  size_t row = 0;
  for (size_t k = 0; k < step.lives.size(); ++k) {
    advance(*step.lives[k], step.n_tokens[k], logits.data() + row * nv);
    row += size_t(step.n_rows[k]);
  }
  std::erase_if(running, [](const auto& l) { return l->phase == Phase::Ended; });
}

void Scheduler::advance(Live& l, int n_ran, const float* logits) {
  if (l.phase == Phase::Prefill) {
    l.todo_pos += size_t(n_ran);
    if (l.todo_pos < l.todo.size()) return;  // more prompt to run: its logits are not wanted
    if (l.t1 == Clock::time_point{}) {       // the request's own prompt (not a recomputation after preemption)
      l.t1 = Clock::now();
      l.res.timings.prompt_ms = std::chrono::duration<double, std::milli>(l.t1 - l.t0).count();
    }
    if (prompt_cache_ && l.job->req.store_prompt) prompt_cache_->store(*l.seq);
    l.phase = Phase::Decode;
    l.todo.clear();
    l.todo_pos = 0;
    if (l.job->req.max_tokens <= 0 || l.detached) {
      end(l, FinishReason::Length);
      return;
    }
  } else if (!l.spec.empty()) {
    return verify_draft(l, logits);
  }
  after_logits(l, logits);
}

}  // namespace moelsp
