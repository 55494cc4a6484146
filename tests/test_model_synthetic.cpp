// Models written with our own GGUF writer: a dense llama (no reference file
// has one) in F32, F16, BF16 and Q8_0. Checks the dense path, the weight types
// end to end, and that batch prefill equals one-token-at-a-time decoding. And
// the reference deepseek2 file rewritten with a bad hyperparameter: the error
// names the key.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include <catch2/catch.hpp>

#include "../engine/layers/mla.h"
#include "../engine/model/weights.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/model_info.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/quantize.h"
#include "kernels/repack.h"
#include "test_data.h"

using namespace moelsp;

namespace {

std::vector<uint8_t> encode(kernels::DType t, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  };
  switch (t) {
    case kernels::DType::F32: put(v.data(), v.size() * 4); break;
    case kernels::DType::F16:
      for (float x : v) {
        uint16_t h = kernels::fp32_to_fp16(x);
        put(&h, 2);
      }
      break;
    case kernels::DType::BF16:
      for (float x : v) {
        uint16_t h = kernels::fp32_to_bf16(x);
        put(&h, 2);
      }
      break;
    case kernels::DType::Q8_0:
      for (size_t b = 0; b < v.size(); b += 32) {
        float amax = 0;
        for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
        const float d = amax / 127.0f;
        uint16_t dh = kernels::fp32_to_fp16(d);
        put(&dh, 2);
        for (size_t i = 0; i < 32; ++i) {
          const int8_t q = int8_t(std::lround(d > 0 ? v[b + i] / d : 0));
          put(&q, 1);
        }
      }
      break;
    case kernels::DType::Q4_K: {
      const size_t rb = *kernels::row_bytes(t, 256);
      out.resize(v.size() / 256 * rb);
      for (size_t b = 0; b < v.size() / 256; ++b)
        kernels::quantize_row(t, v.data() + 256 * b, out.data() + b * rb, 256);
      break;
    }
    default: FAIL("type");
  }
  return out;
}

// A 2-layer dense llama with the llama-spm vocabulary.
std::string write_dense_llama(kernels::DType t, const std::string& path, int d = 64, int ff = 96) {
  const auto vocab = gguf::File::open(test::data_path("vocab/ggml-vocab-llama-spm.gguf"));
  gguf::Writer w;
  w.set("general.architecture", "llama");
  const int layers = 2, heads = 4, kv = 2, n_vocab = 32000;
  w.set("llama.embedding_length", uint32_t(d));
  w.set("llama.block_count", uint32_t(layers));
  w.set("llama.feed_forward_length", uint32_t(ff));
  w.set("llama.attention.head_count", uint32_t(heads));
  w.set("llama.attention.head_count_kv", uint32_t(kv));
  w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set("llama.context_length", uint32_t(256));
  w.set("llama.rope.freq_base", 10000.0f);
  for (const auto& [k, v] : vocab.metadata())
    if (k.starts_with("tokenizer.")) w.set(k, v);
  std::mt19937 rng(11);
  auto mat = [&](const std::string& name, int cols, int rows, kernels::DType type) {
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(cols)));
    std::vector<float> v(size_t(cols) * size_t(rows));
    for (auto& x : v) x = nd(rng);
    w.add_tensor(name, type, {uint64_t(cols), uint64_t(rows)}, encode(type, v));
  };
  auto norm = [&](const std::string& name) {
    std::vector<float> v(size_t(d), 1.0f);
    w.add_tensor(name, kernels::DType::F32, {uint64_t(d)}, encode(kernels::DType::F32, v));
  };
  mat("token_embd.weight", d, n_vocab, t);
  norm("output_norm.weight");
  for (int l = 0; l < layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight");
    norm(b + "ffn_norm.weight");
    mat(b + "attn_q.weight", d, d, t);
    mat(b + "attn_k.weight", d, d / heads * kv, t);
    mat(b + "attn_v.weight", d, d / heads * kv, t);
    mat(b + "attn_output.weight", d, d, t);
    mat(b + "ffn_gate.weight", d, ff, t);
    mat(b + "ffn_up.weight", d, ff, t);
    mat(b + "ffn_down.weight", ff, d, t);
  }
  w.write(path);
  return path;
}

std::vector<float> run(Model& m, const std::vector<TokenId>& ids, bool batch) {
  const size_t nv = size_t(m.config().n_vocab);
  auto cache = m.new_cache(64);
  std::vector<float> out(ids.size() * nv);
  if (batch) m.forward(ids, *cache, out.data(), true);
  else
    for (size_t i = 0; i < ids.size(); ++i) m.forward({&ids[i], 1}, *cache, out.data() + i * nv, false);
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i) mx = std::max(mx, double(std::fabs(a[i] - b[i])));
  return mx;
}

}  // namespace

