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
using hd::Type;
using hd::with_type;

constexpr int kDecodeMaxInputs = 8;
constexpr int kWarpsPerBlock = 8;

// y[i·ldy + r] = Σ_c W[r][c] · x[i·ldx + c], i < M.
template <Type T, int M>
__global__ void gemv_kernel(const uint8_t* w, int64_t row_bytes, int64_t groups, const float* x, int64_t ldx, float* y,
                            int64_t ldy, int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const uint8_t* row = w + r * row_bytes;
  constexpr int gpb = hd::block_elems(T) / 32;  // groups per block
  float acc[M] = {};
  for (int64_t g = lane; g < groups; g += 32) {
    float v[32];
    hd::decode_group<T>(row + (g / gpb) * hd::block_bytes(T), int(g % gpb), v);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float* xi = x + i * ldx + 32 * g;
      float s = 0;
#pragma unroll
      for (int j = 0; j < 32; ++j) s += v[j] * __ldg(xi + j);
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

__global__ void to_half_kernel(const float* x, __half* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
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
void launch_gemv(const uint8_t* w, int64_t row_bytes, int64_t groups, const float* x, int64_t ldx, float* y,
                 int64_t ldy, int64_t rows) {
  const auto blocks = unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  gemv_kernel<T, M><<<blocks, kWarpsPerBlock * 32>>>(w, row_bytes, groups, x, ldx, y, ldy, rows);
}

template <Type T>
struct Gemv {
  static void run(int64_t m, const uint8_t* w, int64_t row_bytes, int64_t groups, const float* x, int64_t ldx, float* y,
                  int64_t ldy, int64_t rows) {
    using Fn = void (*)(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t);
    constexpr Fn by_m[kDecodeMaxInputs + 1] = {nullptr,           launch_gemv<T, 1>, launch_gemv<T, 2>,
                                               launch_gemv<T, 3>, launch_gemv<T, 4>, launch_gemv<T, 5>,
                                               launch_gemv<T, 6>, launch_gemv<T, 7>, launch_gemv<T, 8>};
    by_m[m](w, row_bytes, groups, x, ldx, y, ldy, rows);
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
  const Type ht = *device_type(t);
  const int64_t groups = cols / 32;
  DeviceMem dw, dx, dy;
  if (!detail::upload(dw, w, size_t(rows * *row_bytes), error) ||
      !detail::upload(dx, x, size_t(m * cols) * sizeof(float), error) ||
      !detail::upload(dy, nullptr, size_t(m * rows) * sizeof(float), error))
    return false;
  bool ok = true;
  if (m <= kDecodeMaxInputs) {
    with_type<Gemv>(ht, m, dw.as<const uint8_t>(), *row_bytes, groups, dx.as<const float>(), cols, dy.as<float>(), rows,
                    rows);
    ok = check(cudaGetLastError(), "gemv_kernel", error);
  } else {
    DeviceMem wh, xh;
    if (!detail::upload(wh, nullptr, size_t(rows * cols) * sizeof(__half), error) ||
        !detail::upload(xh, nullptr, size_t(m * cols) * sizeof(__half), error))
      return false;
    const int64_t total = rows * groups;
    with_type<Dequant<__half>::Op>(ht, dw.as<const uint8_t>(), *row_bytes, groups, total, wh.as<__half>());
    to_half_kernel<<<detail::grid_for(m * cols, 256), 256>>>(dx.as<float>(), xh.as<__half>(), m * cols);
    ok = check(cudaGetLastError(), "dequant_kernel", error);
    cublasHandle_t handle{};
    if (ok && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      if (error) *error = "cublasCreate failed";
      ok = false;
    }
    if (ok) {
      // Column-major view: W row-major [rows][cols] is Wᵀ [cols × rows], x is
      // xᵀ [cols × m], y is yᵀ [rows × m] = W · xᵀ = (Wᵀ)ᵀ · xᵀ.
      const float one = 1.0f, zero = 0.0f;
      const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(cols), &one, wh.p,
                                            CUDA_R_16F, int(cols), xh.p, CUDA_R_16F, int(cols), &zero, dy.p, CUDA_R_32F,
                                            int(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) {
        if (error) *error = std::string("cublasGemmEx: ") + cublasGetStatusString(s);
        ok = false;
      }
      cublasDestroy(handle);
    }
  }
  return ok && detail::download(y, dy, size_t(m * rows) * sizeof(float), error);
}

}  // namespace moelsp::kernels::cuda
