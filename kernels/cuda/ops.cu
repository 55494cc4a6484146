// The element-wise and per-row steps of a forward pass on the device: RMSNorm,
// RoPE from per-token cos/sin tables, SwiGLU. Each reads and writes its
// operands once, so they are bound by memory and their cost is launches: the
// forward pass will fuse them into neighbours and capture decode steps in a
// CUDA graph; these are the unfused forms its tests compare against.
//
// RoPE's angles (YaRN's ramp and scale included) are computed on the host, a
// table per token position as the CPU engine's rope_table does, so the device
// only rotates: n_dims/2 transcendentals per token are nothing next to a
// layer, and one definition of the angles serves both backends.
#include <cuda_runtime.h>

#include "device.cuh"
#include "kernels/cuda.h"

namespace moelsp::kernels::cuda {
namespace {

using detail::check;
using detail::DeviceMem;
using detail::grid_for;
using detail::throw_if;

constexpr int kNormThreads = 256;

// One block per row: strided sums of squares, a warp-shuffle then shared-memory reduction.
__global__ void rms_norm_kernel(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y) {
  const float* xr = x + int64_t(blockIdx.x) * ld;
  float* yr = y + int64_t(blockIdx.x) * ld;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) ss += xr[c] * xr[c];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __shared__ float warp_sums[kNormThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < kNormThreads / 32; ++i) total += warp_sums[i];
  const float scale = 1.0f / sqrtf(total / float(n) + eps);
  __syncthreads();  // every thread has read the sums before y (which may be x) changes
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) yr[c] = xr[c] * scale * w[c];
}

struct RopeShape {
  int64_t m, token_stride;
  int n_heads;
  int64_t head_stride, offset;
  int n_pairs;
  bool neox;
};

// Item k: token k / (heads · pairs), head, pair.
__global__ void rope_kernel(float* x, RopeShape s, const float* cs, const float* sn) {
  const int64_t total = s.m * s.n_heads * s.n_pairs;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / (int64_t(s.n_heads) * s.n_pairs);
    const int h = int(k / s.n_pairs % s.n_heads), i = int(k % s.n_pairs);
    float* v = x + t * s.token_stride + h * s.head_stride + s.offset;
    float* a = s.neox ? v + i : v + 2 * i;
    float* b = s.neox ? v + i + s.n_pairs : v + 2 * i + 1;
    const float c = cs[t * s.n_pairs + i], sv = sn[t * s.n_pairs + i];
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * sv;
    *b = x0 * sv + x1 * c;
  }
}

__global__ void swiglu_kernel(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

}  // namespace

namespace detail {

void rms_norm(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y, int64_t m) {
  for (int64_t r0 = 0; r0 < m; r0 += 65535) {  // the grid's x dimension
    const int64_t rows = m - r0 < 65535 ? m - r0 : 65535;
    rms_norm_kernel<<<unsigned(rows), kNormThreads>>>(x + r0 * ld, ld, w, n, eps, y + r0 * ld);
  }
  throw_if(cudaGetLastError(), "rms_norm_kernel");
}

void rope(float* x, int64_t m, int64_t ld, int n_heads, int64_t head_stride, int64_t offset, int n_pairs, bool neox,
          const float* cs, const float* sn) {
  const RopeShape s{m, ld, n_heads, head_stride, offset, n_pairs, neox};
  rope_kernel<<<grid_for(m * n_heads * n_pairs, 256), 256>>>(x, s, cs, sn);
  throw_if(cudaGetLastError(), "rope_kernel");
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  swiglu_kernel<<<grid_for(n, 256), 256>>>(g, u, y, n);
  throw_if(cudaGetLastError(), "swiglu_kernel");
}

}  // namespace detail

bool rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m, std::string* error) {
  if (!detail::require_device(error)) return false;
  if (n <= 0 || m <= 0) {
    if (error) *error = "rms_norm: rows and their length must be positive";
    return false;
  }
  const size_t bytes = size_t(n * m) * sizeof(float);
  DeviceMem dx, dw, dy;
  if (!detail::upload(dx, x, bytes, error) || !detail::upload(dw, w, size_t(n) * sizeof(float), error) ||
      !detail::upload(dy, nullptr, bytes, error))
    return false;
  rms_norm_kernel<<<unsigned(m), kNormThreads>>>(dx.as<float>(), n, dw.as<float>(), n, eps, dy.as<float>());
  return check(cudaGetLastError(), "rms_norm_kernel", error) && detail::download(y, dy, bytes, error);
}

bool rope(float* x, int64_t m, int64_t token_stride, int n_heads, int64_t head_stride, int64_t offset, int n_pairs,
          bool neox, const float* cs, const float* sn, std::string* error) {
  if (!detail::require_device(error)) return false;
  if (m <= 0 || n_heads <= 0 || n_pairs <= 0) {
    if (error) *error = "rope: tokens, heads and pairs must be positive";
    return false;
  }
  const size_t bytes = size_t(m * token_stride) * sizeof(float), table = size_t(m * n_pairs) * sizeof(float);
  DeviceMem dx, dc, ds;
  if (!detail::upload(dx, x, bytes, error) || !detail::upload(dc, cs, table, error) ||
      !detail::upload(ds, sn, table, error))
    return false;
  const RopeShape s{m, token_stride, n_heads, head_stride, offset, n_pairs, neox};
  rope_kernel<<<grid_for(m * n_heads * n_pairs, 256), 256>>>(dx.as<float>(), s, dc.as<float>(), ds.as<float>());
  return check(cudaGetLastError(), "rope_kernel", error) && detail::download(x, dx, bytes, error);
}

bool swiglu(const float* g, const float* u, float* y, int64_t n, std::string* error) {
  if (!detail::require_device(error)) return false;
  if (n <= 0) {
    if (error) *error = "swiglu: the length must be positive";
    return false;
  }
  const size_t bytes = size_t(n) * sizeof(float);
  DeviceMem dg, du, dy;
  if (!detail::upload(dg, g, bytes, error) || !detail::upload(du, u, bytes, error) ||
      !detail::upload(dy, nullptr, bytes, error))
    return false;
  swiglu_kernel<<<grid_for(n, 256), 256>>>(dg.as<float>(), du.as<float>(), dy.as<float>(), n);
  return check(cudaGetLastError(), "swiglu_kernel", error) && detail::download(y, dy, bytes, error);
}

}  // namespace moelsp::kernels::cuda
