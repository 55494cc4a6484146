// The engine API (DESIGN.md §4): submit a request, receive tokens through a
// callback as they are generated, cancel at any time.
//
// One scheduler thread advances the live requests one step at a time (a
// prompt, or one generated token), always the highest-priority one first, so a
// completion request overtakes a long chat answer between two of its tokens.
// Each live request owns a sequence (a KV cache and its tokens) from a small
// pool; a new request takes the idle sequence sharing its longest token
// prefix, so an editor that re-sends nearly the same prompt pays only for the
// new tokens. Batching the steps of several requests into one forward pass is
// the paged-KV issue's work and slots in behind this same interface.
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
  std::string prompt;                // tokenized with BOS (if the model wants it) and special tokens parsed
  std::vector<TokenId> prompt_tokens;  // used instead of `prompt` when not empty
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;     // generation ends before any of these strings
  bool ignore_eos = false;
  int64_t t_max_prompt_ms = 0;       // 0: no limit; a prompt that takes longer is abandoned
  int64_t t_max_predict_ms = 0;      // 0: no limit; generation stops (keeping its text) after this
  int priority = 0;                  // higher runs first
};

enum class FinishReason { Length, Stop, Eos, Cancelled, Timeout, Error };
const char* to_string(FinishReason r);

struct Timings {
  int n_prompt = 0;        // prompt tokens in the request
  int n_prompt_cached = 0; // of which reused from the KV cache
  int n_generated = 0;
  double prompt_ms = 0, generate_ms = 0;
  double prompt_tps() const { return prompt_ms > 0 ? (n_prompt - n_prompt_cached) / (prompt_ms / 1000) : 0; }
  double generate_tps() const { return generate_ms > 0 ? n_generated / (generate_ms / 1000) : 0; }
};

struct Result {
  std::string text;
  std::vector<TokenId> tokens;
  FinishReason reason = FinishReason::Length;
  std::string error;
  Timings timings;
};

struct Callbacks {
  // Text that is final (never a partial UTF-8 character, never part of a stop
  // string), with the token that completed it. Called on the scheduler thread.
  std::function<void(TokenId id, const std::string& text)> on_token = nullptr;
  std::function<void(const Result&)> on_done = nullptr;
};

class Handle {
 public:
  void cancel();          // returns at once; the request ends with FinishReason::Cancelled
  Result wait();          // blocks until done
  bool done() const;

  struct State;
  explicit Handle(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

struct EngineOptions {
  int n_ctx = 4096;     // tokens per sequence
  int max_sequences = 4;  // live + idle (prefix-cache) sequences; each holds a KV cache of n_ctx
  int prefill_chunk = 256;  // prompt tokens per scheduler step
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

 private:
  struct Job;
  struct Live;
  struct Sequence;
  void loop();
  bool start(Live& live);  // tokenizes and binds a sequence; false when the job already ended
  bool step(Live& live);   // runs the prompt or one token; false when the job ended
  Sequence* acquire(const std::vector<TokenId>& prompt);

  std::shared_ptr<Model> model_;
  EngineOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  uint64_t seq_ = 0;
  uint64_t clock_ = 0;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  std::thread thread_;
};

}  // namespace moelsp
