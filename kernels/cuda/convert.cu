// Small first CUDA kernels: device discovery and an fp16 → fp32 conversion
// (checked against kernels::ref::fp16_to_fp32 by tests/test_kernels_cuda.cpp).
#include "kernels/cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

namespace moelsp::kernels::cuda {
namespace {

__global__ void fp16_to_fp32_kernel(const __half* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = __half2float(x[i]);
}

bool check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

}  // namespace

bool compiled_in() { return true; }

std::vector<DeviceInfo> devices(std::string* error) {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    // No driver / no device means a CPU machine; anything else is worth saying.
    if (error && e != cudaErrorNoDevice && e != cudaErrorInsufficientDriver)
      *error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (const cudaError_t e = cudaGetDeviceProperties(&p, i); e != cudaSuccess) {
      if (error) *error = "cudaGetDeviceProperties(" + std::to_string(i) + "): " + cudaGetErrorString(e);
      cudaGetLastError();
      continue;
    }
    DeviceInfo d{};
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_memory = uint64_t(p.totalGlobalMem);
    d.multiprocessors = p.multiProcessorCount;
    d.memory_bus_bits = p.memoryBusWidth;
    int clock = 0;
    if (cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, i) == cudaSuccess) d.memory_clock_khz = clock;
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_memory = free_b;
    cudaGetLastError();
    out.push_back(d);
  }
  return out;
}

std::vector<DeviceInfo> devices() { return devices(nullptr); }

double host_to_device_gbs(int index, size_t bytes, std::string* error) {
  if (!check(cudaSetDevice(index), "cudaSetDevice", error)) return 0;
  void* host = nullptr;
  void* dev = nullptr;
  double best = 0;
  if (check(cudaMallocHost(&host, bytes), "cudaMallocHost", error) &&
      check(cudaMalloc(&dev, bytes), "cudaMalloc", error)) {
    std::memset(host, 1, bytes);
    cudaEvent_t a{}, b{};
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int rep = 0; rep < 4; ++rep) {
      cudaEventRecord(a);
      cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice);
      cudaEventRecord(b);
      if (!check(cudaEventSynchronize(b), "cudaMemcpyAsync", error)) break;
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (ms > 0) best = std::max(best, double(bytes) / (double(ms) * 1e6));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  cudaFree(dev);
  cudaFreeHost(host);
  return best;
}

double device_memory_gbs(int index, size_t bytes, std::string* error) {
  if (!check(cudaSetDevice(index), "cudaSetDevice", error)) return 0;
  void* a = nullptr;
  void* b = nullptr;
  double best = 0;
  if (check(cudaMalloc(&a, bytes), "cudaMalloc", error) && check(cudaMalloc(&b, bytes), "cudaMalloc", error)) {
    cudaMemset(a, 1, bytes);
    cudaEvent_t e0{}, e1{};
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(e0);
      cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
      cudaEventRecord(e1);
      if (!check(cudaEventSynchronize(e1), "cudaMemcpyAsync", error)) break;
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (ms > 0) best = std::max(best, 2.0 * double(bytes) / (double(ms) * 1e6));  // read + write
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  cudaFree(a);
  cudaFree(b);
  return best;
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
