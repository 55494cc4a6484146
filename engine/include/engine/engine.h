// The engine API: submit a request, receive tokens through a
// callback as they are generated, cancel at any time.
//
// One scheduler thread runs continuous batching over a paged KV cache
// (engine/kv.h): requests join and leave between steps; each step is one
// forward pass carrying the next token of every generating sequence plus
// chunks of prompts (at most `prefill_chunk` prompt tokens per step, so a long
// prompt never stalls the others' decoding). Higher priority goes first for
// admission, prompt budget and blocks: when the pool runs out, the
// lowest-priority sequence is preempted (its blocks released, its tokens
// recomputed when it resumes — often from the prefix cache). A new request
// maps the longest cached prefix of its prompt, so an editor that re-sends
// nearly the same prompt pays only for the tokens from the first changed one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model.h"
#include "engine/sampling.h"

namespace moelsp {

struct Request {
  std::string prompt;                  // tokenized with BOS (if the model wants it) and special tokens parsed
  std::vector<TokenId> prompt_tokens;  // used instead of `prompt` when not empty
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // generation ends before any of these strings
  bool ignore_eos = false;
  int64_t t_max_prompt_ms = 0;   // 0: no limit; a prompt that takes longer is abandoned
  int64_t t_max_predict_ms = 0;  // 0: no limit; generation stops (keeping its text) after this
  int priority = 0;              // higher runs first (see Priority)
  // A prompt longer than the context: Fit::Error refuses it; Fit::KeepEnd
  // keeps the first `keep_start` tokens (a system prompt) and the most recent
  // ones, dropping from the start of what follows. Either way room is left for
  // min(max_tokens, n_ctx / 4) generated tokens.
  enum class Fit { Error, KeepEnd } fit = Fit::Error;
  int keep_start = 0;
  // −1: none; N ≥ 0: each generated token's log-probability and its N most
  // likely alternatives (at most kMaxTopLogprobs), in Result::logprobs and
  // Callbacks::on_logprob.
  int logprobs = -1;
};

// A generated token's log-probability under the model: the log-softmax of the
// raw logits (before temperature and the other samplers, as vLLM reports
// them by default), with the most likely tokens at that step.
struct TokenLogprob {
  struct Alt {
    TokenId id;
    std::string text;  // the token's bytes as text (may be part of a UTF-8 character)
    float logprob;
  };
  TokenId id;
  std::string text;
  float logprob;
  std::vector<Alt> top;
};
constexpr int kMaxTopLogprobs = 20;

// Request::priority values used by the servers.
struct Priority {
  static constexpr int kCompletion = 10;  // inline completion: someone is waiting at the cursor
  static constexpr int kChat = 0;
  static constexpr int kBackground = -10;  // indexing, prefetching, batch jobs
};

enum class FinishReason { Length, Stop, Eos, Cancelled, Timeout, Error };
const char* to_string(FinishReason r);

struct Timings {
  int n_prompt = 0;         // prompt tokens in the request (after fitting to the context)
  int n_prompt_cached = 0;  // of which reused from the prefix cache
  int n_prompt_cut = 0;     // tokens dropped to fit the context (Request::Fit::KeepEnd)
  int n_generated = 0;
  int n_preempted = 0;  // times its blocks were taken for a higher-priority request
  double queue_ms = 0;  // submission to first scheduled step
  double prompt_ms = 0, generate_ms = 0;
  double prompt_tps() const { return prompt_ms > 0 ? (n_prompt - n_prompt_cached) / (prompt_ms / 1000) : 0; }
  double generate_tps() const { return generate_ms > 0 ? n_generated / (generate_ms / 1000) : 0; }
};

struct Result {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenLogprob> logprobs;  // Request::logprobs ≥ 0
  FinishReason reason = FinishReason::Length;
  std::string error;
  Timings timings;
};

struct Callbacks {
  // Text that is final (never a partial UTF-8 character, never part of a stop
  // string), with the token that completed it. Called on the scheduler thread.
  std::function<void(TokenId id, const std::string& text)> on_token = nullptr;
  std::function<void(const Result&)> on_done = nullptr;
  // Asked with all the text emitted so far, after each piece of it; true ends
  // generation at once (FinishReason::Stop, the text kept). The completion
  // pipeline stops a repetition loop here instead of decoding it to the
  // token limit. Called on the scheduler thread: keep it cheap.
  std::function<bool(const std::string& text)> should_stop = nullptr;
  // With Request::logprobs ≥ 0: each token's, right after it is sampled
  // (before on_token gives the text it completes). Scheduler thread.
  std::function<void(const TokenLogprob&)> on_logprob = nullptr;
};

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
  int prefill_chunk = 256;   // prompt tokens per step, all prompts together
  // A step that carries an interactive request (priority ≥ Priority::kCompletion)
  // carries nothing of lower priority: on a CPU whose decode kernels already
  // use most of the compute, a chat token riding along nearly doubles each of
  // the completion's steps. Lower-priority requests pause (keeping their blocks).
  bool interactive_alone = true;
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
};

class Engine {
 public:
  Engine(std::shared_ptr<Model> model, EngineOptions opt = {});
  ~Engine();  // cancels what is queued or running and joins the scheduler
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Handle submit(Request req, Callbacks cb = {});
  const Model& model() const { return *model_; }
  int n_ctx() const { return opt_.n_ctx; }
  const EngineOptions& options() const { return opt_; }
  EngineMetrics metrics() const;  // a consistent snapshot, from any thread
  // Runs `fn` on the KV pool from the scheduler thread between steps and
  // waits for it (tests check the pool's invariants this way).
  void inspect_pool(const std::function<void(const BlockPool&)>& fn);

 public:  // (declared here, defined in scheduler/internal.h)
  struct Job;
  struct Live;

 private:
  void loop();
  bool admit(Live& l);  // tokenizes, fits, maps the cached prefix; false when the job ended
  void schedule_step(std::vector<std::unique_ptr<Live>>& running, std::vector<std::unique_ptr<Live>>& waiting);
  bool after_logits(Live& l, const float* logits);  // samples and emits one token; false when the job ended
  TokenLogprob logprob_of(const float* logits, TokenId tok, int top_n) const;
  void preempt(Live& l);
  void publish_metrics(int running, int waiting);  // then delivers the finished requests' results
  void deliver();

  std::shared_ptr<Model> model_;
  EngineOptions opt_;
  std::unique_ptr<BlockPool> pool_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::function<void()>> tasks_;    // inspect_pool calls
  std::vector<std::shared_ptr<Job>> finished_;  // results to deliver after this step's metrics
  bool stop_ = false;
  uint64_t seq_ = 0;
  EngineMetrics metrics_, published_;  // the scheduler's own, and the snapshot under mu_
  std::thread thread_;
};

}  // namespace moelsp
