#include "thread_pool.h"

#include <fstream>
#include <set>
#include <string>

namespace moelsp {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

namespace {
constexpr int kSpins = 20000;  // pause-loop iterations before sleeping (~0.1 ms)
inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int index) {
  const int64_t per = (n_ + n_threads_ - 1) / n_threads_;
  const int64_t begin = std::min(n_, per * index), end = std::min(n_, begin + per);
  if (begin < end) (*fn_)(begin, end);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    bool ready = false;
    for (int i = 0; i < kSpins && !ready; ++i) {
      ready = stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
      if (!ready) cpu_relax();
    }
    if (!ready) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // pairs with the caller's predicate check
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);  // sleeping workers check the generation under this lock
    fn_ = &fn;
    n_ = n;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunk(0);
  for (int i = 0; i < kSpins; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    cpu_relax();
  }
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

int physical_cores() {
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
    if (!pkg || !core) {
      if (cpu > 0) break;
      continue;
    }
    std::string p, c;
    pkg >> p;
    core >> c;
    cores.emplace(p, c);
  }
  if (!cores.empty()) return int(cores.size());
  const unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

}  // namespace moelsp
