// A `moelsp pull` on a thread of its own: the `model` setting may name a
// reference (hf://owner/repo:QUANT) that is not in the cache yet. The editor's
// server then serves the embedded model while the pull runs (completions do
// not wait for it), shows its progress, and loads the pulled file when it is
// done (lsp/server.cpp). One pull at a time: asking for another reference
// cancels the one running (its .part stays, and a later pull resumes it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "assist/hub.h"

namespace moelsp::assist {

class Ticket;

class BackgroundPull {
 public:
  enum class Phase { Idle, Pulling, Done, Failed };
  struct State {
    std::string ref;
    Phase phase = Phase::Idle;
    uint64_t done = 0, total = 0;         // bytes of the file being fetched
    std::string file = {};                // the repository path being fetched
    std::string message = {};             // the error, or where the file went
    std::vector<std::string> paths = {};  // Done: the files (a split model's parts)
  };
  // Called on the pull's thread: at each phase change, and while bytes
  // arrive at most every 250 ms.
  using Hook = std::function<void(const State&)>;

  explicit BackgroundPull(Hook on_change);
  ~BackgroundPull();  // cancels a pull running and waits for it
  BackgroundPull(const BackgroundPull&) = delete;
  BackgroundPull& operator=(const BackgroundPull&) = delete;

  // Pulls `ref` into opt.dir; nothing when that reference is already being
  // pulled (and not cancelled), or after stop(). May be called from the
  // hook (it does not wait for its own thread).
  void start(const std::string& ref, PullOptions opt);
  void cancel();
  // Cancels and waits for every pull's thread (the hook is not called after).
  void stop();
  State state() const;

 private:
  void run(const std::string& ref, PullOptions opt, std::shared_ptr<Ticket> ticket);
  void publish(const State& s, bool force, const std::shared_ptr<Ticket>& ticket);

  Hook hook_;
  std::mutex hook_mu_;  // one hook at a time, and only the current pull's
  mutable std::mutex mu_;
  bool stopped_ = false;
  State state_;
  std::shared_ptr<Ticket> ticket_;
  std::vector<std::thread> threads_;  // the current pull's last; earlier ones end once cancelled
  int64_t last_publish_ms_ = 0;
};

const char* to_string(BackgroundPull::Phase p);

}  // namespace moelsp::assist
