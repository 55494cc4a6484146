// The plugin's one exported symbol: the table of its entry points (plugin.h).
// Everything else in libmoelsp_cuda.so is hidden, so its functions never
// bind to the binary's forwarders of the same name (loader.cpp).
#include "plugin.h"

namespace moelsp::kernels::cuda::plugin {
namespace {

const Api kApi = {
    .abi = kAbi,
    .size = sizeof(Api),
    .devices = static_cast<std::vector<DeviceInfo> (*)(std::string*)>(&cuda::devices),
    .host_to_device_gbs = &cuda::host_to_device_gbs,
    .device_memory_gbs = &cuda::device_memory_gbs,
    .fp16_to_fp32 = &cuda::fp16_to_fp32,
    .dequantize = &cuda::dequantize,
    .matmul = &cuda::matmul,
    .rms_norm = &cuda::rms_norm,
    .rope = &cuda::rope,
    .swiglu = &cuda::swiglu,
    .route = &cuda::route,
    .make_device = &gpu::make_cuda_device,
};

}  // namespace
}  // namespace moelsp::kernels::cuda::plugin

extern "C" __attribute__((visibility("default"))) const moelsp::kernels::cuda::plugin::Api* moelsp_cuda_plugin() {
  return &moelsp::kernels::cuda::plugin::kApi;
}