TEST_CASE("dense llama in F32/F16/BF16/Q8_0: batch equals incremental, types agree with F32") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::vector<TokenId> ids{1, 450, 4996, 17354, 1701, 432, 29889, 13, 822, 285};
  std::vector<float> ref;
  for (auto t : {kernels::DType::F32, kernels::DType::F16, kernels::DType::BF16, kernels::DType::Q8_0}) {
    const std::string path = (dir / ("moelsp_dense_" + std::string(kernels::dtype_name(t)) + ".gguf")).string();
    auto m = Model::load(write_dense_llama(t, path), {.threads = 2});
    CHECK(m->config().n_expert == 0);
    const auto batch = run(*m, ids, true), inc = run(*m, ids, false);
    INFO(kernels::dtype_name(t));
    CHECK(max_diff(batch, inc) < 1e-4);
    if (t == kernels::DType::F32) ref = batch;
    // quantization noise only: logits have rms ≈ 0.1–1 here
    const double tol = t == kernels::DType::F32 ? 0 : t == kernels::DType::F16 ? 5e-3 : 0.1;
    CHECK(max_diff(batch, ref) <= tol);
    std::filesystem::remove(path);
  }
}

// Dense weights repacked at load (kernels/repack.h) against the same file read
// as plain rows: only the f32 summation order differs (tolerance: 1e-3 on
// logits of rms ~1; a wrong row, scale or min moves them by far more).
TEST_CASE("dense llama in Q4_K: repacked dense weights give the plain rows' logits") {
  const std::string path = (std::filesystem::temp_directory_path() / "moelsp_dense_repack.gguf").string();
  write_dense_llama(kernels::DType::Q4_K, path, 256, 512);
  const std::vector<TokenId> ids{1, 450, 4996, 17354, 1701, 432, 29889, 13, 822, 285};
  const kernels::Isa best = kernels::detected_isa();
  const size_t before = repacked_weight_bytes();
  auto packed = Model::load(path, {.threads = 2});
  if (best < kernels::Isa::Avx512Vnni) {
    CHECK(repacked_weight_bytes() == before);
    WARN("this CPU has no AVX-512 VNNI: nothing is repacked, the repacked kernel is not exercised here");
  } else {
    // q, k, v, o, gate, up, down of 2 layers and the (tied) output head, each 1/36 larger than its rows.
    const size_t q4k = *kernels::row_bytes(kernels::DType::Q4_K, 256),
                 q4k_ff = *kernels::row_bytes(kernels::DType::Q4_K, 512);
    const size_t plain = 2 * (256 * q4k * 2 + 128 * q4k * 2 + 512 * q4k * 2 + 256 * q4k_ff) + 32000 * q4k;
    CHECK(repacked_weight_bytes() - before == plain / 36 * 37);
  }
  kernels::set_isa(kernels::Isa::Avx2);  // loaded under AVX2: plain rows
  auto plain = Model::load(path, {.threads = 2});
  kernels::set_isa(best);
  const auto a = run(*packed, ids, true), b = run(*plain, ids, true);
  CHECK(max_diff(a, b) < 1e-3);
  CHECK(max_diff(a, run(*packed, ids, false)) < 1e-4);  // batch equals incremental
  packed.reset();
  plain.reset();
  std::filesystem::remove(path);
}

namespace {

// A reference model (deepseek2 unless named) rewritten with one metadata key dropped or replaced.
std::string rewrite_reference(const std::string& path, const std::string& key, std::optional<gguf::Value> value,
                              const std::string& model = "deepseek2-lite-ref") {
  const auto src = gguf::File::open(test::data_path("reference/" + model + ".gguf"));
  gguf::Writer w;
  for (const auto& [k, v] : src.metadata())
    if (k != key) w.set(k, v);
  if (value) w.set(key, *value);
  for (const auto& t : src.tensors()) w.add_tensor(t.name, t.type, t.shape, src.tensor_data(t));
  w.write(path);
  return path;
}

}  // namespace

