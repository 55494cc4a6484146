// Shared between the engine's API (engine.cpp) and its scheduler thread
// (scheduler.cpp, step.cpp, output.cpp): a submitted job, the handle's state,
// a request in flight and the scheduler that owns them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/prompt_cache.h"
#include "engine/sampling.h"

namespace moelsp {

using Clock = std::chrono::steady_clock;

struct Handle::State {
  std::atomic<bool> cancel{false};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result result;
};

// A submission as the caller made it; shared with the handle's state.
struct Job {
  Request req;
  Callbacks cb;
  std::shared_ptr<Handle::State> state;
  uint64_t seq = 0;
  Clock::time_point t_submit;
  Result result;  // set when it ends, delivered by Scheduler::deliver()
};

// Where a request is. A KV sequence exists exactly in Prefill and Decode.
//   New ──admit──▶ Waiting ──start──▶ Prefill ──prompt done──▶ Decode
//                     ▲                  │                       │
//                     └────preempt───────┴───────────────────────┘
// Any phase ──end──▶ Ended (the result queued for delivery).
enum class Phase {
  New,      // submitted, not yet tokenized
  Waiting,  // tokenized and fitted; no KV sequence: not started yet, or preempted
  Prefill,  // runs `todo`: its prompt, or what a preemption made it recompute
  Decode,   // the prompt is done; `feed`, the last sampled token, runs next
  Ended,
};

// A request being served (Prefill, Decode) or waiting to be (New, Waiting).
struct Live {
  std::shared_ptr<Job> job;
  Phase phase = Phase::New;
  std::unique_ptr<KvSequence> seq;  // set in Prefill and Decode only
  std::vector<TokenId> todo;        // Prefill: tokens to run before the next sample
  size_t todo_pos = 0;
  TokenId feed = kNoToken;    // Decode: the sampled token whose KV comes next
  std::vector<TokenId> spec;  // Decode with a draft: feed, then the draft tokens run in this step
  Result res;
  std::vector<TokenId> history;  // prompt + generated, for the sampler's penalties
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDecoder> dec;
  std::string pending;        // decoded text not yet emitted (may start a stop string)
  std::vector<float> healed;  // the first token's logits masked for Request::heal
  std::string heal_left;      // what of Request::heal the output has yet to pass (it is not returned)
  // Request::constraint: the matcher, once the constraint is on (from the
  // start, or from a trigger); the output's bytes while a lazy one waits
  // for its trigger; the logits with the rejected tokens masked out.
  std::unique_ptr<GrammarMatcher> grammar;
  std::string lazy_bytes;
  std::vector<float> masked;
  Clock::time_point t0, t1;  // first scheduled, prompt done
  // Its result was delivered (a prompt timeout with Request::finish_prompt);
  // it only fills the prefix cache now, at background priority, and ends
  // silently when the prompt is done.
  bool detached = false;
  int detached_priority = 0;

  int priority() const { return detached ? detached_priority : job->req.priority; }
  bool cancelled() const { return job->state->cancel.load(); }
  bool running() const { return phase == Phase::Prefill || phase == Phase::Decode; }
  // The tokens this request would run in a step with `budget` prompt tokens
  // left: its feed token when decoding (not counted against the budget), else
  // the next chunk of `todo`.
  std::span<const TokenId> next_tokens(int64_t budget) const;
};

using Lives = std::vector<std::unique_ptr<Live>>;

// What the admission of a waiting request came to.
enum class Admission {
  Admitted,  // it runs from the next step
  Failed,    // it cannot run at all (empty or oversized prompt): ended with an error
  NoBlocks,  // the pool is short and it outranks no one running: it (and all after it) wait
};

// One forward pass being assembled: which sequences, how many tokens each.
struct Step {
  Batch batch;
  std::vector<Live*> lives;   // batch.seqs[k] belongs to lives[k]
  std::vector<int> n_tokens;  // the tokens lives[k] runs
  std::vector<int> n_rows;    // its logits rows: 1, or n_tokens for a draft being verified
};

// What adding a running request to the step came to.
enum class StepAdd {
  Added,
  NothingToRun,  // its prompt chunk got no budget this step
  Paused,        // ranks below an interactive request in the step (and so do all after it)
  NoBlocks,      // no blocks, even after preempting everyone ranked below it
};

// The scheduler thread and everything it owns. The Engine is its API.
class Scheduler {
 public:
  Scheduler(std::shared_ptr<Model> model, EngineOptions opt);
  ~Scheduler();

