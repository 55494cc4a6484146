// Which weight types the device kernels compute with: one table for builds
// with and without CUDA (kernels/cuda.h).
#include "kernels/cuda.h"

namespace moelsp::kernels::cuda {

std::optional<hd::Type> device_type(DType t) {
  switch (t) {
    case DType::F32: return hd::Type::F32;
    case DType::F16: return hd::Type::F16;
    case DType::BF16: return hd::Type::BF16;
    case DType::Q8_0: return hd::Type::Q8_0;
    case DType::Q4_0: return hd::Type::Q4_0;
    case DType::Q5_0: return hd::Type::Q5_0;
    case DType::Q4_K: return hd::Type::Q4_K;
    case DType::Q5_K: return hd::Type::Q5_K;
    case DType::Q6_K: return hd::Type::Q6_K;
    default: return std::nullopt;
  }
}

}  // namespace moelsp::kernels::cuda
