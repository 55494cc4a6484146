// The CUDA backend's host-side entry points. Every function here exists in
// builds without CUDA too (it then reports that no device is available), so
// callers and tests need no #ifdefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/hd_route.h"
#include "kernels/types.h"

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

// Device `index`'s memory bandwidth in GB/s: a device-to-device copy of
// `bytes` (read + write counted), best of a few; the decode roofline's
// denominator on a GPU. 0 with *error when it cannot run.
double device_memory_gbs(int index, size_t bytes, std::string* error);

// fp16 → fp32 on device 0, host buffers in and out. Returns false with a
// message in *error when no device is available or a CUDA call fails.
bool fp16_to_fp32(const uint16_t* x, float* y, size_t n, std::string* error);

// The device kernels' form of weight type t (kernels/hd_blocks.h decodes F32,
// F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K), or none when they do not
// compute with it. The same in builds without CUDA: it describes the kernels,
// not this machine.
std::optional<hd::Type> device_type(DType t);
inline bool device_supports(DType t) { return device_type(t).has_value(); }

// The device kernels on device 0 with host buffers copied in and out, for
// tests and the device check (the engine's device path keeps weights
// resident). Each returns false with *error naming the problem: no device, a
// type the kernels do not decode, rows that are not whole blocks, a CUDA or
// cuBLAS failure.
// n values of type t → f32 (dequantization on the device).
bool dequantize(DType t, const void* w, int64_t n, float* y, std::string* error);
// y[i·rows + r] = Σ_c W[r][c] · x[i·cols + c] for i < m. m ≤ 8: the decode
// kernel, reading the blocks directly, f32 activations; more: W dequantized
// to F16 on the device and cublasGemmEx (F16 inputs, F32 accumulation).
bool matmul(DType t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
            std::string* error);

// The forward pass's per-row and element-wise steps (kernels/cuda/ops.cu),
// host buffers in and out like the above.
// y[r][c] = x[r][c] · w[c] / sqrt(mean_c x[r][c]² + eps), m rows of n.
bool rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m, std::string* error);
// In place: for each of m tokens (token_stride floats apart) and n_heads heads
// (head_stride apart, starting `offset` into the head), rotate n_pairs pairs
// by token t's table: pair i is (2i, 2i + 1), or (i, i + n_pairs) with neox;
// x0' = x0·cs − x1·sn, x1' = x0·sn + x1·cs with cs/sn[t·n_pairs + i].
bool rope(float* x, int64_t m, int64_t token_stride, int n_heads, int64_t head_stride, int64_t offset, int n_pairs,
          bool neox, const float* cs, const float* sn, std::string* error);
// y = g · sigmoid(g) · u, n values.
bool swiglu(const float* g, const float* u, float* y, int64_t n, std::string* error);
// The MoE router's choice for m tokens (hd::route_token, as the CPU engine
// chooses): logits [m][n_expert], the selection bias [n_expert] or null →
// chosen [m][k] experts and their combine weights [m][k].
bool route(const hd::RouteParams& r, const float* logits, int64_t m, const float* bias, int* chosen, float* weight,
           std::string* error);

}  // namespace moelsp::kernels::cuda