  Handle submit(Request req, Callbacks cb);
  EngineMetrics metrics() const;
  void inspect_pool(const std::function<void(const BlockPool&)>& fn);
  const Model& model() const { return *model_; }
  const EngineOptions& options() const { return opt_; }

 private:
  void loop();
  // The loop's steps: the queue's newcomers join `waiting` (under mu_); a
  // step's preempted sequences wait again and ended ones leave `running`.
  void take_queued(Lives& running, Lives& waiting);
  static void sort_after_step(Lives& running, Lives& waiting);
  void sweep(Lives& lives);  // ends the cancelled and timed-out
  void admit_waiting(Lives& running, Lives& waiting);
  Admission admit(Live& l, const Lives& running);  // prepares (once), checks blocks, starts it
  void prepare(Live& l);                           // New → Waiting: tokenized and fitted; throws when it cannot be
  std::string context_advice(size_t prompt_tokens, int room) const;  // a prompt too long: why and what to do
  void start(Live& l);    // Waiting → Prefill: a KV sequence with the cached prefix
  void preempt(Live& l);  // Prefill/Decode → Waiting, releasing its blocks
  Step build_step(Lives& running);
  StepAdd add_to_step(Step& step, int64_t& budget, int floor, Lives& running, size_t i);
  void run_step(Step& step, Lives& running);
  void advance(Live& l, int n_ran, const float* logits);  // after a forward pass: prompt progress or a sample
  // Decode with a draft: samples row by row while the model agrees with the
  // draft, then drops the KV rows of the tokens it did not confirm.
  void verify_draft(Live& l, const float* logits);
  int draft_room(const Live& l) const;              // draft tokens this request may run now
  bool after_logits(Live& l, const float* logits);  // samples and emits one token; false when it ended
  const float* heal_mask(Live& l, const float* logits);
  // The sampled token's text into the answer, less what a stop string or
  // token healing takes: returns true when a stop string ended it.
  bool emit_text(Live& l, TokenId tok);
  // The sampled token, or (when the request's grammar rejects it) a token
  // resampled from the logits masked to what the grammar allows; kNoToken
  // with the request ended when nothing is allowed.
  TokenId constrain(Live& l, const float* logits, TokenId tok);
  void constraint_saw(Live& l, TokenId tok);  // the grammar advances over it (or a lazy one looks for its trigger)
  TokenLogprob logprob_of(const float* logits, TokenId tok, int top_n) const;
  // Releases the blocks and queues the result (once): the loop delivers it
  // after publishing the step's metrics, so whoever waits on the handle
  // then sees metrics that include this request's release.
  void end(Live& l, FinishReason r);
  void publish_metrics(int running, int waiting);  // then delivers the finished requests' results
  void deliver();

  std::shared_ptr<Model> model_;
  EngineOptions opt_;
  std::unique_ptr<BlockPool> pool_;
  std::shared_ptr<const VocabTrie> vocab_trie_;  // built at the first constrained request
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;      // submitted, not yet seen by the loop
  std::vector<std::function<void()>> tasks_;    // inspect_pool calls
  std::vector<std::shared_ptr<Job>> finished_;  // results to deliver after this step's metrics
  bool stop_ = false;
  uint64_t seq_ = 0;
  EngineMetrics metrics_, published_;  // the scheduler's own, and the snapshot under mu_
  // After everything its writer hands blocks back through (pool_, mu_, tasks_).
  std::unique_ptr<PromptCache> prompt_cache_;
  std::thread thread_;  // last: starts after everything above exists
};

// The tokenizer's pieces (special tokens by their text) for GrammarMatcher.
std::shared_ptr<const VocabTrie> make_vocab_trie(const Tokenizer& t);

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace moelsp
