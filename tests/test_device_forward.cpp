// The device forward pass (engine/device/) against llama.cpp's logits for the
// reference models, on the host emulation of a device in every build and on
// a CUDA GPU where one is present (skipped with a WARN otherwise).
//
// Tolerances: the f32 references' own per-row rules (tests/data/README.md);
// for the quantized files, the dequantized-F32 check (the device computes with
// f32 activations on the file's blocks, as llama.cpp's dequantized run does).
// Hybrid placement (some experts on the CPU) and prefix sharing through the
// device copy of the cache must agree with the all-device pass within 1e-4
// of the logits' scale: the same arithmetic, summed in another order.
#include <cmath>
#include <numeric>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "kernels/cuda.h"
#include "kernels/matmul.h"
#include "reference_data.h"
#include "test_data.h"

using namespace moelsp;
using nlohmann::json;

namespace {

using test::load_ref;
using test::read_f32;
using test::Ref;

// Prompt in one batch, then the 16 teacher-forced decode steps: n_prompt + 16 rows.
std::vector<std::vector<float>> run(Model& m, const Ref& r, KvType kv = KvType::F32) {
  const auto prompt = r.doc["prompt_ids"].get<std::vector<TokenId>>();
  const auto greedy = r.doc["greedy_ids"].get<std::vector<TokenId>>();
  auto cache = m.new_cache(r.n_prompt + 32, kv);
  const size_t nv = size_t(r.n_vocab);
  std::vector<float> all(prompt.size() * nv);
  m.forward(prompt, *cache, all.data(), true);
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i < prompt.size(); ++i) rows.emplace_back(all.begin() + i * nv, all.begin() + (i + 1) * nv);
  for (TokenId t : greedy) {
    rows.emplace_back(nv);
    m.forward({&t, 1}, *cache, rows.back().data(), false);
  }
  return rows;
}

double max_abs(const std::vector<float>& a, const float* b) {
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i) mx = std::max(mx, double(std::fabs(a[i] - b[i])));
  return mx;
}
double rms(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += double(v) * v;
  return std::sqrt(s / double(a.size()));
}

// The f32 reference files: every row within the file's max_abs_diff, argmax where it must match.
void check_f32_rows(const std::string& name, const Ref& r, const std::vector<std::vector<float>>& rows) {
  const auto& tol = r.doc["tolerance"];
  double worst = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const bool pre = int(i) < r.n_prompt;
    const int k = pre ? int(i) : int(i) - r.n_prompt;
    const char* part = pre ? "prefill" : "decode";
    const float* ref = pre ? r.prefill_row(k) : r.decode_row(k);
    const double d = max_abs(rows[i], ref);
    const double limit = tol["max_abs_diff"][part][size_t(k)];
    INFO(name << " " << part << " row " << k << ": max |Δ| " << d << " (limit " << limit << ")");
    CHECK(d <= limit);
    if (tol["top1_must_match"][part][size_t(k)].get<bool>())
      CHECK(std::max_element(rows[i].begin(), rows[i].end()) - rows[i].begin() ==
            std::max_element(ref, ref + r.n_vocab) - ref);
    worst = std::max(worst, d);
  }
  WARN(name << " on the device: worst max |Δlogit| vs llama.cpp " << worst);
}

// The quantized files: their dequantized-F32 check (the ids it lists, per row RMS).
void check_dequantized_rows(const std::string& name, const Ref& r, const std::vector<std::vector<float>>& rows) {
  const auto& dq = r.doc["dequant_f32_check"];
  const auto ids = dq["ids"].get<std::vector<int>>();
  const auto rms_full = dq["row_rms_full"].get<std::vector<double>>();
  const auto ref = read_f32(test::data_path("reference/" + dq["file"].get<std::string>()));
  REQUIRE(ref.size() == rows.size() * ids.size());
  double worst = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    double mx = 0;
    for (size_t j = 0; j < ids.size(); ++j)
      mx = std::max(mx, double(std::fabs(rows[i][size_t(ids[j])] - ref[i * ids.size() + j])));
    INFO(name << " dequant check row " << i << ": max |Δ| " << mx);
    CHECK(mx <= dq["tolerance"]["abs_per_rms"].get<double>() * std::max(1.0, rms_full[i]));
    worst = std::max(worst, mx);
  }
  WARN(name << " on the device: dequantized-F32 check worst max |Δlogit| " << worst);
}

