#include "assist/background_pull.h"

#include <chrono>

#include "assist/backend.h"

namespace moelsp::assist {

namespace {
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* to_string(BackgroundPull::Phase p) {
  switch (p) {
    case BackgroundPull::Phase::Idle: return "idle";
    case BackgroundPull::Phase::Pulling: return "pulling";
    case BackgroundPull::Phase::Done: return "done";
    case BackgroundPull::Phase::Failed: return "failed";
  }
  return "?";
}

BackgroundPull::BackgroundPull(Hook on_change) : hook_(std::move(on_change)) {}

BackgroundPull::~BackgroundPull() { stop(); }

void BackgroundPull::stop() {
  for (;;) {  // a hook running now may start one more pull before it sees stopped_
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      if (ticket_) ticket_->cancel();
      ticket_ = nullptr;  // no hook from here on (publish checks it)
      threads.swap(threads_);
    }
    if (threads.empty()) return;
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
}

void BackgroundPull::start(const std::string& ref, PullOptions opt) {
  auto ticket = std::make_shared<Ticket>();
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    if (state_.phase == Phase::Pulling && state_.ref == ref && ticket_ && !ticket_->cancelled()) return;
    if (ticket_) ticket_->cancel();
    ticket_ = ticket;
    state_ = State{.ref = ref, .phase = Phase::Pulling};
    // Threads of pulls that ended (or were cancelled and are ending) are
    // joined by the destructor: start() may run on one of them (the hook).
    threads_.emplace_back([this, ref, opt = std::move(opt), ticket]() mutable { run(ref, std::move(opt), ticket); });
  }
}

void BackgroundPull::cancel() {
  std::lock_guard lock(mu_);
  if (ticket_) ticket_->cancel();
}

BackgroundPull::State BackgroundPull::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

void BackgroundPull::publish(const State& s, bool force, const std::shared_ptr<Ticket>& ticket) {
  {
    std::lock_guard lock(mu_);
    if (ticket_ != ticket) return;  // a newer pull replaced this one
    state_ = s;
    const int64_t t = now_ms();
    if (!force && t - last_publish_ms_ < 250) return;
    last_publish_ms_ = t;
  }
  // Hooks one at a time, and a pull replaced meanwhile says nothing more:
  // an old pull's last words never follow (or interleave with) a new one's.
  std::lock_guard hook_lock(hook_mu_);
  {
    std::lock_guard lock(mu_);
    if (ticket_ != ticket) return;
  }
  if (hook_) hook_(s);
}

void BackgroundPull::run(const std::string& ref, PullOptions opt, std::shared_ptr<Ticket> ticket) {
  State s{.ref = ref, .phase = Phase::Pulling};
  publish(s, true, ticket);
  opt.on_progress = [&](const PullProgress& p) {
    s.done = p.done;
    s.total = p.total;
    s.file = p.file;
    publish(s, false, ticket);
  };
  try {
    const PullResult r = pull(parse_model_ref(ref), opt, *ticket);
    s.phase = Phase::Done;
    s.paths = r.paths;
    s.message = r.paths.empty() ? "" : r.paths.front();
  } catch (const std::exception& e) {
    s.phase = Phase::Failed;
    s.message = ticket->cancelled() ? "cancelled" : e.what();
  }
  publish(s, true, ticket);
}

}  // namespace moelsp::assist
