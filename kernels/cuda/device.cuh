// Internal to kernels/cuda: error checks and device buffers for the host
// entry points (kernels/cuda.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda.h"

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

}  // namespace moelsp::kernels::cuda::detail
