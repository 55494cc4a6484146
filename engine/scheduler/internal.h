// Shared between the engine's API (engine.cpp) and its scheduler thread
// (scheduler.cpp): a submitted job, the handle's state, a request in flight.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace moelsp {

using Clock = std::chrono::steady_clock;

struct Handle::State {
  std::atomic<bool> cancel{false};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result result;
};

struct Engine::Job {
  Request req;
  Callbacks cb;
  std::shared_ptr<Handle::State> state;
  uint64_t seq = 0;
  Clock::time_point t_submit;
  Result result;  // set when it ends, delivered by deliver()
};

// A request being served (running) or waiting to be (new, or preempted).
struct Engine::Live {
  std::shared_ptr<Job> job;
  std::unique_ptr<KvSequence> seq;  // null while waiting
  bool admitted = false;            // tokenized and fitted
  bool decoding = false;            // the prompt is done; `feed` runs next
  bool ended = false;               // on_done was called
  bool timed_out = false;
  std::vector<TokenId> todo;  // tokens to run before the next sample (the prompt, or a recomputation)
  size_t todo_pos = 0;
  TokenId feed = kNoToken;  // decode: the sampled token whose KV comes next
  Result res;
  std::vector<TokenId> history;  // prompt + generated, for the sampler's penalties
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDecoder> dec;
  std::string pending;       // decoded text not yet emitted (may start a stop string)
  Clock::time_point t0, t1;  // first scheduled, prompt done

  std::vector<std::shared_ptr<Job>>* finished = nullptr;  // the engine's list of results to deliver

  int priority() const { return job->req.priority; }
  bool wants_out() const { return job->state->cancel.load() || timed_out; }
  // Releases the blocks and queues the result (once): the scheduler delivers
  // it after publishing the step's metrics, so whoever waits on the handle
  // then sees metrics that include this request's release.
  void end(FinishReason r);
};

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace moelsp
