// Matmul on the device, weights in their GGUF blocks: the first kernels of the
// CUDA backend, with host entry points that copy buffers in and out (tests and
// tools/device-check.sh compare them with kernels::ref; the engine's device
// path will keep weights resident and call the kernels directly).
//
// Decode (m ≤ 8 inputs): one warp per weight row; each lane decodes groups of
// 32 weights (hd::decode_group, the reference's own arithmetic) and dots them
// with every input, then the warp sums its lanes. Performance model: a decode
// step is bound by the weight bytes (HBM), so the kernel must keep enough rows
// in flight: 8 warps per block, blocks for all rows. Activations are f32 here;
// int8 activations with dp4a (llama.cpp's MMVQ) are the next step where
// measured faster on a device.
//
// Prompts (m > 8): W dequantized to F16 in device scratch (one thread per
// group of 32), the inputs converted to F16, then cublasGemmEx with F32
// accumulation; cuBLAS's tensor-core GEMM is far above anything a first
// kernel of ours would reach, and the F16 copy costs one pass over W.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <string>

#include "device.cuh"
#include "kernels/cuda.h"
#include "kernels/hd_blocks.h"

namespace moelsp::kernels::cuda {
namespace {

using detail::check;
using detail::DeviceMem;
using detail::grid_for;
using detail::throw_if;
using hd::Type;
using hd::with_type;

constexpr int kDecodeMaxInputs = 8;
constexpr int kWarpsPerBlock = 8;

// y[i·ldy + r] = Σ_c W[r][c] · x[i·ldx + c], i < M.
// groups = ceil(cols / 32); the last group of a padded row reads only cols % 32 inputs.
template <Type T, int M>
__global__ void gemv_kernel(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const float* x,
                            int64_t ldx, float* y, int64_t ldy, int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const uint8_t* row = w + r * row_bytes;
  constexpr int gpb = hd::block_elems(T) / 32;  // groups per block
  float acc[M] = {};
  for (int64_t g = lane; g < groups; g += 32) {
    float v[32];
    hd::decode_group<T>(row + (g / gpb) * hd::block_bytes(T), int(g % gpb), v);
    const bool full = 32 * g + 32 <= cols;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float* xi = x + i * ldx + 32 * g;
      float s = 0;
      if (full) {
#pragma unroll
        for (int j = 0; j < 32; ++j) s += v[j] * __ldg(xi + j);
      } else {  // compile-time indices keep v in registers
        const int64_t rem = cols - 32 * g;
#pragma unroll
        for (int j = 0; j < 32; ++j)
          if (j < rem) s += v[j] * __ldg(xi + j);
      }
      acc[i] += s;
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float s = acc[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[i * ldy + r] = s;
  }
}

// The experts a router chose, one launch for all slots: block (b, s) runs
// warps over rows of expert ids[s], reading x row s / k (or s), the decode
// kernel's arithmetic with one input.
template <Type T>
__global__ void gemv_experts_kernel(gpu::ExpertsArgs a, int64_t groups) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t s = blockIdx.y, rows = a.first.rows, cols = a.first.cols;
  if (r >= rows) return;
  const int e = a.ids[s];
  const uint8_t* row = static_cast<const uint8_t*>(a.first.data) + size_t(e) * a.stride + r * a.first.row_bytes;
  const float* x = a.x + (a.x_per_slot ? s : s / a.k) * a.ldx;
  constexpr int gpb = hd::block_elems(T) / 32;
  float acc = 0;
  for (int64_t g = lane; g < groups; g += 32) {
    float v[32];
    hd::decode_group<T>(row + (g / gpb) * hd::block_bytes(T), int(g % gpb), v);
    const float* xg = x + 32 * g;
    const int64_t rem = cols - 32 * g;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      if (j < rem) acc += v[j] * __ldg(xg + j);
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) a.y[s * a.ldy + r] = acc + (a.bias ? a.bias[int64_t(e) * rows + r] : 0.0f);
}

template <Type T>
struct GemvExperts {
  static void run(const gpu::ExpertsArgs& a, int64_t groups) {
    const dim3 grid(unsigned((a.first.rows + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(a.n_slots));
    gemv_experts_kernel<T><<<grid, kWarpsPerBlock * 32>>>(a, groups);
  }
};

// Group k of the matrix (row k / groups, group k % groups) → 32 values of out.
template <Type T, class Out>
__global__ void dequant_kernel(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t total, Out* out) {
  constexpr int gpb = hd::block_elems(T) / 32;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / groups, g = k % groups;
    float v[32];
    hd::decode_group<T>(w + r * row_bytes + (g / gpb) * hd::block_bytes(T), int(g % gpb), v);
    Out* o = out + k * 32;
    for (int j = 0; j < 32; ++j) {
      if constexpr (sizeof(Out) == 2) o[j] = __float2half_rn(v[j]);
      else o[j] = v[j];
    }
  }
}

// Groups [0, total) of a matrix of `groups` per row → out, on a grid sized for them.
template <class Out>
struct Dequant {
  template <Type T>
  struct Op {
    static void run(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t total, Out* out) {
      dequant_kernel<T, Out><<<detail::grid_for(total, 256), 256>>>(w, row_bytes, groups, total, out);
    }
  };
};

template <Type T, int M>
void launch_gemv(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const float* x, int64_t ldx,
                 float* y, int64_t ldy, int64_t rows) {
  const auto blocks = unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  gemv_kernel<T, M><<<blocks, kWarpsPerBlock * 32>>>(w, row_bytes, groups, cols, x, ldx, y, ldy, rows);
}

template <Type T>
struct Gemv {
  static void run(int64_t m, const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const float* x,
                  int64_t ldx, float* y, int64_t ldy, int64_t rows) {
    using Fn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t);
    constexpr Fn by_m[kDecodeMaxInputs + 1] = {nullptr,           launch_gemv<T, 1>, launch_gemv<T, 2>,
                                               launch_gemv<T, 3>, launch_gemv<T, 4>, launch_gemv<T, 5>,
                                               launch_gemv<T, 6>, launch_gemv<T, 7>, launch_gemv<T, 8>};
    by_m[m](w, row_bytes, groups, cols, x, ldx, y, ldy, rows);
  }
};

// Checks shared by the entry points: a device, a type the device path decodes,
// whole blocks per row. Returns the row's bytes, or nothing with *error set.
std::optional<int64_t> prepare(DType t, int64_t cols, std::string* error) {
  if (!detail::require_device(error)) return std::nullopt;
  const auto ht = device_type(t);
  if (!ht) {
    if (error) *error = "the CUDA kernels do not compute with " + std::string(dtype_name(t)) + " weights yet";
    return std::nullopt;
  }
  if (cols <= 0 || cols % hd::block_elems(*ht) != 0) {
    if (error) *error = "a row of " + std::string(dtype_name(t)) + " needs a whole number of blocks";
    return std::nullopt;
  }
  return cols / hd::block_elems(*ht) * hd::block_bytes(*ht);
}

}  // namespace

bool dequantize(DType t, const void* w, int64_t n, float* y, std::string* error) {
  const auto row_bytes = prepare(t, n, error);
  if (!row_bytes) return false;
  DeviceMem dw, dy;
  const int64_t groups = n / 32;
  if (!detail::upload(dw, w, size_t(*row_bytes), error) ||
      !detail::upload(dy, nullptr, size_t(n) * sizeof(float), error))
    return false;
  with_type<Dequant<float>::Op>(*device_type(t), dw.as<const uint8_t>(), *row_bytes, groups, groups, dy.as<float>());
  return check(cudaGetLastError(), "dequant_kernel", error) &&
         detail::download(y, dy, size_t(n) * sizeof(float), error);
}

bool matmul(DType t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
            std::string* error) {
  const auto row_bytes = prepare(t, cols, error);
  if (!row_bytes) return false;
  if (rows <= 0 || m <= 0) {
    if (error) *error = "matmul: rows and inputs must be positive";
    return false;
  }
  DeviceMem dw, dx, dy;
  if (!detail::upload(dw, w, size_t(rows * *row_bytes), error) ||
      !detail::upload(dx, x, size_t(m * cols) * sizeof(float), error) ||
      !detail::upload(dy, nullptr, size_t(m * rows) * sizeof(float), error))
    return false;
  cublasHandle_t handle{};
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    if (error) *error = "cublasCreate failed";
    return false;
  }
  bool ok = true;
  try {
    detail::HalfScratch scratch;
    gpu::Mat mat;  // (no designated initializers: this file is C++17)
    mat.data = dw.p;
    mat.type = t;
    mat.rows = rows;
    mat.cols = cols;
    mat.row_bytes = size_t(*row_bytes);
    detail::matmul(mat, dx.as<const float>(), cols, m, dy.as<float>(), rows, handle, scratch);
  } catch (const gpu::DeviceError& e) {
    if (error) *error = e.what();
    ok = false;
  }
  cublasDestroy(handle);
  return ok && detail::download(y, dy, size_t(m * rows) * sizeof(float), error);
}

