// The CUDA backend's kernels against the reference. The block decoders they
// are built on (kernels/hd_blocks.h) are checked on the CPU in every build;
// the device kernels run where a GPU is present and report a skip otherwise.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/convert.h"
#include "kernels/cuda.h"
#include "kernels/hd_blocks.h"
#include "kernels/hd_route.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

using namespace moelsp::kernels;

namespace {

constexpr DType kDeviceTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                  DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// A row of n values: gaussian with a few outliers and zeros, quantized to t.
std::vector<uint8_t> quantized_row(DType t, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  for (int64_t i = 0; i < n; i += 97) x[size_t(i)] *= 20.0f;
  for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) x[size_t(i)] = 0.0f;  // an all-zero block
  std::vector<uint8_t> q(size_t(*row_bytes(t, uint64_t(n))));
  quantize_row(t, x.data(), q.data(), n);
  return q;
}

// Every group of a row through hd::decode_group.
template <hd::Type T>
struct DecodeRow {
  static void run(const uint8_t* row, int64_t n, float* out) {
    const int gpb = hd::block_elems(T) / 32;
    for (int64_t g = 0; g < n / 32; ++g)
      hd::decode_group<T>(row + (g / gpb) * hd::block_bytes(T), int(g % gpb), out + 32 * g);
  }
};

bool same_bits(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; }

bool have_device() {
  std::string why;
  if (!cuda::devices(&why).empty()) return true;
  WARN(std::string("no CUDA device") + (cuda::compiled_in() ? "" : " (built without CUDA)") +
       (why.empty() ? "" : " (" + why + ")") + ": device comparison skipped");
  return false;
}

}  // namespace

// The CUDA build's kernels live in lib/moelsp/libmoelsp_cuda.so, loaded on
// first use (kernels/cuda/loader.cpp): from the build tree here it must load,
// whether or not this machine has a GPU (the plugin links libcudart, which is
// installed wherever nvcc is). A missing or refused plugin names itself.
TEST_CASE("the CUDA plugin loads in a CUDA build") {
  if (!cuda::compiled_in()) {
    WARN("built without CUDA: no plugin to load");
    return;
  }
  std::string why;
  cuda::devices(&why);
  if (const char* env = std::getenv("MOELSP_CUDA_PLUGIN"); env && *env) {
    INFO(why);
    CHECK(why.find("MOELSP_CUDA_PLUGIN") != std::string::npos);
    return;
  }
  INFO(why);
  CHECK(why.find("could not be loaded") == std::string::npos);
}