// Two runs of the same tokens agree within 1e-4 of the logits' RMS.
void check_close(const std::string& what, const std::vector<std::vector<float>>& a,
                 const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(what << " row " << i);
    CHECK(max_abs(a[i], b[i].data()) <= 1e-4 * std::max(1.0, rms(b[i])));
  }
}

bool have_gpu() {
  if (!kernels::cuda::devices().empty()) return true;
  WARN(std::string("no CUDA device") + (kernels::cuda::compiled_in() ? "" : " (built without CUDA)") +
       ": the CUDA forward pass comparison skipped");
  return false;
}

LoadOptions on(ComputeBackend b, int experts = -1) {
  return {.threads = 2, .backend = b, .gpu = 0, .gpu_experts_per_layer = experts};
}

void check_reference(const std::string& name, bool quantized) {
  const Ref r = load_ref(name);
  for (ComputeBackend b : {ComputeBackend::Emulated, ComputeBackend::Cuda}) {
    if (b == ComputeBackend::Cuda && !have_gpu()) continue;
    INFO("backend " << to_string(b));
    auto m = Model::load(test::data_path("reference/" + name + ".gguf"), on(b));
    REQUIRE(m->backend() == b);
    const auto rows = run(*m, r);
    // Routing statistics count every token, whether its experts were grouped
    // on the host (the prompt) or picked on the device (decode).
    const ModelConfig& c = m->config();
    for (int il = 0; il < c.n_layer; ++il) {
      if (!c.is_moe_layer(il)) continue;
      const auto& tokens = m->moe_stats()[size_t(il)].expert_tokens;
      INFO("layer " << il);
      CHECK(std::accumulate(tokens.begin(), tokens.end(), int64_t(0)) == int64_t(rows.size()) * c.n_expert_used);
    }
    if (quantized) check_dequantized_rows(name, r, rows);
    else check_f32_rows(name, r, rows);
    // f16 KV rows, as the server runs: the same top-1 on every decode row.
    const auto rows16 = run(*m, r, KvType::F16);
    for (size_t i = size_t(r.n_prompt); i < rows.size(); ++i)
      CHECK(std::max_element(rows16[i].begin(), rows16[i].end()) - rows16[i].begin() ==
            std::max_element(rows[i].begin(), rows[i].end()) - rows[i].begin());
  }
}

}  // namespace

TEST_CASE("device forward pass: qwen3moe (GQA, q/k norm, NeoX RoPE) matches llama.cpp") {
  check_reference("qwen3moe-ref", false);
}
TEST_CASE("device forward pass: Mixtral matches llama.cpp") { check_reference("mixtral-ref", false); }
TEST_CASE("device forward pass: deepseek2 (MLA from attn_kv_b, YaRN, shared experts) matches llama.cpp") {
  check_reference("deepseek2-lite-ref", false);
}
TEST_CASE("device forward pass: deepseek2 (q_lora, split k_b/v_b, sigmoid + bias, groups) matches llama.cpp") {
  check_reference("deepseek2-v3-ref", false);
}
TEST_CASE("device forward pass: glm4moe (biases, partial NeoX RoPE, dense lead layer) matches llama.cpp") {
  check_reference("glm4moe-ref", false);
}
TEST_CASE("device forward pass: qwen3moe Q4_K_M and Q8_0 meet the dequantized-F32 check") {
  check_reference("qwen3moe-quant-ref-Q4_K_M", true);
  check_reference("qwen3moe-quant-ref-Q8_0", true);
}

