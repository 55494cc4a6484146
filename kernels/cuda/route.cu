// The MoE router on the device: one thread per token runs hd::route_token,
// the definition the CPU engine's layers::route calls, so both backends pick
// experts the same way (expf may differ by an ulp between them: ties closer
// than that can fall either way). A token's work is O(k · n_expert) compares,
// microseconds for a batch; the router's matmul before it is the cost.
#include <cuda_runtime.h>

#include "device.cuh"
#include "kernels/cuda.h"

namespace moelsp::kernels::cuda {
namespace {

constexpr int kMaxRouteExperts = 512;

__global__ void route_kernel(hd::RouteParams r, float* probs, int64_t m, const float* bias, int* chosen,
                             float* weight) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= m) return;
  float sel[kMaxRouteExperts];
  hd::route_token(r, probs + t * r.n_expert, bias, sel, chosen + t * r.k, weight + t * r.k);
}

}  // namespace

void detail::route(const hd::RouteParams& r, float* logits, int64_t m, const float* bias, int* chosen, float* weight) {
  if (r.n_expert < 1 || r.n_expert > kMaxRouteExperts || r.k < 1 || r.k > r.n_expert || r.n_group < 1 ||
      r.n_group > hd::kMaxGroups || r.n_expert % r.n_group != 0)
    throw gpu::DeviceError("route: the device router takes 1-512 experts, 1 ≤ k ≤ experts, at most 64 groups");
  route_kernel<<<detail::grid_for(m, 128), 128>>>(r, logits, m, bias, chosen, weight);
  detail::throw_if(cudaGetLastError(), "route_kernel");
}

bool route(const hd::RouteParams& r, const float* logits, int64_t m, const float* bias, int* chosen, float* weight,
           std::string* error) {
  if (!detail::require_device(error)) return false;
  if (r.n_expert < 1 || r.n_expert > kMaxRouteExperts || r.k < 1 || r.k > r.n_expert || m < 1 || r.n_group < 1 ||
      r.n_group > hd::kMaxGroups || r.n_expert % r.n_group != 0) {
    if (error)
      *error = "route: the device router takes 1-512 experts, 1 ≤ k ≤ experts, at most 64 groups dividing them";
    return false;
  }
  const size_t lb = size_t(m * r.n_expert) * sizeof(float), kb = size_t(m * r.k);
  detail::DeviceMem dl, db, dc, dw;
  if (!detail::upload(dl, logits, lb, error) ||
      (bias && !detail::upload(db, bias, size_t(r.n_expert) * sizeof(float), error)) ||
      !detail::upload(dc, nullptr, kb * sizeof(int), error) || !detail::upload(dw, nullptr, kb * sizeof(float), error))
    return false;
  route_kernel<<<detail::grid_for(m, 128), 128>>>(r, dl.as<float>(), m, bias ? db.as<const float>() : nullptr,
                                                  dc.as<int>(), dw.as<float>());
  return detail::check(cudaGetLastError(), "route_kernel", error) &&
         detail::download(chosen, dc, kb * sizeof(int), error) &&
         detail::download(weight, dw, kb * sizeof(float), error);
}

}  // namespace moelsp::kernels::cuda
