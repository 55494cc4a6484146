// A fixed pool of worker threads for data-parallel loops. The calling thread
// takes part, so ThreadPool(1) runs everything inline. One parallel_for at a
// time (the engine's single scheduler thread drives it).
//
// A decode step issues dozens of small loops; waking sleeping threads costs
// tens of microseconds each, so workers and the caller spin briefly (a few
// microseconds' worth of pause instructions) before falling back to the
// condition variable.
//
// Work is claimed, not assigned: a loop is cut into chunks and every thread,
// the caller included, takes the next unclaimed one until none is left. When
// another process takes a core, one of our threads is descheduled for whole
// time slices (milliseconds); with a fixed split every loop of the step would
// wait for it, while with claiming the running threads take its share and a
// loop waits at most for a chunk it already started. Chunk boundaries depend
// only on n and the chunk count, never on which thread runs a chunk, so the
// results are the same either way.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moelsp {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Splits [0, n) into chunks_per_thread · size() contiguous chunks (at most
  // n) and runs fn(begin, end) on each; returns when all are done. More
  // chunks per thread let the others absorb a descheduled thread's share;
  // loops whose chunks each repeat some setup (a matmul quantizes its
  // inputs per call) keep one per thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int chunks_per_thread = 1);

 private:
  void worker();
  // Claims and runs chunks of generation `gen` until none is left (or a newer loop began).
  void run_chunks(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;  // the caller's copy of the current loop's chunk count
  // generation << 32 | chunks << 16 | the next unclaimed chunk: a claim is
  // valid only for the loop its claimer saw.
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> done_chunks_{0};
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_cores();

}  // namespace moelsp
