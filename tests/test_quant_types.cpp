// The block types beyond the first references: Q4_1, Q5_1, Q2_K, Q3_K,
// IQ4_NL, IQ4_XS and the i-quants (IQ1_S … IQ3_S). Their decoders against
// llama.cpp's dequantization of real blocks (tests/data/quant-blocks: rows
// that llama-quantize wrote, with ggml's to_float output), the int8 kernels on
// those blocks, and our quantizers for Q4_1, Q5_1, Q2_K and Q3_K.
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "kernels/types.h"
#include "test_data.h"

using namespace moelsp::kernels;

namespace {
std::vector<Isa> supported_isas() {  // every ISA level this CPU can run, from generic up
  std::vector<Isa> out;
  for (Isa l : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni})
    if (l <= detected_isa()) out.push_back(l);
  return out;
}

struct Golden {
  DType type;
  int64_t rows, cols;
  std::string blocks;         // rows × row_bytes
  std::vector<float> values;  // rows × cols, ggml's dequantization
};

std::vector<Golden> load_goldens() {
  const auto index = nlohmann::json::parse(moelsp::test::read_file(moelsp::test::data_path("quant-blocks/index.json")));
  std::vector<Golden> out;
  for (const auto& e : index) {
    Golden g;
    const auto t = dtype_from_name(e["type"].get<std::string>());
    REQUIRE(t);
    REQUIRE(uint32_t(*t) == e["type_id"].get<uint32_t>());
    g.type = *t;
    g.rows = e["rows"], g.cols = e["row_elements"];
    g.blocks = moelsp::test::read_file(moelsp::test::data_path("quant-blocks/" + e["blocks"].get<std::string>()));
    REQUIRE(g.blocks.size() == size_t(g.rows) * *row_bytes(g.type, uint64_t(g.cols)));
    const std::string f =
        moelsp::test::read_file(moelsp::test::data_path("quant-blocks/" + e["f32"].get<std::string>()));
    REQUIRE(f.size() == size_t(g.rows * g.cols) * 4);
    g.values.resize(size_t(g.rows * g.cols));
    std::memcpy(g.values.data(), f.data(), f.size());
    out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

// Tolerance: bit-exact (the f32 arithmetic is ggml's, in its order).
TEST_CASE("every new block type decodes real llama-quantize blocks bit-exactly as llama.cpp does") {
  const auto goldens = load_goldens();
  CHECK(goldens.size() == 13);
  for (const Golden& g : goldens) {
    INFO(dtype_name(g.type));
    CHECK(matmul_supports(g.type));
    std::vector<float> y(g.values.size());
    ref::dequantize_row(g.type, g.blocks.data(), y.data(), g.rows * g.cols);
    CHECK(std::memcmp(y.data(), g.values.data(), y.size() * 4) == 0);
    for (Isa level : supported_isas()) {  // the optimized entry point too
      set_isa(level);
      std::vector<float> z(g.values.size());
      dequantize_row(g.type, g.blocks.data(), z.data(), g.rows * g.cols);
      CHECK(std::memcmp(z.data(), g.values.data(), z.size() * 4) == 0);
    }
    set_isa(detected_isa());
  }
}

// Tolerance as test_kernels' int8 test: |opt − ref| ≤ 1e-5 · Σ|w·x| + 1e-6 against the
// scalar reference on the same quantized activations.
TEST_CASE("int8 kernels on real blocks of every new type match the reference, decode and prompt sizes") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  set_activations(Activations::Int8);
  for (const Golden& g : load_goldens())
    for (Isa level : supported_isas()) {
      if (level < Isa::Avx2) continue;
      set_isa(level);
      const MatView w{g.blocks.data(), g.type, g.cols, g.rows, *row_bytes(g.type, uint64_t(g.cols))};
      for (int64_t m : {1, 3, 8, 19}) {
        std::vector<float> x(size_t(m * g.cols)), y(size_t(m * g.rows)), yr(y.size());
        for (auto& v : x) v = nd(rng);
        matmul({w, x.data(), g.cols, m, y.data(), g.rows, 0, g.rows});
        ref::matmul_int8({w, x.data(), g.cols, m, yr.data(), g.rows, 0, g.rows});
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < g.rows; ++r) {
            double mag = 0;
            for (int64_t c = 0; c < g.cols; ++c)
              mag += std::fabs(double(g.values[size_t(r * g.cols + c)]) * x[size_t(i * g.cols + c)]);
            INFO(dtype_name(g.type) << " " << isa_name(level) << " m=" << m << " row " << r << " input " << i);
            REQUIRE(std::fabs(y[size_t(i * g.rows + r)] - yr[size_t(i * g.rows + r)]) <= 1e-5 * mag + 1e-6);
          }
      }
    }
  set_isa(detected_isa());
}

