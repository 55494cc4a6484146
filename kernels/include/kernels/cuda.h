// The CUDA backend's host-side entry points. Every function here exists in
// builds without CUDA too (it then reports that no device is available), so
// callers and tests need no #ifdefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moelsp::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;  // at discovery (cudaMemGetInfo); 0 when it could not be read
  int multiprocessors = 0;
  int memory_bus_bits = 0;   // memory bus width
  int memory_clock_khz = 0;  // peak memory clock (0 where the runtime no longer reports it)
};

bool compiled_in();  // was this binary built with the CUDA backend?
// Devices present; empty when CUDA is not compiled in or no usable driver/GPU
// exists (cudaGetDeviceCount's "insufficient driver" is "no GPU", not an error).
std::vector<DeviceInfo> devices();
// The same, and why none were found when a driver or device error (not mere
// absence) was the cause: *error names the CUDA call and its message.
std::vector<DeviceInfo> devices(std::string* error);

// Host → device copy rate of device `index` in GB/s from pinned memory
// (best of a few copies of `bytes`); 0 with *error when it cannot run.
double host_to_device_gbs(int index, size_t bytes, std::string* error);

// fp16 → fp32 on device 0, host buffers in and out. Returns false with a
// message in *error when no device is available or a CUDA call fails.
bool fp16_to_fp32(const uint16_t* x, float* y, size_t n, std::string* error);

}  // namespace moelsp::kernels::cuda
