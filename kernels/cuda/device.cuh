// Internal to kernels/cuda: error checks and device buffers for the host
// entry points (kernels/cuda.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda.h"
#include "kernels/gpu.h"

namespace moelsp::kernels::cuda::detail {

inline bool check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

// Every entry point's first check: a device to run on.
inline bool require_device(std::string* error) {
  if (!devices().empty()) return true;
  if (error) *error = "no CUDA device available";
  return false;
}

// A device allocation freed at scope end.
struct DeviceMem {
  void* p = nullptr;
  DeviceMem() = default;
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  ~DeviceMem() { cudaFree(p); }
  template <class X>
  X* as() const {
    return static_cast<X*>(p);
  }
};

// bytes on the device, filled from host memory when `from` is given.
inline bool upload(DeviceMem& m, const void* from, size_t bytes, std::string* error) {
  return check(cudaMalloc(&m.p, bytes), "cudaMalloc", error) &&
         (!from || check(cudaMemcpy(m.p, from, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", error));
}
inline bool download(void* to, const DeviceMem& m, size_t bytes, std::string* error) {
  return check(cudaMemcpy(to, m.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", error);
}

// A grid of `threads`-thread blocks covering n items (grid-stride loops take the rest).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

// The launchers the engine's device (device.cu) and the host entry points
// share, all on the default stream, operands in device memory.

// F16 scratch for the prompt matmul's dequantized weights and converted
// inputs, grown on demand (capped: larger matrices go in row chunks).
struct HalfScratch {
  void* w = nullptr;
  void* x = nullptr;
  size_t w_elems = 0, x_elems = 0;
  ~HalfScratch() {
    cudaFree(w);
    cudaFree(x);
  }
};
// y = W·x: the decode kernel for m ≤ 8, else W's rows dequantized to F16 in
// chunks that fit the scratch cap and cublasGemmEx. Throws gpu::DeviceError.
void matmul(const gpu::Mat& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, cublasHandle_t handle,
            HalfScratch& scratch);
// The chosen experts' products (gpu::Device::matmul_experts).
void matmul_experts(const gpu::ExpertsArgs& a);
// Rows ids[i] of `table` → x [n][cols] as f32.
void embed(const gpu::Mat& table, const int32_t* ids, int64_t n, float* x);
void rms_norm(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y, int64_t m);
void rope(float* x, int64_t m, int64_t ld, int n_heads, int64_t head_stride, int64_t offset, int n_pairs, bool neox,
          const float* cs, const float* sn);
void swiglu(const float* g, const float* u, float* y, int64_t n);
void route(const hd::RouteParams& r, float* logits, int64_t m, const float* bias, int* chosen, float* weight);

// Throws gpu::DeviceError naming `what` when the last launch or call failed.
inline void throw_if(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw gpu::DeviceError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace moelsp::kernels::cuda::detail