TEST_CASE("a missing or invalid architecture hyperparameter is refused, naming its key") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "moelsp_bad_hparam.gguf").string();
  // The unmodified file loads: the failures below come from the key alone.
  CHECK_NOTHROW(Model::load(rewrite_reference(path, "general.name", std::nullopt), {.threads = 1}));

  rewrite_reference(path, "deepseek2.attention.kv_lora_rank", std::nullopt);
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("deepseek2.attention.kv_lora_rank"));
  const ModelSummary s = summarize(gguf::File::open(path));
  CHECK_FALSE(s.supported);
  CHECK(std::any_of(s.problems.begin(), s.problems.end(), [](const std::string& p) {
    return p == "missing hyperparameter deepseek2.attention.kv_lora_rank";
  }));

  rewrite_reference(path, "deepseek2.expert_gating_func", gguf::Value(uint32_t(7)));
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("expert_gating_func 7"));

  rewrite_reference(path, "deepseek2.expert_group_count", gguf::Value(uint32_t(3)));  // 3 does not divide the experts
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("cannot form 3 groups"));

  // glm4moe: the MTP block count, the expert width and the partial rotary width.
  CHECK_NOTHROW(Model::load(rewrite_reference(path, "general.name", std::nullopt, "glm4moe-ref"), {.threads = 1}));
  rewrite_reference(path, "glm4moe.expert_feed_forward_length", std::nullopt, "glm4moe-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("glm4moe.expert_feed_forward_length"));
  CHECK_FALSE(summarize(gguf::File::open(path)).supported);
  rewrite_reference(path, "glm4moe.nextn_predict_layers", gguf::Value(uint32_t(5)), "glm4moe-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("glm4moe.nextn_predict_layers 5"));
  rewrite_reference(path, "glm4moe.rope.dimension_count", gguf::Value(uint32_t(48)), "glm4moe-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("glm4moe.rope.dimension_count 48"));

  // glm-dsa: the indexer's shape and its layer types.
  CHECK_NOTHROW(Model::load(rewrite_reference(path, "general.name", std::nullopt, "glm-dsa-ref"), {.threads = 1}));
  rewrite_reference(path, "glm-dsa.attention.indexer.top_k", std::nullopt, "glm-dsa-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("glm-dsa.attention.indexer.top_k"));
  CHECK_FALSE(summarize(gguf::File::open(path)).supported);
  gguf::Array two{gguf::ValueType::BOOL, {gguf::Value(true), gguf::Value(false)}};
  rewrite_reference(path, "glm-dsa.attention.indexer.types", gguf::Value(two), "glm-dsa-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("indexer.types has 2 entries for 5 layers"));

  // gpt-oss: the sliding window.
  CHECK_NOTHROW(Model::load(rewrite_reference(path, "general.name", std::nullopt, "gpt-oss-ref"), {.threads = 1}));
  rewrite_reference(path, "gpt-oss.attention.sliding_window", std::nullopt, "gpt-oss-ref");
  CHECK_THROWS_WITH(Model::load(path, {.threads = 1}), Catch::Contains("gpt-oss.attention.sliding_window"));
  CHECK_FALSE(summarize(gguf::File::open(path)).supported);
  std::filesystem::remove(path);
}

TEST_CASE("split-layout MLA with F16 attn_k_b: the plain form's transposed copy agrees with the absorbed form") {
  // A prompt from scratch runs MLA's plain form, which expands the latents
  // through k_up, a transposed copy of attn_k_b made at load (F16 here: the
  // file's type); one token at a time runs the absorbed form, which reads
  // attn_k_b as stored. Equal logits say the copy is the transpose.
  const auto src = gguf::File::open(test::data_path("reference/deepseek2-v3-ref.gguf"));
  gguf::Writer w;
  for (const auto& [k, v] : src.metadata()) w.set(k, v);
  int converted = 0;
  for (const auto& t : src.tensors()) {
    const auto data = src.tensor_data(t);
    if (t.name.ends_with("attn_k_b.weight") || t.name.ends_with("attn_v_b.weight")) {
      REQUIRE(t.type == kernels::DType::F32);
      std::vector<float> v(data.size() / 4);
      std::memcpy(v.data(), data.data(), data.size());
      w.add_tensor(t.name, kernels::DType::F16, t.shape, encode(kernels::DType::F16, v));
      ++converted;
    } else {
      w.add_tensor(t.name, t.type, t.shape, data);
    }
  }
  REQUIRE(converted > 0);
  const std::string path = (std::filesystem::temp_directory_path() / "moelsp_mla_f16_kb.gguf").string();
  w.write(path);
  auto m = Model::load(path, {.threads = 2});
  const std::vector<TokenId> ids{32013, 2219, 1097, 12445, 7, 569, 1371, 8, 507, 185, 315, 967};
  const auto batch = run(*m, ids, true), inc = run(*m, ids, false);
  CHECK(max_diff(batch, inc) < 1e-4);
  std::filesystem::remove(path);
}

// The split layout's transposed copy itself: a quantized attn_k_b becomes
// Q8_0 rows holding its transpose (within Q8_0's rounding: 1/254 of each 32
// values' largest), an F16 one F16 rows holding it exactly.
TEST_CASE("split-layout MLA: k_up is attn_k_b transposed (Q8_0 from a quantized file, exact from F16)") {
  const int d = 64, heads = 2, nope = 32, rope = 32, lora = 64, v = 32;
  ModelConfig c;
  c.n_embd = d, c.n_head = heads, c.n_head_kv = 1, c.kv_lora_rank = lora, c.qk_nope = nope, c.qk_rope = rope;
  c.head_dim_k = nope + rope, c.head_dim_v = v;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (auto t : {kernels::DType::Q8_0, kernels::DType::F16}) {
    gguf::Writer w;
    w.set("general.architecture", "deepseek2");
    auto put = [&](const std::string& name, std::vector<uint64_t> shape, kernels::DType type) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      std::vector<float> x(n);
      for (auto& e : x) e = nd(rng);
      w.add_tensor(name, type, shape, encode(type, x));
    };
    put("blk.0.attn_q.weight", {uint64_t(d), uint64_t(heads * (nope + rope))}, kernels::DType::F32);
    put("blk.0.attn_kv_a_mqa.weight", {uint64_t(d), uint64_t(lora + rope)}, kernels::DType::F32);
    put("blk.0.attn_kv_a_norm.weight", {uint64_t(lora)}, kernels::DType::F32);
    put("blk.0.attn_output.weight", {uint64_t(heads * v), uint64_t(d)}, kernels::DType::F32);
    put("blk.0.attn_k_b.weight", {uint64_t(nope), uint64_t(lora), uint64_t(heads)}, t);
    put("blk.0.attn_v_b.weight", {uint64_t(lora), uint64_t(v), uint64_t(heads)}, kernels::DType::F32);
    const std::string path = (std::filesystem::temp_directory_path() / "moelsp_mla_kb.gguf").string();
    w.write(path);
    const auto f = gguf::File::open(path);
    const layers::MlaWeights L = layers::load_mla(WeightLoader(f), c, 0);
    INFO(kernels::dtype_name(t));
    REQUIRE(L.k_up.size() == size_t(heads));
    const bool vnni = kernels::isa_level() >= kernels::Isa::Avx512Vnni;
    CHECK(L.k_up[0].type == (t == kernels::DType::F16 || !vnni ? kernels::DType::F16 : kernels::DType::Q8_0));
    // The file's rows (k_absorb itself may be repacked: kernels/repack.h).
    const Weight kb = WeightLoader(f).get("blk.0.attn_k_b.weight", {nope, lora, heads});
    double worst = 0;
    for (int h = 0; h < heads; ++h) {
      std::vector<float> up(static_cast<size_t>(lora)), ab(static_cast<size_t>(nope));
      std::vector<float> absorb(static_cast<size_t>(lora * nope));  // [lora][nope]
      for (int r = 0; r < lora; ++r) {
        kernels::dequantize_row(kb.m.type, kb.slice(h).row(r), ab.data(), nope);
        std::copy(ab.begin(), ab.end(), absorb.begin() + r * nope);
      }
      for (int j = 0; j < nope; ++j) {
        kernels::dequantize_row(L.k_up[size_t(h)].type, L.k_up[size_t(h)].row(j), up.data(), lora);
        for (int b = 0; b < lora; b += 32) {
          float amax = 0;
          for (int r = b; r < b + 32; ++r) amax = std::max(amax, std::fabs(absorb[size_t(r * nope + j)]));
          for (int r = b; r < b + 32; ++r) {
            const double err = std::fabs(up[size_t(r)] - absorb[size_t(r * nope + j)]);
            worst = std::max(worst, err / std::max(amax, 1e-20f));
          }
        }
      }
    }
    if (t == kernels::DType::F16) CHECK(worst == 0);
    else CHECK(worst <= (vnni ? 1.0 / 254 + 1e-3 : 1e-3));  // Q8_0's rounding and F16 scale, or F16's
    // k_absorb (and v_up) are repacked where the kernels take that layout, and
    // the absorption through them is the file's rows' (the same int8 sums).
    if (t == kernels::DType::Q8_0 && kernels::repack_supported(kb.slice(0))) {
      CHECK(L.k_absorb[0].row_group == kernels::kRepackRows);
      std::vector<float> q(size_t(3 * nope)), y_plain(size_t(3 * lora)), y_rep(size_t(3 * lora));
      for (auto& e : q) e = nd(rng);
      for (int h = 0; h < heads; ++h) {
        kernels::matmul({kb.slice(h), q.data(), nope, 3, y_plain.data(), lora, 0, lora});
        kernels::matmul({L.k_absorb[size_t(h)], q.data(), nope, 3, y_rep.data(), lora, 0, lora});
        for (size_t i = 0; i < y_rep.size(); ++i) CHECK(y_rep[i] == Approx(y_plain[i]).margin(1e-5));
      }
    }
    std::filesystem::remove(path);
  }
}
