// The CUDA entry points in a build without the CUDA backend.
#include "kernels/cuda.h"

namespace moelsp::kernels::cuda {

bool compiled_in() { return false; }
std::vector<DeviceInfo> devices() { return {}; }
std::vector<DeviceInfo> devices(std::string*) { return {}; }
double host_to_device_gbs(int, size_t, std::string* error) {
  if (error) *error = "moelsp was built without CUDA (MOELSP_CUDA=OFF or no nvcc)";
  return 0;
}
bool fp16_to_fp32(const uint16_t*, float*, size_t, std::string* error) {
  if (error) *error = "moelsp was built without CUDA (MOELSP_CUDA=OFF or no nvcc)";
  return false;
}

}  // namespace moelsp::kernels::cuda
