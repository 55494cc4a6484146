// Single-thread matmul throughput per weight type, input count and ISA level:
//
//   moelsp_bench_kernels [--rows 768] [--cols 2048] [--ms 1,4,16,32,64] [--types Q8_0,Q4_K,Q4_Kx16,Q8_0x16,...]
//   [--ms-per-case 300]
//                        [--metric gmacs|ms|gbs]
//
// The default shape is one Qwen3-30B-A3B expert's gate projection; m is the
// number of inputs (1 = decode; 16-32 = an expert's share of a 512-token
// prompt). Prints GMAC/s (weights × inputs per second; --metric ms: milliseconds
// per matmul call, gbs: weight bytes read per second, GB/s) for every ISA level
// this CPU supports, so the AVX-512 VNNI and AVX2 variants can be compared on
// one machine; timed in thread CPU time. Kernel work only: the weights stay in cache for small shapes,
// so m = 1 here measures compute, not the memory bandwidth decode is bound by
// (a shape larger than the caches, e.g. --rows 8192 --cols 4096, streams them).
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "kernels/repack.h"

using namespace moelsp::kernels;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// This thread's CPU time: on a shared virtual machine, time the host gives to
// other guests (steal) would otherwise count against the kernel.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Random blocks with a sane fp16 scale, for the types we do not quantize (the
// i-quants, whose quantizers need an importance matrix): every byte pattern is
// a valid block of them, and speed does not depend on the values.
std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> w(*row_bytes(t, uint64_t(cols)) * size_t(rows));
  for (auto& b : w) b = uint8_t(rng());
  const uint16_t d = 0x1400;  // fp16 ≈ 0.001
  const size_t block = traits(t).type_size;
  for (size_t off = 0; off < w.size(); off += block) {
    if (t == DType::IQ1_M) {  // its scale is the top nibbles of the four u16 scale words at byte 48
      for (int k = 0; k < 4; ++k)
        w[off + 49 + 2 * size_t(k)] = uint8_t((w[off + 49 + 2 * size_t(k)] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
      continue;
    }
    std::memcpy(&w[off], &d, 2);  // the i-quants keep d first
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-thread matmul throughput per weight type, input count and ISA level"};
  int64_t rows = 768, cols = 2048;
  std::string ms_s = "1,4,16,32,64", types_s = "Q8_0,Q4_0,Q4_K,MXFP4,Q6_K,F16", metric = "gmacs";
  double ms_per_case = 300;
  app.add_option("--rows", rows, "Weight rows")->capture_default_str();
  app.add_option("--cols", cols, "Weight columns (the contracted dimension; a multiple of 256)")->capture_default_str();
  app.add_option("--ms", ms_s, "Input counts, comma-separated")->capture_default_str();
  app.add_option("--types", types_s, "Weight types, comma-separated")->capture_default_str();
  app.add_option("--ms-per-case", ms_per_case, "Time spent per measurement")->capture_default_str();
  app.add_option("--metric", metric, "gmacs (GMAC/s), ms (per matmul call) or gbs (weight GB/s)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gmacs", "ms", "gbs"}));
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> wf(size_t(rows * cols));
  for (auto& v : wf) v = nd(rng) * 0.02f;
  std::vector<Isa> levels;
  for (Isa l : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni})
    if (l <= detected_isa()) levels.push_back(l);

  std::printf("%-6s %5s", "type", "m");
  for (Isa l : levels) std::printf(" %14s", std::string(isa_name(l)).c_str());
  const char* unit = metric == "ms" ? "ms per matmul" : metric == "gbs" ? "weight GB/s" : "GMAC/s";
  std::printf("   (%s, 1 thread, %lld x %lld)\n", unit, (long long)rows, (long long)cols);
  for (const std::string& tn : split(types_s)) {
    // Q4_Kx16, Q8_0x16, …: the type repacked as the engine loads it (kernels/repack.h).
    const bool repacked = tn.size() > 3 && tn.ends_with("x16");
    const auto t = dtype_from_name(repacked ? tn.substr(0, tn.size() - 3) : tn);
    if (!t || !matmul_supports(*t) || !row_bytes(*t, uint64_t(cols))) {
      std::fprintf(stderr, "unsupported type or shape: %s\n", tn.c_str());
      return 2;
    }
    const size_t rb = *row_bytes(*t, uint64_t(cols));
    std::vector<uint8_t> w(rb * size_t(rows));
    if (quantize_supports(*t))
      for (int64_t r = 0; r < rows; ++r) quantize_row(*t, wf.data() + r * cols, w.data() + size_t(r) * rb, cols);
    else w = random_blocks(*t, rows, cols, rng);
    MatView mv{w.data(), *t, cols, rows, rb};
    std::vector<uint8_t> packed;
    if (repacked) {
      if (rows % kRepackRows) {
        std::fprintf(stderr, "%s needs rows in groups of %d\n", tn.c_str(), kRepackRows);
        return 2;
      }
      packed.resize(repacked_bytes(mv) + 64);
      mv = repack(mv, packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64);
    }
    for (const std::string& m_s : split(ms_s)) {
      const int64_t m = std::stoll(m_s);
      std::vector<float> x(size_t(m * cols)), y(size_t(m * rows));
      for (auto& v : x) v = nd(rng);
      std::printf("%-6s %5lld", tn.c_str(), (long long)m);
      for (Isa l : levels) {
        set_isa(l);
        const MatmulArgs a{mv, x.data(), cols, m, y.data(), rows, 0, rows};
        matmul(a);  // warm-up
        int64_t reps = 0;
        const double t0 = thread_seconds();
        double s = 0;
        do {
          matmul(a);
          ++reps;
          s = thread_seconds() - t0;
        } while (s * 1e3 < ms_per_case);
        const double per_call = s / double(reps);
        const double v = metric == "ms"    ? per_call * 1e3
                         : metric == "gbs" ? double(rb) * double(rows) / per_call / 1e9
                                           : double(rows * cols * m) / per_call / 1e9;
        std::printf(" %14.*f", metric == "ms" ? 3 : 2, v);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
  set_isa(detected_isa());
  return 0;
}