// Tolerance: bit-exact. The host/device decoders are the reference's f32
// arithmetic in the same order, so on the CPU nothing may differ.
TEST_CASE("host/device block decoders match the reference dequantizer bit for bit") {
  for (uint32_t h = 0; h < 65536; ++h) {
    INFO("half " << h);
    REQUIRE(same_bits(hd::half_to_float(h), fp16_to_fp32(uint16_t(h))));
    REQUIRE(same_bits(hd::bf16_to_float(h), bf16_to_fp32(uint16_t(h))));
  }
  const int64_t n = 256 * 12;
  for (DType t : kDeviceTypes) {
    INFO(dtype_name(t));
    REQUIRE(cuda::device_supports(t));
    const hd::Type ht = *cuda::device_type(t);
    CHECK(hd::block_bytes(ht) == int(traits(t).type_size * (hd::block_elems(ht) / traits(t).block_size)));
    for (unsigned seed = 1; seed <= 3; ++seed) {
      const auto q = quantized_row(t, n, seed);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ref::dequantize_row(t, q.data(), want.data(), n);
      hd::with_type<DecodeRow>(ht, q.data(), n, got.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += !same_bits(want[size_t(i)], got[size_t(i)]);
      CHECK(bad == 0);
    }
  }
  CHECK_FALSE(cuda::device_supports(DType::IQ2_XXS));
}

TEST_CASE("CUDA entry points refuse what they cannot compute, naming it") {
  std::string err;
  std::vector<uint8_t> w(1024);
  std::vector<float> x(256), y(256);
  CHECK_FALSE(cuda::matmul(DType::IQ2_XXS, w.data(), 1, 256, x.data(), 1, y.data(), &err));
  CHECK_FALSE(err.empty());
  err.clear();
  CHECK_FALSE(cuda::dequantize(DType::Q4_K, w.data(), 100, y.data(), &err));  // not whole blocks
  CHECK_FALSE(err.empty());
  if (cuda::devices().empty()) {
    err.clear();
    CHECK_FALSE(cuda::matmul(DType::Q8_0, w.data(), 1, 256, x.data(), 1, y.data(), &err));
    CHECK_THAT(err, Catch::Contains("CUDA"));
  }
}

// Tolerance: within 1e-6 of the value's magnitude. nvcc contracts d·s·q − m·n
// into FMAs where the host does not, one rounding apart.
TEST_CASE("CUDA dequantization matches the reference") {
  if (!have_device()) return;
  const int64_t n = 256 * 64;
  for (DType t : kDeviceTypes) {
    INFO(dtype_name(t));
    const auto q = quantized_row(t, n, 7);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    ref::dequantize_row(t, q.data(), want.data(), n);
    std::string err;
    REQUIRE(cuda::dequantize(t, q.data(), n, got.data(), &err));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      bad += std::fabs(got[size_t(i)] - want[size_t(i)]) > 1e-6f * (1.0f + std::fabs(want[size_t(i)]));
    CHECK(bad == 0);
  }
}

// Tolerance: the decode kernel sums in f32 in another order than the
// reference's double: |Δ| ≤ 1e-4 · Σ|w·x|. The cuBLAS path rounds weights and
// inputs to F16 first: ≤ 2e-3 · Σ|w·x|.
TEST_CASE("CUDA matmul matches the reference, decode kernel and cuBLAS") {
  if (!have_device()) return;
  const int64_t rows = 300, cols = 1024;  // rows not a multiple of the 8 a thread block takes
  for (DType t : kDeviceTypes) {
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = quantized_row(t, cols, unsigned(100 + r));
      w.insert(w.end(), row.begin(), row.end());
    }
    const MatView mv{.data = w.data(), .type = t, .cols = cols, .rows = rows, .row_bytes = size_t(*row_bytes(t, cols))};
    for (int64_t m : {1, 3, 8, 64}) {
      INFO(dtype_name(t) << ", " << m << " inputs");
      std::mt19937 rng(static_cast<unsigned>(m));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(m * cols)), want(static_cast<size_t>(m * rows)),
          got(static_cast<size_t>(m * rows)), absw(static_cast<size_t>(m * rows));
      for (auto& v : x) v = nd(rng);
      ref::matmul({.w = mv,
                   .x = x.data(),
                   .ldx = cols,
                   .m = m,
                   .y = want.data(),
                   .ldy = rows,
                   .row_begin = 0,
                   .row_end = rows});
      // Σ|w·x| per output, for the tolerance.
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        ref::dequantize_row(t, mv.row(r), row.data(), cols);
        for (int64_t i = 0; i < m; ++i) {
          double s = 0;
          for (int64_t c = 0; c < cols; ++c) s += std::fabs(double(row[size_t(c)]) * x[size_t(i * cols + c)]);
          absw[size_t(i * rows + r)] = float(s);
        }
      }
      std::string err;
      REQUIRE(cuda::matmul(t, w.data(), rows, cols, x.data(), m, got.data(), &err));
      const float tol = m <= 8 ? 1e-4f : 2e-3f;
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += !(std::fabs(got[i] - want[i]) <= tol * absw[i] + 1e-6f);
      CHECK(bad == 0);
    }
  }
}

