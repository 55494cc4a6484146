// Q4_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1 and Q5_1 weights repacked at load (kernels/repack.h): the repacked layout gives
// back every byte, and matmul on it equals the scalar reference within the
// int8 path's tolerance (tests/test_kernels.cpp states it: only the f32
// accumulation order differs) at every ISA level, with the same values for an
// input whatever else shares the call, and bit for bit the plain matrix's
// results under every setting that unpacks it (AVX2, generic, f32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "kernels/types.h"

using namespace moelsp::kernels;

namespace {

// Random rows of a repackable type: every byte random (all value, scale and
// min bit patterns), the fp16 d (and the mins of Q4_K, Q4_1, Q5_1) small and finite.
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> out(size_t(rows) * *row_bytes(t, cols));
  for (auto& v : out) v = uint8_t(rng());
  for (size_t off = 0; off < out.size(); off += traits(t).type_size) {
    const uint16_t d = fp32_to_fp16(0.001f + 0.001f * float(rng() % 16)), dmin = fp32_to_fp16(0.002f);
    std::memcpy(&out[off + (t == DType::Q6_K ? 208 : 0)], &d, 2);  // the others: first
    if (t == DType::Q4_K || t == DType::Q4_1 || t == DType::Q5_1) std::memcpy(&out[off + 2], &dmin, 2);
  }
  return out;
}

struct Repacked {
  std::vector<uint8_t> plain;
  MatView w;  // plain rows
  uint8_t* buf = nullptr;
  MatView r;  // repacked
  Repacked(DType t, int64_t rows, int64_t cols, std::mt19937& rng) : plain(random_rows(t, rows, cols, rng)) {
    w = {plain.data(), t, cols, rows, *row_bytes(t, cols)};
    buf = static_cast<uint8_t*>(std::aligned_alloc(64, (repacked_bytes(w) + 63) / 64 * 64));
    r = repack(w, buf);
  }
  ~Repacked() { std::free(buf); }
  Repacked(const Repacked&) = delete;
  Repacked& operator=(const Repacked&) = delete;
};

std::vector<float> product(const MatView& w, const std::vector<float>& x, int64_t m, int64_t r0 = 0, int64_t r1 = -1) {
  std::vector<float> y(size_t(m * w.rows), -1.0f);
  matmul({.w = w,
          .x = x.data(),
          .ldx = w.cols,
          .m = m,
          .y = y.data(),
          .ldy = w.rows,
          .row_begin = r0,
          .row_end = r1 < 0 ? w.rows : r1});
  return y;
}

}  // namespace

TEST_CASE("repack: which matrices, and every byte comes back") {
  std::mt19937 rng(5);
  for (DType t : {DType::Q6_K, DType::Q8_0, DType::Q5_0, DType::Q4_0, DType::Q4_1, DType::Q5_1}) {
    INFO(dtype_name(t));
    Repacked q(t, 32, 768, rng);
    CHECK(repacked_bytes(q.w) == q.plain.size());  // the plain blocks' bytes exactly
    std::vector<uint8_t> back(size_t(kRepackRows) * q.w.row_bytes);
    for (int64_t g = 0; g < 2; ++g) {
      unpack_group(q.r, g, back.data());
      CHECK(std::equal(back.begin(), back.end(), q.plain.begin() + g * kRepackRows * int64_t(q.w.row_bytes)));
    }
  }
  Repacked p(DType::Q4_K, 48, 512, rng);
  CHECK(p.r.row_group == kRepackRows);
  CHECK(p.r.rows == 48);
  CHECK(p.r.row_bytes * 48 == repacked_bytes(p.w));
  CHECK(plain_row_bytes(p.r) == p.w.row_bytes);
  CHECK(repacked_bytes(p.w) == size_t(3 * 2) * 2368);
  std::vector<uint8_t> back(size_t(kRepackRows) * p.w.row_bytes);
  CHECK(p.r.row(16) == p.buf + repacked_bytes(p.w) / 3);
  for (int64_t g = 0; g < 3; ++g) {
    unpack_group(p.r, g, back.data());
    CHECK(std::equal(back.begin(), back.end(), p.plain.begin() + g * kRepackRows * int64_t(p.w.row_bytes)));
  }
  MatView w = p.w;
  CHECK(repack_supported(w) == (isa_level() >= Isa::Avx512Vnni));
  w.rows = 40;  // not whole groups
  CHECK_FALSE(repack_supported(w));
  w = p.w;
  w.type = DType::Q5_K;
  w.row_bytes = *row_bytes(DType::Q5_K, w.cols);
  CHECK_FALSE(repack_supported(w));
  CHECK_FALSE(repack_supported(p.r));  // already repacked
}

