// The CUDA entry points in a build without the CUDA backend.
#include "kernels/cuda.h"
#include "kernels/gpu.h"

namespace moelsp::kernels::cuda {

namespace {
constexpr const char* kNoCuda = "moelsp was built without CUDA (MOELSP_CUDA=OFF or no nvcc)";
}

bool compiled_in() { return false; }
std::vector<DeviceInfo> devices() { return {}; }
std::vector<DeviceInfo> devices(std::string*) { return {}; }
double host_to_device_gbs(int, size_t, std::string* error) {
  if (error) *error = kNoCuda;
  return 0;
}
double device_memory_gbs(int, size_t, std::string* error) {
  if (error) *error = kNoCuda;
  return 0;
}
bool fp16_to_fp32(const uint16_t*, float*, size_t, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}
bool dequantize(DType, const void*, int64_t, float*, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}
bool matmul(DType, const void*, int64_t, int64_t, const float*, int64_t, float*, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}

bool rms_norm(const float*, const float*, int64_t, float, float*, int64_t, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}
bool rope(float*, int64_t, int64_t, int, int64_t, int64_t, int, bool, const float*, const float*, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}
bool swiglu(const float*, const float*, float*, int64_t, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}

bool route(const hd::RouteParams&, const float*, int64_t, const float*, int*, float*, std::string* error) {
  if (error) *error = kNoCuda;
  return false;
}

}  // namespace moelsp::kernels::cuda

namespace moelsp::kernels::gpu {

std::unique_ptr<Device> make_cuda_device(int, std::string* error) {
  if (error) *error = "moelsp was built without CUDA (MOELSP_CUDA=OFF or no nvcc)";
  return nullptr;
}

}  // namespace moelsp::kernels::gpu