// Tolerances: RMSNorm sums squares in f32 on the device (double here): 1e-5
// relative; RoPE is the same two products and a sum: 1e-6 of the pair's
// magnitude; SwiGLU's expf is within 2 ulp of the host's: 1e-6 relative.
TEST_CASE("CUDA RMSNorm, RoPE and SwiGLU match plain CPU loops") {
  std::string err;
  if (!have_device()) {
    float v = 1.0f;
    CHECK_FALSE(cuda::swiglu(&v, &v, &v, 1, &err));
    CHECK_THAT(err, Catch::Contains("CUDA"));
    return;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto randoms = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng);
    return v;
  };
  SECTION("RMSNorm") {
    const int64_t n = 2048 + 7, m = 5;  // a length that is not a multiple of the block
    const auto x = randoms(n * m), w = randoms(n);
    std::vector<float> y(x.size());
    REQUIRE(cuda::rms_norm(x.data(), w.data(), n, 1e-6f, y.data(), m, &err));
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < n; ++c) ss += double(x[size_t(r * n + c)]) * x[size_t(r * n + c)];
      const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-6);
      int64_t bad = 0;
      for (int64_t c = 0; c < n; ++c) {
        const double want = x[size_t(r * n + c)] * scale * w[size_t(c)];
        bad += std::fabs(y[size_t(r * n + c)] - want) > 1e-5 * (1.0 + std::fabs(want));
      }
      CHECK(bad == 0);
    }
  }
  SECTION("RoPE, adjacent pairs and NeoX halves, on part of each head") {
    const int64_t m = 3, n_heads = 4, head = 128, stride = n_heads * head + 16;  // a token's row is padded
    const int n_pairs = 32, offset = 64;                                         // rotate dims 64..127
    for (const bool neox : {false, true}) {
      INFO("neox " << neox);
      auto x = randoms(m * stride);
      std::vector<float> cs(size_t(m * n_pairs)), sn(cs.size());
      for (int64_t t = 0; t < m; ++t)
        for (int i = 0; i < n_pairs; ++i) {
          const double theta = double(t + 7) * std::pow(10000.0, -2.0 * i / (2.0 * n_pairs));
          cs[size_t(t * n_pairs + i)] = float(std::cos(theta));
          sn[size_t(t * n_pairs + i)] = float(std::sin(theta));
        }
      auto want = x;
      for (int64_t t = 0; t < m; ++t)
        for (int64_t h = 0; h < n_heads; ++h)
          for (int i = 0; i < n_pairs; ++i) {
            float* v = want.data() + t * stride + h * head + offset;
            float* a = neox ? v + i : v + 2 * i;
            float* b = neox ? v + i + n_pairs : v + 2 * i + 1;
            const float c = cs[size_t(t * n_pairs + i)], s = sn[size_t(t * n_pairs + i)], x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
          }
      REQUIRE(cuda::rope(x.data(), m, stride, int(n_heads), head, offset, n_pairs, neox, cs.data(), sn.data(), &err));
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) bad += std::fabs(x[i] - want[i]) > 1e-6f * (1.0f + std::fabs(want[i]));
      CHECK(bad == 0);
    }
  }
  SECTION("SwiGLU") {
    const int64_t n = 100003;
    const auto g = randoms(n), u = randoms(n);
    std::vector<float> y(static_cast<size_t>(n));
    REQUIRE(cuda::swiglu(g.data(), u.data(), y.data(), n, &err));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
      bad += std::fabs(y[size_t(i)] - want) > 1e-6 * (1.0 + std::fabs(want));
    }
    CHECK(bad == 0);
  }
}

