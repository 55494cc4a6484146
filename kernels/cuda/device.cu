// The CUDA implementation of kernels/gpu.h's Device: one GPU, every operation
// queued in order on the default stream, weights and activations resident.
// matmul, embed, RMSNorm, RoPE, SwiGLU and the router are the launchers of
// matmul.cu, ops.cu and route.cu; this file adds the forward pass's glue
// (residual adds, biases, row gather/scatter for the experts, the paged KV
// store) and attention.
//
// Attention: a block of 4 warps per (query token, head, key split). Each warp
// walks every 4th cached position: a warp-wide dot for the score, then an
// online softmax (running max and sum, the accumulator rescaled when the max
// moves) over its positions; the 4 partial results merge at the end. The
// query and the accumulators live in shared memory, so any head size works
// (MLA's absorbed 576/512 included). Decode over a long context splits the
// keys across blocks (flash-decoding) and merges the splits in a second
// kernel. Not yet done: the heads sharing a kv head (GQA groups, all of
// MLA's heads) each read the cached rows again rather than once per group.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device.cuh"
#include "kernels/gpu.h"
#include "kernels/hd_activations.h"

namespace moelsp::kernels::cuda {
namespace {

using detail::grid_for;
using detail::throw_if;

constexpr int kAttnWarps = 4;

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t total, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % n];
}

__global__ void gather_kernel(const float* x, int64_t ld, const int32_t* idx, int64_t total, int64_t cols, float* out) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x)
    out[k] = x[int64_t(idx[k / cols]) * ld + k % cols];
}

__global__ void scatter_add_kernel(const float* y, int64_t cols, const int32_t* idx, const float* w, int64_t total,
                                   float* out, int64_t ldo) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / cols;
    out[int64_t(idx[i]) * ldo + k % cols] += w[i] * y[k];
  }
}

__device__ uint8_t* kv_row(const gpu::KvRows& r, int64_t pos) {
  return r.base + size_t(r.blocks[pos / r.block_size]) * r.block_bytes + size_t(pos % r.block_size) * r.row_bytes +
         r.offset;
}

__device__ float kv_load(DType t, const uint8_t* row, int64_t e) {
  if (t == DType::F32) return reinterpret_cast<const float*>(row)[e];
  if (t == DType::F16) return __half2float(reinterpret_cast<const __half*>(row)[e]);
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[e]);
}

__global__ void kv_store_kernel(const float* src, int64_t lds, int64_t n, int64_t total, int pos0, gpu::KvRows d) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / n, e = k % n;
    const float v = src[t * lds + e];
    uint8_t* row = kv_row(d, pos0 + t);
    if (d.type == DType::F32) reinterpret_cast<float*>(row)[e] = v;
    else if (d.type == DType::F16) reinterpret_cast<__half*>(row)[e] = __float2half_rn(v);
    else reinterpret_cast<__nv_bfloat16*>(row)[e] = __float2bfloat16_rn(v);
  }
}

// Where a split's partial result goes: per (token, head, split), the running
// max, the sum and the unnormalized output [hd_v].
struct Partials {
  float* data = nullptr;      // [n_tokens][n_head][splits][2 + hd_v]
  int splits = 1, chunk = 0;  // keys per split (splits > 1)
};

