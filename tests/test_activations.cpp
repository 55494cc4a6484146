// The int8-activation quantizers (kernels::quantize_acts) against the scalar
// reference (ref::quantize_row_q8 / ref::quantize_row_q8_k), bit for bit, at
// every ISA level this CPU runs: a matmul's result must not depend on which
// quantizer the level picked. The inputs include the cases where a vector
// quantizer can go wrong: several values of the largest magnitude with
// different signs (the first one sets the sign of the scale), products that
// land exactly on .5 (half to even for Q8_K, away from zero for Q8), all
// zeros, and huge and tiny magnitudes.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/isa.h"
#include "kernels/matmul.h"

using namespace moelsp::kernels;

namespace {

std::vector<std::vector<float>> cases(int64_t cols) {
  std::vector<std::vector<float>> out;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float scale : {1.0f, 1e-30f, 3e30f}) {
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& v : x) v = nd(rng) * scale;
    out.push_back(x);
  }
  out.emplace_back(size_t(cols), 0.0f);  // all zeros: d = 0, every q 0
  // Ties for the largest magnitude: −m at 5 (the first), +m at 9 (the same
  // 16-value vector) and at 37, per block.
  std::vector<float> tie(static_cast<size_t>(cols));
  for (float& v : tie) v = nd(rng) * 0.1f;
  for (int64_t b = 0; b < cols / 256; ++b)
    tie[size_t(b * 256 + 5)] = -2.5f, tie[size_t(b * 256 + 9)] = tie[size_t(b * 256 + 37)] = 2.5f;
  out.push_back(tie);
  // Exact halves: max 127 gives scale 1 (Q8_K: −1), so k + 0.5 rounds by the rule.
  std::vector<float> halves(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) halves[size_t(i)] = float(i % 64) - 31.5f;
  for (int64_t b = 0; b < cols / 32; ++b) halves[size_t(b * 32)] = 127.0f;
  out.push_back(halves);
  // The largest magnitude in the last lane of a block.
  std::vector<float> last(static_cast<size_t>(cols));
  for (float& v : last) v = nd(rng);
  for (int64_t b = 0; b < cols / 256; ++b) last[size_t(b * 256 + 255)] = -9.0f;
  out.push_back(last);
  return out;
}

}  // namespace

TEST_CASE("activation quantizers give the reference's blocks bit for bit at every ISA level") {
  const Isa was = isa_level();
  constexpr int64_t cols = 1024;
  const auto xs = cases(cols);
  for (Isa level : {Isa::Avx2, Isa::Avx512Vnni}) {
    if (level > detected_isa()) {
      WARN("this CPU cannot run " << isa_name(level) << "; its quantizers are not checked here");
      continue;
    }
    set_isa(level);
    INFO("ISA " << isa_name(level));
    for (size_t c = 0; c < xs.size(); ++c) {
      INFO("case " << c);
      QuantizedActs got;
      quantize_acts(xs[c].data(), cols, 1, cols, ActBlocks::Q8K, got);
      std::vector<BlockQ8K> want(size_t(cols / 256));
      ref::quantize_row_q8_k(xs[c].data(), want.data(), cols);
      REQUIRE(got.q8k.size() >= want.size());
      for (size_t b = 0; b < want.size(); ++b) {
        INFO("Q8_K block " << b);
        CHECK(std::memcmp(&got.q8k[b].d, &want[b].d, sizeof(float)) == 0);
        CHECK(std::memcmp(got.q8k[b].q, want[b].q, sizeof(want[b].q)) == 0);
        CHECK(std::memcmp(got.q8k[b].bsums, want[b].bsums, sizeof(want[b].bsums)) == 0);
      }
      QuantizedActs got8;
      quantize_acts(xs[c].data(), cols, 1, cols, ActBlocks::Q8, got8);
      std::vector<BlockQ8> want8(size_t(cols / 32));
      ref::quantize_row_q8(xs[c].data(), want8.data(), cols);
      REQUIRE(got8.q8.size() >= want8.size());
      for (size_t b = 0; b < want8.size(); ++b) {
        INFO("Q8 block " << b);
        CHECK(std::memcmp(&got8.q8[b], &want8[b], sizeof(BlockQ8)) == 0);
      }
    }
  }
  set_isa(was);
}
