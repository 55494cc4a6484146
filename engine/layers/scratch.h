// Float scratch for forward passes (llama2.c's RunState, sized on demand).
//
// A pass takes its activations from here instead of allocating vectors:
// floats(n) hands out zeroed, 64-byte-aligned buffers from one block kept
// between passes, so once the largest pass so far has sized it, a decode step
// allocates nothing. What does not fit goes to an overflow allocation; the
// next reset() grows the main block to the peak and drops the overflow. A
// Frame gives back everything taken after it began (a layer's temporaries).
//
// Under AddressSanitizer every buffer is an allocation of its own, exactly
// n floats long, so an overrun into the next buffer is still reported (one
// shared block would hide it).
//
// One thread: the forward pass's. Kernels running on the pool write into
// buffers taken before they start.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MOELSP_SCRATCH_SEPARATE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOELSP_SCRATCH_SEPARATE 1
#endif
#endif
#ifndef MOELSP_SCRATCH_SEPARATE
#define MOELSP_SCRATCH_SEPARATE 0
#endif

namespace moelsp::layers {

class Scratch {
 public:
  float* floats(size_t n) {
    if (!kSeparate) n = (n + kAlign - 1) / kAlign * kAlign;
    float* p;
    if (!kSeparate && used_ + n <= cap_) {
      p = main_.get() + used_;
      used_ += n;
    } else {
      overflow_.push_back({allocate(n), n});
      overflow_total_ += n;
      p = overflow_.back().data.get();
    }
    peak_ = std::max(peak_, used_ + overflow_total_);
    std::fill_n(p, n, 0.0f);
    return p;
  }

  // Start of a pass (no Frame open): the main block grows to the largest
  // total any pass has taken.
  void reset() {
    if (!kSeparate && peak_ > cap_) {
      main_ = allocate(peak_);
      cap_ = peak_;
    }
    overflow_.clear();
    overflow_total_ = 0;
    used_ = 0;
  }

  size_t capacity() const { return cap_; }  // floats in the main block

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
  static constexpr bool kSeparate = MOELSP_SCRATCH_SEPARATE;
  static constexpr size_t kAlign = 16;  // floats: 64 bytes, a cache line and an AVX-512 vector
  struct AlignedDelete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  using Buffer = std::unique_ptr<float[], AlignedDelete>;
  static Buffer allocate(size_t n) { return Buffer(new (std::align_val_t(64)) float[std::max<size_t>(n, 1)]); }
  struct Block {
    Buffer data;
    size_t n;
  };

  Buffer main_;
  size_t cap_ = 0, used_ = 0;  // floats in the main block, and taken from it
  std::vector<Block> overflow_;
  size_t overflow_total_ = 0, peak_ = 0;
};

}  // namespace moelsp::layers
