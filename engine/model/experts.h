// Routed experts' bytes: where each expert is read from (the mapped file or a
// hot copy), which experts the next layers will want, and getting those bytes
// moving before they are needed.
//
// Prediction: at layer l's FFN input the residual stream already carries most
// of what layer l+d's router will see (each layer adds a small update to it),
// so layer l+d's own router applied to it — after layer l+d's FFN norm —
// picks mostly the same experts. That costs one n_embd × n_expert matmul per
// token and layer (0.7% of a Qwen3-30B-A3B layer's expert work). Where the
// previous token's experts at l+d have predicted better so far (routing that
// changes little between tokens), prefetch uses those instead; both are
// scored on every token.
//
// Prefetch: the predicted experts' byte ranges go to a helper thread that
// madvise(MADV_WILLNEED)s them and touches each page, so the page faults of a
// streamed model are taken there, overlapping the compute of layers l..l+d−1.
//
// Hot cache: the most-routed experts (decayed use counts) held in RAM whatever
// the streaming evicts: by locking their pages of the mapped file (mlock: no
// copy, no second instance of the bytes), or — where the lock limit refuses —
// by copies in anonymous memory. With a memory limit the page cache keeps
// what was used recently; this keeps what is used often.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "../layers/layers.h"

namespace moelsp {

class ExpertRuntime {
 public:
  // moe[il] / ffn_norm[il]: the layer's weights, nullptr for dense layers
  // (they must outlive this). [data_begin, data_end): the mapped tensor data.
  ExpertRuntime(const ModelConfig& cfg, std::vector<const layers::MoeWeights*> moe, std::vector<const float*> ffn_norm,
                const uint8_t* data_begin, const uint8_t* data_end);
  ~ExpertRuntime();

  void configure(const ExpertOptions& o);
  const ExpertOptions& options() const { return opt_; }
  ExpertMetrics metrics() const;
  void reset_metrics();

  void begin_forward();  // swaps experts into the hot cache (between passes only)
  void end_forward();
  // x: the residual stream at layer il's FFN input, [m][n_embd].
  void predict(ThreadPool& pool, int il, const float* x, int64_t m);
  // chosen: layer il's routing, [m][k].
  void routed(int il, const int* chosen, int64_t m);

  struct Mats {
    kernels::MatView gate, up, down;
  };
  Mats mats(int il, int e) const;

 private:
  struct Range {
    const uint8_t* p;
    size_t n;
  };
  void request(int il, int e);
  void prefetch_loop();
  void copy_in(int il, int e, int slot);  // into a slot: pins its pages, or copies them
  bool alloc_slots(size_t n);
  bool lock_pages(int il, int e, bool lock);
  std::array<kernels::MatView, 3> parts(int il, int e) const;  // the expert's gate, up, down
  bool resident(int il, int e) const;                          // are all its pages in memory (mincore)?
  void release_cache();

  const ModelConfig& cfg_;
  std::vector<const layers::MoeWeights*> moe_;
  std::vector<const float*> norm_;
  const uint8_t *data_begin_, *data_end_;
  ExpertOptions opt_;

  // Prediction per target layer: [m][k] experts, for the m tokens of this pass.
  std::vector<std::vector<int>> predicted_;
  std::vector<std::vector<int>> last_;             // the last token's experts per layer (the baseline)
  std::vector<double> score_router_, score_prev_;  // running accuracy of each predictor per layer

  // Hot cache.
  bool pinning_ = false;  // hot experts held by mlock of their file pages (slots_ unused)
  uint8_t* slots_ = nullptr;
  size_t slot_bytes_ = 0, n_slots_ = 0;
  std::vector<std::vector<int>> slot_of_;   // [layer][expert] → slot or −1
  std::vector<std::pair<int, int>> owner_;  // slot → (layer, expert) or (−1, −1)
  std::vector<std::vector<double>> freq_;   // decayed uses
  double uses_since_decay_ = 0;

  // Metrics (read from other threads).
  mutable std::mutex mu_;
  ExpertMetrics m_;
  long fault_major0_ = 0, fault_minor0_ = 0;
  std::atomic<int64_t> prefetch_requests_{0}, prefetch_bytes_{0}, prefetch_missing_bytes_{0};

  // The prefetch thread.
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<Range> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace moelsp
