// A compute device for the engine's device forward pass (engine/device/):
// memory, and the forward pass's operations over device pointers.
//
// Two implementations of one interface:
//  - CUDA (kernels/cuda/device.cu): the kernels of kernels/cuda on one GPU,
//    every operation queued in order on one stream; download() waits.
//  - Emulated (kernels/gpu/emulated.cpp): the same operations as plain loops
//    over host memory, built on the same host/device helpers (hd_blocks.h,
//    hd_route.h). It is slow and exists for one reason: the device forward
//    pass — its order of operations, block-table addressing of the paged
//    cache, grouping of tokens by expert, hybrid CPU experts — runs against
//    the reference logits in every build, so a machine without a GPU tests
//    everything but the CUDA kernels, and the device tests then compare those
//    kernels with the emulation's loops one operation at a time.
//
// Errors (a CUDA or cuBLAS failure, memory exhausted) throw DeviceError
// naming the call; the engine turns it into a ModelError for the request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/hd_route.h"
#include "kernels/types.h"

namespace moelsp::kernels::gpu {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A weight matrix in device memory: `rows` rows of `cols` values in GGUF
// blocks of a type the device decodes (cuda::device_supports), row_bytes
// apart. Every row holds ceil(cols / 32) groups of 32: an F32/F16/BF16 row
// whose length is not a multiple of 32 is padded with zeros to one, and the
// operations read only its first `cols` values.
struct Mat {
  const void* data = nullptr;
  DType type = DType::F32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
};

// Paged rows of one layer of the KV cache in device memory: position p is row
// p % block_size of block blocks[p / block_size] (the block table, itself in
// device memory), `offset` bytes into the row. F32, F16 or BF16 values.
struct KvRows {
  uint8_t* base = nullptr;  // block 0 of the layer
  size_t block_bytes = 0, row_bytes = 0, offset = 0;
  const int32_t* blocks = nullptr;
  int block_size = 16;
  DType type = DType::F16;
};

// Causal attention of n_tokens queries at positions pos0.. over the keys and
// values at positions [0, pos0 + t] for query t (with a window w > 0: only
// [pos0 + t − w + 1, pos0 + t]); head h reads kv head h / (n_head /
// n_head_kv); sinks (gpt-oss) add exp(sink_h − max) to each softmax's
// denominator only. q, out and sinks are f32 in device memory.
struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens][ldq], head h at h·hd_k
  int64_t ldq = 0;
  KvRows k, v;  // kv head g's key at element g·hd_k of k's row, its value at g·hd_v of v's
  int n_tokens = 0, pos0 = 0;
  int n_head = 0, n_head_kv = 0, hd_k = 0, hd_v = 0;
  float scale = 1.0f;
  float* out = nullptr;  // [n_tokens][ldo], head h at h·hd_v
  int64_t ldo = 0;
  int window = 0;
  const float* sinks = nullptr;  // [n_head] or null
};

// One MoE layer's routed experts as one tensor on the device (expert e's
// matrix at first.data + e·stride), for the operations that pick experts on
// the device from the router's choice without a trip to the host.
struct ExpertsArgs {
  Mat first;  // expert 0 (every expert has its shape, type and row size)
  size_t stride = 0;
  const int* ids = nullptr;  // [n_slots] the expert of each slot (device)
  int64_t n_slots = 0;       // tokens × k
  int k = 1;
  const float* x = nullptr;  // slot s reads row s / k of x (x_per_slot: row s)
  int64_t ldx = 0;
  bool x_per_slot = false;
  const float* bias = nullptr;  // [n_expert][rows] added to each slot's output, or null
  float* y = nullptr;           // [n_slots][ldy]
  int64_t ldy = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual bool emulated() const = 0;
  virtual uint64_t free_memory() const = 0;  // bytes the device can still allocate (0: unknown)
  // Makes this device the calling thread's current one (CUDA keeps it per
  // thread: the engine loads on one thread and runs passes on another).
  virtual void bind() = 0;