namespace detail {

namespace {

// The largest F16 copy of a weight matrix the prompt path keeps at once
// (64 MiB): bigger matrices (an output head of 150 k rows) go in row chunks,
// each its own GEMM, which costs nothing measurable at these sizes.
constexpr size_t kHalfScratchCap = size_t(32) << 20;

// x [m][cols] (ldx apart) → y [m][padded], zeros past cols; values beyond
// F16's range clamp to ±65504 (an outlier would otherwise become inf, then
// NaN in the product), as F16 activations are what cuBLAS's tensor cores take
// here (llama.cpp converts them to F16 the same way).
__global__ void to_half_strided_kernel(const float* x, int64_t ldx, int64_t cols, int64_t padded, __half* y,
                                       int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % padded;
    y[i] = c < cols ? __float2half_rn(fminf(fmaxf(x[(i / padded) * ldx + c], -65504.0f), 65504.0f))
                    : __float2half_rn(0.0f);
  }
}

void grow(void*& p, size_t& have, size_t want) {
  if (have >= want) return;
  throw_if(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // queued GEMMs may still read the old scratch
  cudaFree(p);
  p = nullptr;
  have = 0;
  throw_if(cudaMalloc(&p, want * sizeof(__half)), "cudaMalloc (matmul scratch)");
  have = want;
}

template <Type T>
struct EmbedRows {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const int32_t* ids, int64_t n,
                  float* x);
};

template <Type T>
__global__ void embed_kernel(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const int32_t* ids,
                             int64_t total, float* x) {
  constexpr int gpb = hd::block_elems(T) / 32;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / groups, g = k % groups;
    float v[32];
    hd::decode_group<T>(w + int64_t(ids[i]) * row_bytes + (g / gpb) * hd::block_bytes(T), int(g % gpb), v);
    float* out = x + i * cols + 32 * g;
    for (int j = 0; j < 32 && 32 * g + j < cols; ++j) out[j] = v[j];
  }
}