// grid (n_tokens, n_head, splits), kAttnWarps warps; shared: q [hd_k], acc
// [warps][hd_v], max and sum per warp. With one split the block writes the
// output; with more, split z covers keys [j0 + z·chunk, j0 + (z + 1)·chunk)
// and writes its partial (flash-decoding), merged by attention_merge_kernel:
// decode has one query per sequence, so only splitting the keys gives the
// GPU enough blocks (n_head alone is 16-64).
__global__ void attention_kernel(gpu::AttentionArgs a, Partials part) {
  extern __shared__ float sh[];
  float* q = sh;
  float* acc = q + a.hd_k;
  float* wmax = acc + kAttnWarps * a.hd_v;
  float* wsum = wmax + kAttnWarps;
  const int t = blockIdx.x, h = blockIdx.y, z = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = h / (a.n_head / a.n_head_kv), n_kv = a.pos0 + t + 1;
  const int j0 = a.window > 0 && n_kv > a.window ? n_kv - a.window : 0;
  const int jb = part.splits > 1 ? j0 + z * part.chunk : j0;
  const int je = part.splits > 1 ? min(n_kv, jb + part.chunk) : n_kv;
  for (int e = threadIdx.x; e < a.hd_k; e += blockDim.x) q[e] = a.q[int64_t(t) * a.ldq + int64_t(h) * a.hd_k + e];
  float* my = acc + warp * a.hd_v;
  for (int e = lane; e < a.hd_v; e += 32) my[e] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  for (int j = jb + warp; j < je; j += kAttnWarps) {
    const uint8_t* kr = kv_row(a.k, j);
    float d = 0.0f;
    for (int e = lane; e < a.hd_k; e += 32) d += q[e] * kv_load(a.k.type, kr, int64_t(g) * a.hd_k + e);
    for (int o = 16; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
    const float s = d * a.scale, m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    m = m_new;
    const uint8_t* vr = kv_row(a.v, j);
    for (int e = lane; e < a.hd_v; e += 32) my[e] = my[e] * corr + p * kv_load(a.v.type, vr, int64_t(g) * a.hd_v + e);
  }
  if (lane == 0) wmax[warp] = m, wsum[warp] = l;
  __syncthreads();
  float mx = wmax[0];
  for (int w = 1; w < kAttnWarps; ++w) mx = fmaxf(mx, wmax[w]);
  // A split past this token's keys saw nothing: (−inf, 0, zeros), which the merge weighs as 0.
  const bool empty = mx == -INFINITY;
  float total = 0.0f;
  for (int w = 0; w < kAttnWarps && !empty; ++w) total += wsum[w] * expf(wmax[w] - mx);
  if (part.splits > 1) {
    float* p = part.data + ((int64_t(t) * a.n_head + h) * part.splits + z) * (2 + a.hd_v);
    if (threadIdx.x == 0) p[0] = mx, p[1] = total;
    for (int e = threadIdx.x; e < a.hd_v; e += blockDim.x) {
      float s = 0.0f;
      for (int w = 0; w < kAttnWarps && !empty; ++w) s += acc[w * a.hd_v + e] * expf(wmax[w] - mx);
      p[2 + e] = s;
    }
    return;
  }
  if (a.sinks) total += expf(a.sinks[h] - mx);
  float* out = a.out + int64_t(t) * a.ldo + int64_t(h) * a.hd_v;
  for (int e = threadIdx.x; e < a.hd_v; e += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) s += acc[w * a.hd_v + e] * expf(wmax[w] - mx);
    out[e] = s / total;
  }
}

// grid (n_tokens, n_head): the splits' partials → the output (and the sink).
__global__ void attention_merge_kernel(gpu::AttentionArgs a, Partials part) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float* p = part.data + (int64_t(t) * a.n_head + h) * part.splits * (2 + a.hd_v);
  float mx = -INFINITY;
  for (int z = 0; z < part.splits; ++z) mx = fmaxf(mx, p[z * (2 + a.hd_v)]);  // split 0 always has keys
  float total = a.sinks ? expf(a.sinks[h] - mx) : 0.0f;
  for (int z = 0; z < part.splits; ++z) {
    const float mz = p[z * (2 + a.hd_v)];
    if (mz != -INFINITY) total += p[z * (2 + a.hd_v) + 1] * expf(mz - mx);
  }
  float* out = a.out + int64_t(t) * a.ldo + int64_t(h) * a.hd_v;
  for (int e = threadIdx.x; e < a.hd_v; e += blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < part.splits; ++z) {
      const float mz = p[z * (2 + a.hd_v)];
      if (mz != -INFINITY) s += p[z * (2 + a.hd_v) + 2 + e] * expf(mz - mx);
    }
    out[e] = s / total;
  }
}

// out[t][c] += Σ_j w[t·k + j] · y[t·k + j][c], item (t, c).
__global__ void moe_combine_kernel(const float* y, int64_t ldy, const float* w, int64_t total, int k, int64_t cols,
                                   float* out, int64_t ldo) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i % cols;
    float s = 0;
    for (int j = 0; j < k; ++j) s += w[t * k + j] * y[(t * k + j) * ldy + c];
    out[t * ldo + c] += s;
  }
}

__global__ void count_ids_kernel(const int* ids, int64_t n, unsigned long long* counts) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(counts + ids[i], 1ull);
}

