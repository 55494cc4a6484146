// The engine API: submit a request, receive tokens through a
// callback as they are generated, cancel at any time.
//
// One scheduler thread runs continuous batching over a paged KV cache
// (engine/kv.h): requests join and leave between steps; each step is one
// forward pass carrying the next token of every generating sequence plus
// chunks of prompts (at most `prefill_chunk` prompt tokens per step, so a long
// prompt never stalls the others' decoding; 4× that for a request alone). Higher priority goes first for
// admission, prompt budget and blocks: when the pool runs out, the
// lowest-priority sequence is preempted (its blocks released, its tokens
// recomputed when it resumes — often from the prefix cache). A new request
// maps the longest cached prefix of its prompt, so an editor that re-sends
// nearly the same prompt pays only for the tokens from the first changed one.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv.h"
#include "engine/request.h"

namespace moelsp {

class Model;

class Handle {
 public:
  void cancel();  // returns at once; the request ends with FinishReason::Cancelled
  Result wait();  // blocks until done
  bool done() const;

  struct State;
  explicit Handle(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

struct EngineOptions {
  int n_ctx = 4096;       // tokens per sequence (at most the model's training context)
  int64_t kv_tokens = 0;  // KV pool capacity in tokens, all sequences together; 0: 4 × n_ctx
  int block_size = 16;    // tokens per KV block
  KvType kv_type = KvType::F16;
  bool prefix_cache = true;  // reuse cached blocks of earlier prompts
  int max_batch = 8;         // sequences advanced together in one step
  int prefill_chunk = 256;   // prompt tokens per step, all prompts together (4× for a request alone)
  // A step that carries an interactive request (priority ≥ Priority::kCompletion)
  // carries nothing of lower priority: on a CPU whose decode kernels already
  // use most of the compute, a chat token riding along nearly doubles each of
  // the completion's steps. Lower-priority requests pause (keeping their blocks).
  bool interactive_alone = true;
  // Long prompts' KV blocks on disk, found again by later processes
  // (engine/prompt_cache.h); needs the prefix cache. Empty dir: none.
  PromptCacheOptions prompt_cache = {};
};

struct EngineMetrics {
  KvPoolStats kv;                                     // blocks in use / cached / free, evictions, prefix lookups
  double prefix_hit_rate = 0;                         // prompt tokens found in the cache / prompt tokens looked up
  int64_t steps = 0, step_seqs = 0, step_tokens = 0;  // forward passes and what they carried
  int last_batch = 0, max_batch = 0;                  // sequences in the last / largest step
  double mean_batch() const { return steps ? double(step_seqs) / double(steps) : 0; }
  int64_t requests = 0, preemptions = 0;
  double queue_ms_total = 0, queue_ms_max = 0;
  double mean_queue_ms() const { return requests ? queue_ms_total / double(requests) : 0; }
  int running = 0, waiting = 0;
  // Prompt lookup decoding (Request::draft_max): steps that carried a draft,
  // draft tokens run, and those the model confirmed.
  int64_t draft_steps = 0, draft_tokens = 0, draft_accepted = 0;
  bool prompt_cache_on = false;
  PromptCacheStats prompt_cache;
};

// Prompt lookup (Request::draft_max): up to n_max tokens that followed the
// most recent earlier occurrence of the history's last k tokens (k from 4
// down to 2); empty when none occurs.
std::vector<TokenId> lookup_draft(std::span<const TokenId> history, int n_max);

class Scheduler;  // scheduler/internal.h: the thread, its queue and the KV pool

class Engine {
 public:
  Engine(std::shared_ptr<Model> model, EngineOptions opt = {});
  ~Engine();  // cancels what is queued or running and joins the scheduler
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Handle submit(Request req, Callbacks cb = {});
  const Model& model() const;
  int n_ctx() const { return options().n_ctx; }
  const EngineOptions& options() const;
  EngineMetrics metrics() const;  // a consistent snapshot, from any thread
  // Runs `fn` on the KV pool from the scheduler thread between steps and
  // waits for it (tests check the pool's invariants this way).
  void inspect_pool(const std::function<void(const BlockPool&)>& fn);

 private:
  std::unique_ptr<Scheduler> sched_;
};

}  // namespace moelsp
