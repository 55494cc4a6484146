// Small first CUDA kernels: device discovery and an fp16 → fp32 conversion
// (checked against kernels::ref::fp16_to_fp32 by tests/test_kernels_cuda.cpp).
#include "kernels/cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace moelsp::kernels::cuda {
namespace {

__global__ void fp16_to_fp32_kernel(const __half* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    y[i] = __half2float(x[i]);
}

bool check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

}  // namespace

bool compiled_in() { return true; }

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back(DeviceInfo{i, p.name, p.major, p.minor, uint64_t(p.totalGlobalMem),
                             p.multiProcessorCount});
  }
  return out;
}

bool fp16_to_fp32(const uint16_t* x, float* y, size_t n, std::string* error) {
  if (devices().empty()) {
    if (error) *error = "no CUDA device available";
    return false;
  }
  __half* dx = nullptr;
  float* dy = nullptr;
  bool ok = check(cudaMalloc(&dx, n * sizeof(__half)), "cudaMalloc", error) &&
            check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc", error) &&
            check(cudaMemcpy(dx, x, n * sizeof(__half), cudaMemcpyHostToDevice), "cudaMemcpy", error);
  if (ok && n) {
    const int threads = 256;
    const int blocks = int(std::min<size_t>((n + threads - 1) / threads, 4096));
    fp16_to_fp32_kernel<<<blocks, threads>>>(dx, dy, n);
    ok = check(cudaGetLastError(), "fp16_to_fp32_kernel", error) &&
         check(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy", error);
  }
  cudaFree(dx);
  cudaFree(dy);
  return ok;
}

}  // namespace moelsp::kernels::cuda