// The router's definition (the CPU engine's, checked end to end by the
// reference logits) on cases with known answers.
TEST_CASE("the router's choice: ties to the lower index, group limit, selection bias, norm and scale") {
  hd::RouteParams r;
  std::vector<float> sel(8);
  int chosen[3];
  float weight[3];
  SECTION("equal logits: the lowest indices, renormalized and scaled") {
    r = {.n_expert = 8, .k = 3, .gating = hd::RouteGating::Softmax, .norm = true, .scale = 2.0f};
    std::vector<float> p(8, 0.0f);
    hd::route_token(r, p.data(), nullptr, sel.data(), chosen, weight);
    CHECK(chosen[0] == 0);
    CHECK(chosen[1] == 1);
    CHECK(chosen[2] == 2);
    for (float w : weight) CHECK(w == Approx(2.0 / 3.0).epsilon(1e-6));
  }
  SECTION("only the best group stays") {
    r = {.n_expert = 8, .k = 2, .gating = hd::RouteGating::Sigmoid, .n_group = 4, .n_group_used = 1};
    std::vector<float> p = {5, -5, 1, 1, 0, 0, 4, -4};  // group 1 (1, 1) sums highest
    hd::route_token(r, p.data(), nullptr, sel.data(), chosen, weight);
    CHECK(chosen[0] == 2);
    CHECK(chosen[1] == 3);
    CHECK(weight[0] == Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
  }
  SECTION("the selection bias chooses, the weights stay unbiased") {
    r = {.n_expert = 4, .k = 1, .gating = hd::RouteGating::Softmax};
    std::vector<float> p = {1, 0, 0, 0}, bias = {0, 0, 5, 0};
    hd::route_token(r, p.data(), bias.data(), sel.data(), chosen, weight);
    CHECK(chosen[0] == 2);
    CHECK(weight[0] == Approx(1.0 / (std::exp(1.0) + 3.0)).epsilon(1e-6));
  }
  SECTION("NaN scores (damaged weights) still give k distinct experts") {
    r = {.n_expert = 8, .k = 3, .gating = hd::RouteGating::Softmax, .norm = true};
    std::vector<float> p(8, std::nanf(""));
    p[5] = 1.0f;
    hd::route_token(r, p.data(), nullptr, sel.data(), chosen, weight);
    CHECK(chosen[0] == 0);  // the softmax made every probability NaN
    CHECK(chosen[1] == 1);
    CHECK(chosen[2] == 2);
  }
  SECTION("softmax over the chosen logits") {
    r = {.n_expert = 4, .k = 2, .gating = hd::RouteGating::SoftmaxChosen};
    std::vector<float> p = {0, 3, 1, 2};
    hd::route_token(r, p.data(), nullptr, sel.data(), chosen, weight);
    CHECK(chosen[0] == 1);
    CHECK(chosen[1] == 3);
    CHECK(weight[0] == Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
    CHECK(weight[0] + weight[1] == Approx(1.0).epsilon(1e-6));
  }
}

// Tolerance: the same experts in the same order; weights within 1e-6 (the
// device's expf is within 2 ulp of the host's). Random logits make ties
// closer than that unlikely.
TEST_CASE("CUDA router matches the host's choice") {
  if (!have_device()) return;
  const int64_t m = 300;
  const hd::RouteParams modes[] = {
      {.n_expert = 128, .k = 8, .gating = hd::RouteGating::Softmax, .norm = true},
      {.n_expert = 64,
       .k = 6,
       .gating = hd::RouteGating::Sigmoid,
       .n_group = 8,
       .n_group_used = 4,
       .norm = true,
       .scale = 2.5f},
      {.n_expert = 32, .k = 4, .gating = hd::RouteGating::SoftmaxChosen},
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const auto& r : modes) {
    INFO(r.n_expert << " experts, gating " << int(r.gating));
    std::vector<float> logits(static_cast<size_t>(m * r.n_expert)), bias(static_cast<size_t>(r.n_expert));
    for (auto& v : logits) v = nd(rng);
    for (auto& v : bias) v = 0.1f * nd(rng);
    std::vector<int> want_c(static_cast<size_t>(m * r.k)), got_c(want_c.size());
    std::vector<float> want_w(want_c.size()), got_w(want_c.size()), p = logits, sel(static_cast<size_t>(r.n_expert));
    for (int64_t t = 0; t < m; ++t)
      hd::route_token(r, p.data() + t * r.n_expert, bias.data(), sel.data(), want_c.data() + t * r.k,
                      want_w.data() + t * r.k);
    std::string err;
    REQUIRE(cuda::route(r, logits.data(), m, bias.data(), got_c.data(), got_w.data(), &err));
    CHECK(got_c == want_c);
    int64_t bad = 0;
    for (size_t i = 0; i < got_w.size(); ++i) bad += std::fabs(got_w[i] - want_w[i]) > 1e-6f;
    CHECK(bad == 0);
  }
}