namespace {
std::vector<float> gaussian(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

double rel_rmse(DType t, const std::vector<float>& x, std::vector<float>& y) {
  std::vector<uint8_t> q(size_t(*row_bytes(t, x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  ref::dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  double e2 = 0, x2 = 0;
  for (size_t i = 0; i < x.size(); ++i) e2 += double(x[i] - y[i]) * (x[i] - y[i]), x2 += double(x[i]) * x[i];
  return std::sqrt(e2 / x2);
}
}  // namespace

// Q4_1 / Q5_1 (llama.cpp's rule): every value within half a step d/2 = (max −
// min)/(2·levels) of its block, plus the fp16 rounding of d and m.
TEST_CASE("Q4_1 and Q5_1 quantizers stay within half a step") {
  const int64_t n = 32 * 64;
  const auto x = gaussian(n, 4);
  std::vector<float> y(x.size());
  for (DType t : {DType::Q4_1, DType::Q5_1}) {
    std::vector<uint8_t> q(size_t(*row_bytes(t, uint64_t(n))));
    quantize_row(t, x.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    const float levels = t == DType::Q4_1 ? 15 : 31;
    for (int64_t b = 0; b < n; b += 32) {
      float mn = x[size_t(b)], mx = mn;
      for (int j = 0; j < 32; ++j) mn = std::min(mn, x[size_t(b + j)]), mx = std::max(mx, x[size_t(b + j)]);
      for (int j = 0; j < 32; ++j) {
        INFO(dtype_name(t) << " element " << b + j);
        REQUIRE(std::fabs(x[size_t(b + j)] - y[size_t(b + j)]) <=
                (mx - mn) / levels * 0.5f * 1.01f + (std::fabs(mn) + mx - mn) * 2e-3f);
      }
    }
  }
}

// Q2_K and Q3_K search their group scales: the check is the error as a whole
// on Gaussian data (measured relative RMSE 0.287 for Q2_K and 0.151 for Q3_K;
// bounds ~10% above), the order of the bit widths (Q2_K > Q3_K > Q4_K), and an all-zero
// super-block kept exactly.
TEST_CASE("Q2_K and Q3_K quantizers: error levels, ordering, zeros") {
  const int64_t n = 256 * 32;
  auto x = gaussian(n, 8);
  for (int64_t i = 512; i < 768; ++i) x[size_t(i)] = 0;
  std::vector<float> y(x.size());
  const double q2 = rel_rmse(DType::Q2_K, x, y);
  for (int64_t i = 512; i < 768; ++i) CHECK(y[size_t(i)] == 0.0f);
  const double q3 = rel_rmse(DType::Q3_K, x, y);
  for (int64_t i = 512; i < 768; ++i) CHECK(y[size_t(i)] == 0.0f);
  const double q4 = rel_rmse(DType::Q4_K, x, y);
  WARN("relative RMSE: Q2_K " << q2 << ", Q3_K " << q3 << ", Q4_K " << q4);
  CHECK(q2 < 0.32);
  CHECK(q3 < 0.17);
  CHECK(q2 > q3);
  CHECK(q3 > q4);
}

// The AVX2 decoders (kernels/cpu/decode_simd.h, internal) against the scalar
// definition: the same bytes and scales, bit for bit, on random blocks (every
// byte pattern is a valid block of these types) and on the real ones.
#include "../kernels/cpu/decode_simd.h"

TEST_CASE("AVX2 block decoders give the scalar decoders' bytes for every new type") {
  if (detected_isa() < Isa::Avx2) {
    WARN("SKIPPED: this CPU has no AVX2");
    return;
  }
  std::mt19937 rng(12);
  const auto goldens = load_goldens();
  for (const Golden& g : goldens)
    blocks::with_decoder(g.type, [&](auto d) {
      using D = decltype(d);
      const size_t bytes = traits(D::kType).type_size;
      std::vector<uint8_t> blk(bytes * 64);
      for (auto& b : blk) b = uint8_t(rng());
      blk.insert(blk.end(), g.blocks.begin(), g.blocks.end());
      for (size_t off = 0; off + bytes <= blk.size(); off += bytes) {
        alignas(32) int8_t q1[D::kElems], q2[D::kElems];
        float s1[D::kElems / D::kGroup], s2[D::kElems / D::kGroup], m1[D::kElems / D::kGroup] = {},
                                                                                   m2[D::kElems / D::kGroup] = {};
        D::decode(blk.data() + off, q1, s1, m1);
        blocks::simd_decode::decode<D>(blk.data() + off, q2, s2, m2);
        INFO(dtype_name(g.type) << " block at byte " << off);
        REQUIRE(std::memcmp(q1, q2, sizeof q1) == 0);
        // Random bytes make NaN scales too; F16C quiets a signaling NaN where the portable conversion keeps it.
        const auto same = [](const float* a, const float* b, size_t n) {
          for (size_t i = 0; i < n; ++i)
            if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
          return true;
        };
        REQUIRE(same(s1, s2, std::size(s1)));
        REQUIRE(same(m1, m2, std::size(m1)));
      }
    });
}
