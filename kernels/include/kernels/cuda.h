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
  int multiprocessors = 0;
};

bool compiled_in();  // was this binary built with the CUDA backend?
// Devices present; empty when CUDA is not compiled in or no usable driver/GPU
// exists (cudaGetDeviceCount's "insufficient driver" is "no GPU", not an error).
std::vector<DeviceInfo> devices();

// fp16 → fp32 on device 0, host buffers in and out. Returns false with a
// message in *error when no device is available or a CUDA call fails.
bool fp16_to_fp32(const uint16_t* x, float* y, size_t n, std::string* error);

}  // namespace moelsp::kernels::cuda
