#include "kernels/types.h"

#include <array>

namespace moelsp::kernels {
namespace {

constexpr uint32_t kMaxTypeId = 43;

constexpr std::array<DTypeTraits, kMaxTypeId> make_table() {
  std::array<DTypeTraits, kMaxTypeId> t{};
  auto set = [&](DType d, std::string_view n, uint32_t b, uint32_t s) {
    t[static_cast<uint32_t>(d)] = DTypeTraits{n, b, s};
  };
  set(DType::F32, "F32", 1, 4);
  set(DType::F16, "F16", 1, 2);
  set(DType::BF16, "BF16", 1, 2);
  set(DType::F64, "F64", 1, 8);
  set(DType::I8, "I8", 1, 1);
  set(DType::I16, "I16", 1, 2);
  set(DType::I32, "I32", 1, 4);
  set(DType::I64, "I64", 1, 8);
  set(DType::Q4_0, "Q4_0", 32, 18);
  set(DType::Q4_1, "Q4_1", 32, 20);
  set(DType::Q5_0, "Q5_0", 32, 22);
  set(DType::Q5_1, "Q5_1", 32, 24);
  set(DType::Q8_0, "Q8_0", 32, 34);
  set(DType::Q8_1, "Q8_1", 32, 36);
  set(DType::Q2_K, "Q2_K", 256, 84);
  set(DType::Q3_K, "Q3_K", 256, 110);
  set(DType::Q4_K, "Q4_K", 256, 144);
  set(DType::Q5_K, "Q5_K", 256, 176);
  set(DType::Q6_K, "Q6_K", 256, 210);
  set(DType::Q8_K, "Q8_K", 256, 292);
  set(DType::IQ2_XXS, "IQ2_XXS", 256, 66);
  set(DType::IQ2_XS, "IQ2_XS", 256, 74);
  set(DType::IQ3_XXS, "IQ3_XXS", 256, 98);
  set(DType::IQ1_S, "IQ1_S", 256, 50);
  set(DType::IQ4_NL, "IQ4_NL", 32, 18);
  set(DType::IQ3_S, "IQ3_S", 256, 110);
  set(DType::IQ2_S, "IQ2_S", 256, 82);
  set(DType::IQ4_XS, "IQ4_XS", 256, 136);
  set(DType::IQ1_M, "IQ1_M", 256, 56);
  set(DType::TQ1_0, "TQ1_0", 256, 54);
  set(DType::TQ2_0, "TQ2_0", 256, 66);
  set(DType::MXFP4, "MXFP4", 32, 17);
  set(DType::NVFP4, "NVFP4", 64, 36);
  set(DType::Q1_0, "Q1_0", 128, 18);
  set(DType::Q2_0, "Q2_0", 64, 18);
  return t;
}

constexpr auto kTable = make_table();

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  if (id >= kMaxTypeId || kTable[id].block_size == 0) return std::nullopt;
  return kTable[id];
}

const DTypeTraits& traits(DType t) { return kTable.at(static_cast<uint32_t>(t)); }

std::string_view dtype_name(DType t) {
  auto id = static_cast<uint32_t>(t);
  return id < kMaxTypeId && kTable[id].block_size ? kTable[id].name : std::string_view("?");
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (uint32_t i = 0; i < kMaxTypeId; ++i)
    if (kTable[i].block_size && kTable[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const auto& tr = traits(t);
  if (n % tr.block_size) return std::nullopt;
  return n / tr.block_size * tr.type_size;
}

}  // namespace moelsp::kernels
