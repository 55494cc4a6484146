// The CUDA backend as a plugin: libmoelsp_cuda.so holds the .cu kernels and
// links libcudart and libcublas; the moelsp binary links neither and loads
// the plugin (dlopen) the first time a CUDA entry point is called. One
// binary — and one Debian package — then runs on machines without the CUDA
// runtime (CPU only, saying why in the profile) and on NVIDIA machines with
// it. llama.cpp does the same with GGML_BACKEND_DL.
//
// The plugin and the binary are built together by the same compiler: the
// table below passes C++ types (std::string, std::vector, a Device with
// virtual functions) across, which needs the same ABI on both sides, and
// kAbi refuses a plugin from another build of a different shape.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda.h"
#include "kernels/gpu.h"

namespace moelsp::kernels::cuda::plugin {

inline constexpr int kAbi = 1;  // bump when the table or a type it passes changes
inline constexpr const char* kEntry = "moelsp_cuda_plugin";
inline constexpr const char* kFile = "libmoelsp_cuda.so";

struct Api {
  int abi = 0;
  size_t size = 0;  // sizeof(Api) where the plugin was built
  std::vector<DeviceInfo> (*devices)(std::string* error);
  double (*host_to_device_gbs)(int index, size_t bytes, std::string* error);
  double (*device_memory_gbs)(int index, size_t bytes, std::string* error);
  bool (*fp16_to_fp32)(const uint16_t* x, float* y, size_t n, std::string* error);
  bool (*dequantize)(DType t, const void* w, int64_t n, float* y, std::string* error);
  bool (*matmul)(DType t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
                 std::string* error);
  bool (*rms_norm)(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m, std::string* error);
  bool (*rope)(float* x, int64_t m, int64_t token_stride, int n_heads, int64_t head_stride, int64_t offset, int n_pairs,
               bool neox, const float* cs, const float* sn, std::string* error);
  bool (*swiglu)(const float* g, const float* u, float* y, int64_t n, std::string* error);
  bool (*route)(const hd::RouteParams& r, const float* logits, int64_t m, const float* bias, int* chosen, float* weight,
                std::string* error);
  std::unique_ptr<gpu::Device> (*make_device)(int index, std::string* error);
};

using EntryFn = const Api* (*)();

}  // namespace moelsp::kernels::cuda::plugin
