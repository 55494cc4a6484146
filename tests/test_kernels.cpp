#include <cmath>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/convert.h"
#include "kernels/cuda.h"
#include "kernels/types.h"

using namespace moelsp::kernels;

TEST_CASE("fp16 round-trips every bit pattern through fp32") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    INFO("half 0x" << std::hex << h);
    REQUIRE(fp32_to_fp16(f) == h);
  }
}

TEST_CASE("fp32 → fp16 rounds to nearest even and saturates to inf") {
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f)) == 1.0f);
  CHECK(fp16_to_fp32(fp32_to_fp16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(fp16_to_fp32(fp32_to_fp16(1e6f))));
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to even → 1.
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f + 3 * 0x1p-11f)) == 1.0f + 2 * 0x1p-10f);
  // smallest subnormal
  CHECK(fp16_to_fp32(fp32_to_fp16(0x1p-24f)) == 0x1p-24f);
  CHECK(fp16_to_fp32(fp32_to_fp16(0x1p-26f)) == 0.0f);
}

TEST_CASE("bf16 conversions") {
  CHECK(bf16_to_fp32(fp32_to_bf16(1.5f)) == 1.5f);
  CHECK(bf16_to_fp32(fp32_to_bf16(-3.0f)) == -3.0f);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_fp32(uint16_t(b));
    if (!std::isnan(f)) REQUIRE(fp32_to_bf16(f) == b);
  }
}

TEST_CASE("type traits match the GGUF block geometry") {
  CHECK(traits(DType::Q8_0).block_size == 32);
  CHECK(traits(DType::Q8_0).type_size == 34);
  CHECK(traits(DType::Q4_K).type_size == 144);
  CHECK(traits(DType::Q6_K).type_size == 210);
  CHECK(!dtype_traits(4).has_value());   // Q4_2, removed from the format
  CHECK(!dtype_traits(31).has_value());  // Q4_0_4_4, removed
  CHECK(!dtype_traits(1000).has_value());
  CHECK(row_bytes(DType::Q4_K, 512) == 288u);
  CHECK(!row_bytes(DType::Q4_K, 100).has_value());
  CHECK(dtype_from_name("BF16") == DType::BF16);
}

// Tolerance: bit-exact (any NaN matches any NaN). fp16 → fp32 is exact in both.
TEST_CASE("CUDA fp16 → fp32 matches the reference") {
  if (cuda::devices().empty()) {
    WARN("no CUDA device (or built without CUDA): GPU comparison skipped");
    return;
  }
  std::vector<uint16_t> x(65536);
  for (uint32_t i = 0; i < x.size(); ++i) x[i] = uint16_t(i);
  std::vector<float> ref(x.size()), gpu(x.size());
  ref::fp16_to_fp32(x.data(), ref.data(), x.size());
  std::string err;
  REQUIRE(cuda::fp16_to_fp32(x.data(), gpu.data(), x.size(), &err));
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool same = std::isnan(ref[i]) ? std::isnan(gpu[i]) : std::memcmp(&ref[i], &gpu[i], 4) == 0;
    mismatches += !same;
  }
  CHECK(mismatches == 0);
}
