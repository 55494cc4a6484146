// Float scratch for forward passes (llama2.c's RunState, sized on demand).
//
// A pass takes its activations from here instead of allocating vectors:
// floats(n) hands out zeroed, 64-byte-aligned buffers from one block kept
// between passes, so once the largest pass so far has sized it, a decode step
// allocates nothing. What does not fit goes to an overflow block; the next
// reset() grows the main block to the peak and drops the overflow. A Frame
// gives back everything taken after it began (a layer's temporaries).
//
// One thread: the forward pass's. Kernels running on the pool write into
// buffers taken before they start.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace moelsp::layers {

class Scratch {
 public:
  float* floats(size_t n) {
    n = (n + kAlign - 1) / kAlign * kAlign;
    float* p;
    if (used_ + n <= cap_) {
      p = main_ + used_;
      used_ += n;
    } else {
      overflow_.push_back({std::unique_ptr<float[]>(new float[n + kAlign]), n});
      overflow_total_ += n;
      p = align(overflow_.back().data.get());
    }
    peak_ = std::max(peak_, used_ + overflow_total_);
    std::fill_n(p, n, 0.0f);
    return p;
  }

  // Start of a pass (no Frame open): the main block grows to the largest
  // total any pass has taken.
  void reset() {
    if (peak_ > cap_) {
      raw_.reset(new float[peak_ + kAlign]);
      main_ = align(raw_.get());
      cap_ = peak_;
    }
    overflow_.clear();
    overflow_total_ = 0;
    used_ = 0;
  }

  class Frame {
   public:
    explicit Frame(Scratch& s) : s_(s), used_(s.used_), n_overflow_(s.overflow_.size()) {}
    ~Frame() {
      while (s_.overflow_.size() > n_overflow_) {
        s_.overflow_total_ -= s_.overflow_.back().n;
        s_.overflow_.pop_back();
      }
      s_.used_ = used_;
    }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Scratch& s_;
    size_t used_, n_overflow_;
  };

 private:
  static constexpr size_t kAlign = 16;  // floats: 64 bytes, a cache line and an AVX-512 vector
  static float* align(float* p) {
    const auto a = (reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63);
    return reinterpret_cast<float*>(a);
  }
  struct Block {
    std::unique_ptr<float[]> data;
    size_t n;
  };
  std::unique_ptr<float[]> raw_;  // the main block's allocation
  float* main_ = nullptr;         // its first aligned float
  size_t cap_ = 0, used_ = 0;     // floats in the main block, and taken from it
  std::vector<Block> overflow_;
  size_t overflow_total_ = 0, peak_ = 0;
};

}  // namespace moelsp::layers