__global__ void swiglu_oai_kernel(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    y[i] = hd::swiglu_oai(g[i], u[i]);
  }
}

class CudaDevice final : public gpu::Device {
 public:
  CudaDevice(const DeviceInfo& info) : info_(info) {
    throw_if(cudaSetDevice(info.index), "cudaSetDevice");
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) throw gpu::DeviceError("cublasCreate failed");
  }
  ~CudaDevice() override {
    cudaDeviceSynchronize();
    cudaFree(attn_part_);
    cublasDestroy(handle_);
  }

  std::string name() const override {
    return info_.name + " (CUDA device " + std::to_string(info_.index) + ", sm_" + std::to_string(info_.cc_major) +
           std::to_string(info_.cc_minor) + ")";
  }
  bool emulated() const override { return false; }
  uint64_t free_memory() const override {
    size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
  }

  void bind() override { throw_if(cudaSetDevice(info_.index), "cudaSetDevice"); }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
      throw gpu::DeviceError("cudaMalloc of " + std::to_string(bytes >> 20) + " MiB on " + info_.name + ": " +
                             cudaGetErrorString(e));
    return p;
  }
  void release(void* p) noexcept override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    throw_if(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    throw_if(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    throw_if(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync (device)");
  }
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) override {
    throw_if(cudaMemcpy2DAsync(dst, size_t(ldd) * 4, src, size_t(lds) * 4, size_t(cols) * 4, size_t(rows),
                               cudaMemcpyDeviceToDevice, 0),
             "cudaMemcpy2DAsync");
  }
  void zero(void* p, size_t bytes) override { throw_if(cudaMemsetAsync(p, 0, bytes, 0), "cudaMemsetAsync"); }
  void sync() override { throw_if(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  void matmul(const gpu::Mat& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy) override {
    detail::matmul(w, x, ldx, m, y, ldy, handle_, scratch_);
  }
  void embed(const gpu::Mat& table, const int32_t* ids, int64_t n, float* x) override {
    detail::embed(table, ids, n, x);
  }
  void rms_norm(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y, int64_t m) override {
    detail::rms_norm(x, ld, w, n, eps, y, m);
  }
  void rope(float* x, int64_t m, int64_t ld, int n_heads, int64_t head_stride, int64_t offset, int n_pairs, bool neox,
            const float* cs, const float* sn) override {
    detail::rope(x, m, ld, n_heads, head_stride, offset, n_pairs, neox, cs, sn);
  }
  void add(float* x, const float* y, int64_t n) override {
    add_kernel<<<grid_for(n, 256), 256>>>(x, y, n);
    throw_if(cudaGetLastError(), "add_kernel");
  }
  void add_bias(float* y, const float* b, int64_t m, int64_t n) override {
    add_bias_kernel<<<grid_for(m * n, 256), 256>>>(y, b, m * n, n);
    throw_if(cudaGetLastError(), "add_bias_kernel");
  }
  void swiglu(const float* g, const float* u, float* y, int64_t n) override { detail::swiglu(g, u, y, n); }
  void swiglu_oai(const float* g, const float* u, float* y, int64_t n) override {
    swiglu_oai_kernel<<<grid_for(n, 256), 256>>>(g, u, y, n);
    throw_if(cudaGetLastError(), "swiglu_oai_kernel");
  }
  void route(const hd::RouteParams& r, float* logits, int64_t m, const float* bias, int* chosen,
             float* weight) override {
    detail::route(r, logits, m, bias, chosen, weight);
  }
  void kv_store(const float* src, int64_t lds, int64_t n, int n_tokens, int pos0, const gpu::KvRows& d) override {
    if (d.type != DType::F32 && d.type != DType::F16 && d.type != DType::BF16)
      throw gpu::DeviceError("the device KV cache holds F32, F16 or BF16 rows");
    kv_store_kernel<<<grid_for(n * n_tokens, 256), 256>>>(src, lds, n, n * n_tokens, pos0, d);
    throw_if(cudaGetLastError(), "kv_store_kernel");
  }
  void attention(const gpu::AttentionArgs& a) override {
    const size_t shared = size_t(a.hd_k + kAttnWarps * a.hd_v + 2 * kAttnWarps) * sizeof(float);
    if (shared > 48 * 1024) throw gpu::DeviceError("attention: head sizes too large for the device kernel");
    // Split the keys when the (token, head) blocks alone would leave most
    // SMs idle and each block would walk many keys: aim at ~4 blocks per SM,
    // at least kMinChunk keys per split.
    constexpr int kMinChunk = 128;
    const int n_kv = a.pos0 + a.n_tokens, keys = a.window > 0 ? std::min(a.window, n_kv) : n_kv;
    const int64_t blocks = int64_t(a.n_tokens) * a.n_head, want = 4LL * std::max(1, info_.multiprocessors);
    Partials part;
    if (blocks < want && keys > 2 * kMinChunk) {
      part.splits = int(std::min<int64_t>({(want + blocks - 1) / blocks, (keys + kMinChunk - 1) / kMinChunk, 64}));
      part.chunk = (keys + part.splits - 1) / part.splits;
    }
    const dim3 grid(unsigned(a.n_tokens), unsigned(a.n_head), unsigned(part.splits));
    if (part.splits > 1) {
      const size_t need = size_t(blocks) * size_t(part.splits) * size_t(2 + a.hd_v);
      if (attn_partials_ < need) {  // grown only: the device is synchronized before the old one goes
        throw_if(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        cudaFree(attn_part_);
        attn_part_ = nullptr;
        attn_partials_ = 0;
        throw_if(cudaMalloc(&attn_part_, need * sizeof(float)), "cudaMalloc (attention partials)");
        attn_partials_ = need;
      }
      part.data = attn_part_;
    }
    attention_kernel<<<grid, kAttnWarps * 32, shared>>>(a, part);
    throw_if(cudaGetLastError(), "attention_kernel");
    if (part.splits > 1) {
      attention_merge_kernel<<<dim3(unsigned(a.n_tokens), unsigned(a.n_head)), 128>>>(a, part);
      throw_if(cudaGetLastError(), "attention_merge_kernel");
    }
  }
  void matmul_experts(const gpu::ExpertsArgs& a) override { detail::matmul_experts(a); }
  void moe_combine(const float* y, int64_t ldy, const float* w, int64_t n, int k, int64_t cols, float* out,
                   int64_t ldo) override {
    moe_combine_kernel<<<grid_for(n * cols, 256), 256>>>(y, ldy, w, n * cols, k, cols, out, ldo);
    throw_if(cudaGetLastError(), "moe_combine_kernel");
  }
  void count_ids(const int* ids, int64_t n, int64_t* counts) override {
    count_ids_kernel<<<grid_for(n, 256), 256>>>(ids, n, reinterpret_cast<unsigned long long*>(counts));
    throw_if(cudaGetLastError(), "count_ids_kernel");
  }
  void gather_rows(const float* x, int64_t ld, const int32_t* idx, int64_t n, int64_t cols, float* out) override {
    gather_kernel<<<grid_for(n * cols, 256), 256>>>(x, ld, idx, n * cols, cols, out);
    throw_if(cudaGetLastError(), "gather_kernel");
  }
  void scatter_add_rows(const float* y, int64_t cols, const int32_t* idx, const float* w, int64_t n, float* out,
                        int64_t ldo) override {
    scatter_add_kernel<<<grid_for(n * cols, 256), 256>>>(y, cols, idx, w, n * cols, out, ldo);
    throw_if(cudaGetLastError(), "scatter_add_kernel");
  }

 private:
  DeviceInfo info_;
  cublasHandle_t handle_{};
  float* attn_part_ = nullptr;  // split attention's partials, grown on demand
  size_t attn_partials_ = 0;
  detail::HalfScratch scratch_;
};

}  // namespace
}  // namespace moelsp::kernels::cuda

namespace moelsp::kernels::gpu {

std::unique_ptr<Device> make_cuda_device(int index, std::string* error) {
  const auto devs = cuda::devices(error);
  for (const cuda::DeviceInfo& d : devs)
    if (d.index == index) try {
        return std::make_unique<cuda::CudaDevice>(d);
      } catch (const DeviceError& e) {
        if (error) *error = e.what();
        return nullptr;
      }
  if (error && error->empty()) *error = "no CUDA device " + std::to_string(index);
  return nullptr;
}

}  // namespace moelsp::kernels::gpu