TEST_CASE("device forward pass: gpt-oss (sinks, sliding window, expert biases, clamped SwiGLU, MXFP4 as F16)") {
  check_reference("gpt-oss-ref", true);
}

TEST_CASE("device forward pass: hybrid placement computes the other experts on the CPU, same logits") {
  kernels::set_activations(kernels::Activations::F32);  // the CPU's experts in f32, as the device's
  for (const std::string name : {"qwen3moe-quant-ref-Q4_K_M", "deepseek2-v3-ref", "gpt-oss-ref"}) {
    const Ref r = load_ref(name);
    auto all = Model::load(test::data_path("reference/" + name + ".gguf"), on(ComputeBackend::Emulated));
    const int n_exp = all->config().n_expert;
    for (int resident : {0, n_exp / 2}) {
      INFO(name << ": " << resident << " of " << n_exp << " experts per layer on the device");
      auto hybrid = Model::load(test::data_path("reference/" + name + ".gguf"), on(ComputeBackend::Emulated, resident));
      CHECK(hybrid->device_experts_per_layer() == resident);
      CHECK_THAT(hybrid->device_description(), Catch::Contains("the rest on the CPU"));
      check_close(name + " hybrid", run(*hybrid, r), run(*all, r));
      // Residency follows the routing: with half the experts resident, the
      // most used ones move in between passes (and the logits above stayed
      // the all-device pass's through those moves).
      const ExpertMetrics em = hybrid->expert_metrics();
      CHECK(em.cache_experts == resident * (all->config().n_layer - all->config().n_layer_dense_lead));
      CHECK(em.layers.back().routed > 0);
      if (resident > 0) {
        CHECK(em.cache_swaps > 0);
        CHECK(em.device_bytes_moved > 0);
        CHECK(em.cache_hit_rate() > 0.0);
      } else {
        CHECK(em.cache_hit_rate() == 0.0);
      }
      WARN(name << ": " << resident << " of " << n_exp << " experts resident, hit rate " << em.cache_hit_rate() << ", "
                << em.cache_swaps << " swaps");
    }
  }
  kernels::set_activations(kernels::Activations::Int8);
}

TEST_CASE("device forward pass: sequences sharing cached blocks read the device's copy of them") {
  // Two sequences of one pool: the second maps the first's full blocks and a
  // copy of its partly filled one (BlockPool::copy_block → the device's
  // rows), then both decode in one batch; each must give the logits it gets alone.
  const std::string name = "deepseek2-lite-ref";
  const Ref r = load_ref(name);
  auto m = Model::load(test::data_path("reference/" + name + ".gguf"), on(ComputeBackend::Emulated));
  const auto prompt = r.doc["prompt_ids"].get<std::vector<TokenId>>();
  const size_t nv = size_t(r.n_vocab);
  BlockPool pool(m->kv_layout(KvType::F16, 4), 64, m->fingerprint());
  KvSequence a(pool), b(pool);
  std::vector<float> la(nv), lb(nv);
  REQUIRE(a.reserve(int(prompt.size())));
  Batch ba;
  ba.add(a, prompt);
  m->forward(ba, la.data());
  a.clear();  // its blocks join the prefix cache (the last, partly filled one too)
  const std::vector<TokenId> extended(prompt.begin(), prompt.end() - 1);
  const int mapped = b.map_prefix(extended, int(extended.size()));
  CHECK(mapped > 0);
  const std::span<const TokenId> rest = std::span(extended).subspan(size_t(mapped));
  if (!rest.empty()) {
    REQUIRE(b.reserve(int(rest.size())));
    Batch bb;
    bb.add(b, rest);
    m->forward(bb, lb.data());
  }
  // The last prompt token on the mapped sequence vs a fresh cache.
  REQUIRE(b.reserve(1));
  Batch bl;
  bl.add(b, std::span(prompt).last(1));
  m->forward(bl, lb.data());
  auto fresh = m->new_cache(r.n_prompt + 4, KvType::F16);
  std::vector<float> lf(nv);
  m->forward(prompt, *fresh, lf.data(), false);
  CHECK(max_abs(lb, lf.data()) <= 1e-4 * std::max(1.0, rms(lf)));
}

