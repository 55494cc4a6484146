#include "thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

namespace moelsp {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker(); });
}

namespace {
constexpr int kSpins = 20000;  // pause-loop iterations before sleeping (~0.1 ms)
inline void cpu_relax() { __builtin_ia32_pause(); }
// next_ packs a loop's generation (32 bits), its chunk count (16) and its next
// unclaimed chunk (16), so a claim reads all three in one atomic word.
inline uint32_t gen_of(uint64_t v) { return uint32_t(v >> 32); }
inline int64_t chunks_of(uint64_t v) { return int64_t((v >> 16) & 0xffff); }
inline int64_t next_of(uint64_t v) { return int64_t(v & 0xffff); }
}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t gen) {
  for (;;) {
    uint64_t v = next_.load(std::memory_order_acquire);
    int64_t c, chunks;
    do {
      c = next_of(v), chunks = chunks_of(v);
      if (gen_of(v) != gen || c >= chunks) return;
    } while (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
    // fn_ and n_ belong to `gen`: the caller waits for every claimed chunk before it changes them.
    const int64_t begin = n_ * c / chunks, end = n_ * (c + 1) / chunks;
    if (begin < end) (*fn_)(begin, end);
    if (done_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard lock(mu_);  // pairs with the caller's predicate check
      done_.notify_one();
    }
  }
}

void ThreadPool::worker() {
  uint32_t seen = 0;
  for (;;) {
    bool ready = false;
    for (int i = 0; i < kSpins && !ready; ++i) {
      ready = stop_.load(std::memory_order_acquire) || gen_of(next_.load(std::memory_order_acquire)) != seen;
      if (!ready) cpu_relax();
    }
    if (!ready) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_.load() || gen_of(next_.load()) != seen; });
    }
    if (stop_) return;
    seen = gen_of(next_.load(std::memory_order_acquire));
    run_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int chunks_per_thread) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  uint32_t gen;
  {
    std::lock_guard lock(mu_);  // sleeping workers check the generation under this lock
    fn_ = &fn;
    n_ = n;
    chunks_ = std::min<int64_t>({n, int64_t(n_threads_) * std::max(1, chunks_per_thread), 0xffff});
    done_chunks_.store(0, std::memory_order_relaxed);
    gen = gen_of(next_.load(std::memory_order_relaxed)) + 1;
    next_.store(uint64_t(gen) << 32 | uint64_t(chunks_) << 16, std::memory_order_release);  // opens its chunks
  }
  wake_.notify_all();
  run_chunks(gen);
  for (int i = 0; i < kSpins; ++i) {
    if (done_chunks_.load(std::memory_order_acquire) == chunks_) return;
    cpu_relax();
  }
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return done_chunks_.load(std::memory_order_acquire) == chunks_; });
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