  // Memory. alloc throws DeviceError when the device has no room.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // host → device, in stream order
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // device → host, after all queued work
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;      // device → device
  // rows × cols floats, src rows lds apart → dst rows ldd apart (device → device).
  virtual void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void sync() = 0;

  // y[i·ldy + r] = Σ_c W[r][c] · x[i·ldx + c] for i < m, r < w.rows.
  virtual void matmul(const Mat& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy) = 0;
  // x[i][·] = row ids[i] of `table` as f32 (ids in device memory).
  virtual void embed(const Mat& table, const int32_t* ids, int64_t n, float* x) = 0;
  // y[r][c] = x[r][c] · w[c] / sqrt(mean_c x[r][c]² + eps), m rows of n, ld apart (y may be x).
  virtual void rms_norm(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y, int64_t m) = 0;
  // In place, for each of m tokens (ld floats apart) and n_heads heads
  // (head_stride apart, from `offset` into the head): pair i, (2i, 2i + 1) or
  // (i, i + n_pairs) with neox, rotated by token t's cs/sn[t·n_pairs + i].
  virtual void rope(float* x, int64_t m, int64_t ld, int n_heads, int64_t head_stride, int64_t offset, int n_pairs,
                    bool neox, const float* cs, const float* sn) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;                     // x += y
  virtual void add_bias(float* y, const float* b, int64_t m, int64_t n) = 0;     // y[i][·] += b, m rows of n
  virtual void swiglu(const float* g, const float* u, float* y, int64_t n) = 0;  // y = silu(g) · u
  // gpt-oss's clamped form: g' = min(g, 7), y = g'·σ(1.702·g')·(clamp(u, −7, 7) + 1).
  virtual void swiglu_oai(const float* g, const float* u, float* y, int64_t n) = 0;
  // The router's choice (hd::route_token) per token: logits [m][n_expert]
  // (replaced by the probabilities) → chosen [m][k], weight [m][k]; bias
  // [n_expert] or null.
  virtual void route(const hd::RouteParams& r, float* logits, int64_t m, const float* bias, int* chosen,
                     float* weight) = 0;
  // Row t of src (n values, lds apart) → the cache row of position pos0 + t.
  virtual void kv_store(const float* src, int64_t lds, int64_t n, int n_tokens, int pos0, const KvRows& dst) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // y[s] = W_{ids[s]} · x_s (+ bias[ids[s]]) for every slot: the experts a
  // router chose, read where they are, at decode widths.
  virtual void matmul_experts(const ExpertsArgs& a) = 0;
  // out[t][c] += Σ_j w[t·k + j] · y[t·k + j][c] for t < n, c < cols.
  virtual void moe_combine(const float* y, int64_t ldy, const float* w, int64_t n, int k, int64_t cols, float* out,
                           int64_t ldo) = 0;
  // counts[ids[i]] += 1 for i < n (int64 counters in device memory).
  virtual void count_ids(const int* ids, int64_t n, int64_t* counts) = 0;
  // out[i][·] = x[idx[i]][·] (cols values, rows ld apart); idx in device memory.
  virtual void gather_rows(const float* x, int64_t ld, const int32_t* idx, int64_t n, int64_t cols, float* out) = 0;
  // out[idx[i]][·] += w[i] · y[i][·] (rows of out ldo apart); idx distinct.
  virtual void scatter_add_rows(const float* y, int64_t cols, const int32_t* idx, const float* w, int64_t n, float* out,
                                int64_t ldo) = 0;
};

// The host emulation (always available).
std::unique_ptr<Device> make_emulated_device();
// CUDA device `index`; null with *error saying why (no device, built without CUDA).
std::unique_ptr<Device> make_cuda_device(int index, std::string* error);

// A device allocation released at scope end.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device& d, size_t bytes) : d_(&d), p_(bytes ? d.alloc(bytes) : nullptr), bytes_(bytes) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : d_(o.d_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = o.d_, p_ = o.p_, bytes_ = o.bytes_;
      o.p_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  void reset() {
    if (p_) d_->release(p_);
    p_ = nullptr, bytes_ = 0;
  }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  Device* d_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace moelsp::kernels::gpu
