// Tensor element types as stored in GGUF files (numbering is ggml's, which the
// file format fixes), and their block geometry. Quantized types pack
// `block_size` elements into `type_size` bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::kernels {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

// What the CPU kernels do with a type.
enum class Kernel : uint8_t {
  None,     // can be stored and read, not computed with
  F32Only,  // matmul expands it to f32 (F32, F16, BF16)
  Int8,     // matmul also dots it against int8 activations (the quantized types below)
};

struct DTypeTraits {
  std::string_view name;
  uint32_t block_size = 0;  // elements per block (0: no such type)
  uint32_t type_size = 0;   // bytes per block
  Kernel kernel = Kernel::None;
};

// The one table of type traits, indexed by type id: names, block geometry and
// what the kernels compute with. Everything that lists types reads it.
constexpr uint32_t kMaxTypeId = 43;
namespace detail {
constexpr std::array<DTypeTraits, kMaxTypeId> make_type_table() {
  std::array<DTypeTraits, kMaxTypeId> t{};
  auto set = [&](DType d, std::string_view n, uint32_t b, uint32_t s, Kernel k = Kernel::None) {
    t[static_cast<uint32_t>(d)] = DTypeTraits{n, b, s, k};
  };
  set(DType::F32, "F32", 1, 4, Kernel::F32Only);
  set(DType::F16, "F16", 1, 2, Kernel::F32Only);
  set(DType::BF16, "BF16", 1, 2, Kernel::F32Only);
  set(DType::Q8_0, "Q8_0", 32, 34, Kernel::Int8);
  set(DType::Q4_0, "Q4_0", 32, 18, Kernel::Int8);
  set(DType::Q5_0, "Q5_0", 32, 22, Kernel::Int8);
  set(DType::Q4_K, "Q4_K", 256, 144, Kernel::Int8);
  set(DType::Q5_K, "Q5_K", 256, 176, Kernel::Int8);
  set(DType::Q6_K, "Q6_K", 256, 210, Kernel::Int8);
  set(DType::MXFP4, "MXFP4", 32, 17, Kernel::Int8);
  set(DType::F64, "F64", 1, 8);
  set(DType::I8, "I8", 1, 1);
  set(DType::I16, "I16", 1, 2);
  set(DType::I32, "I32", 1, 4);
  set(DType::I64, "I64", 1, 8);
  set(DType::Q4_1, "Q4_1", 32, 20, Kernel::Int8);
  set(DType::Q5_1, "Q5_1", 32, 24, Kernel::Int8);
  set(DType::Q8_1, "Q8_1", 32, 36);
  set(DType::Q2_K, "Q2_K", 256, 84, Kernel::Int8);
  set(DType::Q3_K, "Q3_K", 256, 110, Kernel::Int8);
  set(DType::Q8_K, "Q8_K", 256, 292);
  set(DType::IQ2_XXS, "IQ2_XXS", 256, 66, Kernel::Int8);
  set(DType::IQ2_XS, "IQ2_XS", 256, 74, Kernel::Int8);
  set(DType::IQ3_XXS, "IQ3_XXS", 256, 98, Kernel::Int8);
  set(DType::IQ1_S, "IQ1_S", 256, 50, Kernel::Int8);
  set(DType::IQ4_NL, "IQ4_NL", 32, 18, Kernel::Int8);
  set(DType::IQ3_S, "IQ3_S", 256, 110, Kernel::Int8);
  set(DType::IQ2_S, "IQ2_S", 256, 82, Kernel::Int8);
  set(DType::IQ4_XS, "IQ4_XS", 256, 136, Kernel::Int8);
  set(DType::IQ1_M, "IQ1_M", 256, 56, Kernel::Int8);
  set(DType::TQ1_0, "TQ1_0", 256, 54);
  set(DType::TQ2_0, "TQ2_0", 256, 66);
  set(DType::NVFP4, "NVFP4", 64, 36);
  set(DType::Q1_0, "Q1_0", 128, 18);
  set(DType::Q2_0, "Q2_0", 64, 18);
  return t;
}
}  // namespace detail
inline constexpr std::array<DTypeTraits, kMaxTypeId> kTypeTable = detail::make_type_table();

// Traits of a type id read from a file; nullopt for ids that no ggml version
// defines (or that were removed from the format, e.g. Q4_0_4_4).
std::optional<DTypeTraits> dtype_traits(uint32_t id);
constexpr const DTypeTraits& traits(DType t) { return kTypeTable.at(static_cast<uint32_t>(t)); }  // known-valid ids
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// The weight types the matmul kernels compute with (Kernel::F32Only or Int8),
// in table order, and their names joined by ", " (for messages).
std::vector<DType> matmul_types();
std::string matmul_type_names();

// Bytes of a row of `n` elements; nullopt when n is not a multiple of the block size.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

}  // namespace moelsp::kernels