TEST_CASE("repacked Q4_K and Q6_K matmul: the reference's values at every ISA level, any input count") {
  std::mt19937 rng(9);
  const int64_t rows = 64, cols = 1024;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q5_0, DType::Q4_0, DType::Q4_1, DType::Q5_1})
    for (Isa level : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni}) {
      Repacked p(t, rows, cols, rng);
      if (level > detected_isa()) continue;
      set_isa(level);
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 17, 70}) {
        INFO(dtype_name(t) << " " << isa_name(level) << " m=" << m);
        std::vector<float> x(size_t(m * cols));
        std::normal_distribution<float> nd;
        for (auto& v : x) v = nd(rng);
        std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block (d = 0)
        x[600] = 40.0f;                                     // an outlier sets its block's scale
        for (Activations act : {Activations::Int8, Activations::F32}) {
          set_activations(act);
          const std::vector<float> y = product(p.r, x, m);
          // Threads split rows on whole groups: two calls give the same values.
          std::vector<float> split = product(p.r, x, m, 0, 16), rest = product(p.r, x, m, 16, rows);
          for (int64_t i = 0; i < m; ++i)
            std::copy_n(rest.begin() + i * rows + 16, rows - 16, split.begin() + i * rows + 16);
          CHECK(split == y);
          if (level < Isa::Avx512Vnni || act == Activations::F32) {
            CHECK(product(p.w, x, m) == y);  // unpacked: exactly the plain matrix's results
            continue;
          }
          // The repacked kernel: each input alone gives its values bit for bit.
          for (int64_t i : {int64_t(0), m - 1}) {
            const std::vector<float> xi(x.begin() + i * cols, x.begin() + (i + 1) * cols);
            const std::vector<float> alone = product(p.r, xi, 1);
            CHECK(std::equal(alone.begin(), alone.end(), y.begin() + i * rows));
          }
          // Pre-quantized inputs (as linear() passes them) give the same bits.
          QuantizedActs xq;
          quantize_acts(x.data(), cols, m, cols, act_blocks(t), xq);
          std::vector<float> yp(y.size());
          matmul({.w = p.r,
                  .x = x.data(),
                  .ldx = cols,
                  .m = m,
                  .y = yp.data(),
                  .ldy = rows,
                  .row_begin = 0,
                  .row_end = rows,
                  .xq = &xq});
          CHECK(yp == y);
          // Against the scalar int8 reference on the plain rows: |Δ| ≤ 1e-5 · Σ|w·x| + 1e-6.
          std::vector<float> yr(y.size()), row(static_cast<size_t>(cols));
          ref::matmul_int8({.w = p.w,
                            .x = x.data(),
                            .ldx = cols,
                            .m = m,
                            .y = yr.data(),
                            .ldy = rows,
                            .row_begin = 0,
                            .row_end = rows});
          for (int64_t r = 0; r < rows; ++r) {
            ref::dequantize_row(t, p.w.row(r), row.data(), cols);
            for (int64_t i = 0; i < m; ++i) {
              double mag = 0;
              for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(i * cols + c)]);
              INFO("r=" << r << " i=" << i);
              REQUIRE(std::fabs(y[size_t(i * rows + r)] - yr[size_t(i * rows + r)]) <= 1e-5 * mag + 1e-6);
            }
          }
        }
        set_activations(Activations::Int8);
      }
    }
  set_isa(detected_isa());
}