TEST_CASE("device forward pass: several sequences in one batch give each the logits it gets alone") {
  // Prompt chunks and decode steps of three sequences riding in one pass
  // (continuous batching): per-sequence offsets into q/k/v and the output,
  // each its own block table, MoE over the tokens of all three.
  for (const std::string name : {"qwen3moe-ref", "deepseek2-v3-ref", "gpt-oss-ref"}) {
    INFO(name);
    const Ref r = load_ref(name);
    auto m = Model::load(test::data_path("reference/" + name + ".gguf"), on(ComputeBackend::Emulated));
    const auto prompt = r.doc["prompt_ids"].get<std::vector<TokenId>>();
    const size_t nv = size_t(r.n_vocab);
    BlockPool pool(m->kv_layout(KvType::F16, 4), 64, m->fingerprint(), false);
    const std::vector<std::vector<TokenId>> toks = {{prompt.begin(), prompt.begin() + 9},
                                                    {prompt.begin() + 3, prompt.begin() + 8},
                                                    {prompt.begin() + 1, prompt.end()}};
    // Alone, each in a cache of its own.
    std::vector<std::vector<float>> alone;
    for (const auto& t : toks) {
      auto cache = m->new_cache(64, KvType::F16);
      alone.emplace_back(nv * t.size());
      m->forward(t, *cache, alone.back().data(), true);
    }
    // Together: the first two tokens of each, then the rest of each, all logits.
    KvSequence s0(pool), s1(pool), s2(pool);
    KvSequence* seqs[] = {&s0, &s1, &s2};
    std::vector<std::vector<float>> got(3);
    for (size_t from : {size_t(0), size_t(2)}) {
      Batch b;
      for (size_t i = 0; i < 3; ++i) {
        const size_t to = from == 0 ? 2 : toks[i].size();
        REQUIRE(seqs[i]->reserve(int(to - from)));
        b.add(*seqs[i], std::span(toks[i]).subspan(from, to - from), true);
      }
      std::vector<float> rows(nv * size_t(b.logit_rows()));
      m->forward(b, rows.data());
      size_t at = 0;
      for (size_t i = 0; i < 3; ++i) {
        const size_t cnt = size_t(b.seqs[i].n_tokens);
        got[i].insert(got[i].end(), rows.begin() + at * nv, rows.begin() + (at + cnt) * nv);
        at += cnt;
      }
    }
    for (size_t i = 0; i < 3; ++i) {
      INFO("sequence " << i);
      REQUIRE(got[i].size() == alone[i].size());
      CHECK(max_abs(got[i], alone[i].data()) <= 1e-4 * std::max(1.0, rms(alone[i])));
    }
  }
}

TEST_CASE("device forward pass: what it cannot run is refused by name") {
  CHECK_THROWS_WITH(Model::load(test::data_path("reference/glm-dsa-ref.gguf"), on(ComputeBackend::Emulated)),
                    Catch::Contains("sparse attention"));
  if (kernels::cuda::devices().empty())
    CHECK_THROWS_WITH(Model::load(test::data_path("reference/mixtral-ref.gguf"), on(ComputeBackend::Cuda)),
                      Catch::Contains("CUDA device 0 unavailable"));
  auto m = Model::load(test::data_path("reference/qwen3moe-quant-ref-Q8_0.gguf"), on(ComputeBackend::Emulated));
  auto q8 = m->new_cache(8, KvType::Q8_0);
  std::vector<float> logits(size_t(m->config().n_vocab));
  const TokenId t = 1;
  CHECK_THROWS_WITH(m->forward({&t, 1}, *q8, logits.data(), false), Catch::Contains("device KV cache"));
}