template <Type T>
void EmbedRows<T>::run(const uint8_t* w, int64_t row_bytes, int64_t groups, int64_t cols, const int32_t* ids, int64_t n,
                       float* x) {
  embed_kernel<T><<<grid_for(n * groups, 128), 128>>>(w, row_bytes, groups, cols, ids, n * groups, x);
}

}  // namespace

void matmul(const gpu::Mat& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, cublasHandle_t handle,
            HalfScratch& scratch) {
  const auto ht = device_type(w.type);
  if (!ht) throw gpu::DeviceError("matmul: the device does not decode this weight matrix");
  const int64_t groups = (w.cols + 31) / 32, padded = 32 * groups;
  if (hd::block_elems(*ht) != 32 && w.cols % hd::block_elems(*ht) != 0)
    throw gpu::DeviceError("matmul: rows of a k-quant must be whole blocks");
  const auto* wb = static_cast<const uint8_t*>(w.data);
  if (m <= kDecodeMaxInputs) {
    with_type<Gemv>(*ht, m, wb, int64_t(w.row_bytes), groups, w.cols, x, ldx, y, ldy, w.rows);
    return throw_if(cudaGetLastError(), "gemv_kernel");
  }
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(w.rows, int64_t(kHalfScratchCap) / padded));
  grow(scratch.w, scratch.w_elems, size_t(chunk * padded));
  grow(scratch.x, scratch.x_elems, size_t(m * padded));
  to_half_strided_kernel<<<grid_for(m * padded, 256), 256>>>(x, ldx, w.cols, padded, static_cast<__half*>(scratch.x),
                                                             m * padded);
  throw_if(cudaGetLastError(), "to_half_kernel");
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, w.rows - r0);
    with_type<Dequant<__half>::Op>(*ht, wb + r0 * int64_t(w.row_bytes), int64_t(w.row_bytes), groups, rows * groups,
                                   static_cast<__half*>(scratch.w));
    throw_if(cudaGetLastError(), "dequant_kernel");
    // Column-major view: W row-major [rows][cols] is Wᵀ [cols × rows], x is
    // xᵀ [cols × m], y is yᵀ [ldy × m] = W · xᵀ = (Wᵀ)ᵀ · xᵀ.
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(padded), &one,
                                          scratch.w, CUDA_R_16F, int(padded), scratch.x, CUDA_R_16F, int(padded), &zero,
                                          y + r0, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) throw gpu::DeviceError(std::string("cublasGemmEx: ") + cublasGetStatusString(s));
  }
}

void matmul_experts(const gpu::ExpertsArgs& a) {
  const auto ht = device_type(a.first.type);
  if (!ht) throw gpu::DeviceError("matmul_experts: the device does not decode these experts");
  if (a.n_slots <= 0) return;
  if (a.n_slots > 65535) throw gpu::DeviceError("matmul_experts: more than 65535 slots");
  with_type<GemvExperts>(*ht, a, (a.first.cols + 31) / 32);
  throw_if(cudaGetLastError(), "gemv_experts_kernel");
}

void embed(const gpu::Mat& table, const int32_t* ids, int64_t n, float* x) {
  const auto ht = device_type(table.type);
  if (!ht) throw gpu::DeviceError("embed: the device does not decode the embedding table");
  with_type<EmbedRows>(*ht, static_cast<const uint8_t*>(table.data), int64_t(table.row_bytes), (table.cols + 31) / 32,
                       table.cols, ids, n, x);
  throw_if(cudaGetLastError(), "embed_kernel");
}

}  // namespace detail

}  // namespace moelsp::kernels::cuda
