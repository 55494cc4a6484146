#include "kernels/types.h"

#include <algorithm>

namespace moelsp::kernels {

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  if (id >= kMaxTypeId || kTypeTable[id].block_size == 0) return std::nullopt;
  return kTypeTable[id];
}

std::string_view dtype_name(DType t) {
  auto id = static_cast<uint32_t>(t);
  return id < kMaxTypeId && kTypeTable[id].block_size ? kTypeTable[id].name : std::string_view("?");
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (uint32_t i = 0; i < kMaxTypeId; ++i)
    if (kTypeTable[i].block_size && kTypeTable[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

std::vector<DType> matmul_types() {
  std::vector<DType> out;
  for (uint32_t i = 0; i < kMaxTypeId; ++i)
    if (kTypeTable[i].kernel != Kernel::None) out.push_back(static_cast<DType>(i));
  // Table order is the type ids'; list the unquantized types first, as people think of them.
  std::stable_partition(out.begin(), out.end(), [](DType t) { return traits(t).kernel == Kernel::F32Only; });
  return out;
}

std::string matmul_type_names() {
  std::string s;
  for (DType t : matmul_types()) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const auto& tr = traits(t);
  if (n % tr.block_size) return std::nullopt;
  return n / tr.block_size * tr.type_size;
}

}  // namespace moelsp::kernels
