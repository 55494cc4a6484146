// What constrained decoding costs (engine/grammar.h):
//
//   moelsp_bench_grammar [--model M.gguf] [--tokens N] [--json OUT]
//
// 1. The vocabulary mask on a 151,665-token byte-level BPE vocabulary (the
//    size of Qwen2.5/Qwen3's): the pieces of the deepseek-llm (102,400) and
//    starcoder (49,152) vocabularies in tests/data/vocab, topped up with
//    concatenations of two of them — no Qwen vocabulary ships in the
//    repository. The grammar is a JSON Schema of a coding agent's tool
//    arguments; the mask is timed at every byte of a document of it (in
//    keys, in string values, in numbers, between members), and one token's
//    check (the sampled token's: the common case) alongside.
// 2. With --model: decode tokens/s with and without a schema, greedy, the
//    same number of tokens each way. With a trained model the sampled token
//    is nearly always allowed and costs one check; with random weights it
//    is nearly always rejected and every token pays a mask (the worst case).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/json_schema.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

using namespace moelsp;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "command":{"type":"string"},"timeout":{"type":"integer","minimum":1},
  "description":{"type":"string","maxLength":200},"run_in_background":{"type":"boolean"},
  "files":{"type":"array","items":{"type":"string"},"maxItems":8},
  "mode":{"enum":["read","write","append"]}},"required":["command"],"additionalProperties":false})";

const char* kDoc =
    R"({"command": "grep -rn \"TODO\" src/ | head -20", "timeout": 120000, "description": "Find the TODOs in src",)"
    R"( "files": ["src/main.cpp", "src/util.h"], "mode": "read"})";

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::vector<std::string> pieces_of(const std::string& path) {
  const auto file = gguf::File::open(path);
  const auto tok = Tokenizer::from_gguf(file);
  std::vector<std::string> out;
  for (size_t i = 0; i < tok->n_vocab(); ++i) out.push_back(tok->piece(TokenId(i), true));
  return out;
}

std::vector<std::string> big_vocabulary(size_t n) {
  const std::string dir = std::string(MOELSP_SOURCE_DIR) + "/tests/data/vocab/";
  std::vector<std::string> v = pieces_of(dir + "ggml-vocab-deepseek-llm.gguf");
  std::set<std::string> seen(v.begin(), v.end());
  for (auto& p : pieces_of(dir + "ggml-vocab-starcoder.gguf"))
    if (v.size() < n && seen.insert(p).second) v.push_back(p);
  std::mt19937_64 rng(1);
  const size_t base = v.size();
  while (v.size() < n) {
    std::string p = v[rng() % base] + v[rng() % base];
    if (p.size() <= 16 && seen.insert(p).second) v.push_back(std::move(p));
  }
  return v;
}

nlohmann::json bench_mask() {
  const auto t_vocab = Clock::now();
  const std::vector<std::string> pieces = big_vocabulary(151665);
  std::vector<bool> eog(pieces.size(), false);
  eog[0] = true;
  const VocabTrie trie(pieces, eog);
  const double trie_ms = ms_since(t_vocab);
  const auto g = compile_gbnf(assist::json_schema_to_gbnf(kSchema));
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  std::vector<double> mask_ms, check_us;
  std::vector<size_t> counts;
  const std::string doc = kDoc;
  std::mt19937_64 rng(2);
  for (size_t i = 0; i <= doc.size(); ++i) {
    auto t = Clock::now();
    counts.push_back(m.mask(trie, allowed));
    mask_ms.push_back(ms_since(t));
    // One token's check, as the sampler makes it: a random allowed token.
    std::vector<int32_t> ok;
    for (size_t id = 0; id < allowed.size(); ++id)
      if (allowed[id]) ok.push_back(int32_t(id));
    const int32_t pick = ok[rng() % ok.size()];
    t = Clock::now();
    for (int k = 0; k < 100; ++k) (void)m.allows(trie, pick);
    check_us.push_back(ms_since(t) * 10);  // per check, in µs
    if (i < doc.size() && !m.accept(doc.substr(i, 1))) throw std::runtime_error("the document does not match");
  }
  const auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    return nlohmann::json{{"mean", sum / double(v.size())}, {"p50", v[v.size() / 2]}, {"max", v.back()}};
  };
  const nlohmann::json out = {{"vocabulary", pieces.size()},
                              {"trie_nodes", trie.nodes.size()},
                              {"trie_build_ms", trie_ms},
                              {"states", mask_ms.size()},
                              {"mask_ms", stats(mask_ms)},
                              {"check_us", stats(check_us)},
                              {"allowed_min", *std::min_element(counts.begin(), counts.end())},
                              {"allowed_max", *std::max_element(counts.begin(), counts.end())}};
  fmt::print("mask over {} tokens ({} trie nodes, built in {:.0f} ms), {} states of a tool-arguments document:\n",
             pieces.size(), trie.nodes.size(), trie_ms, mask_ms.size());
  fmt::print("  mask   mean {:.2f} ms  p50 {:.2f} ms  max {:.2f} ms  ({}..{} tokens allowed)\n",
             out["mask_ms"]["mean"].get<double>(), out["mask_ms"]["p50"].get<double>(),
             out["mask_ms"]["max"].get<double>(), out["allowed_min"].get<size_t>(), out["allowed_max"].get<size_t>());
  fmt::print("  check  mean {:.2f} µs  p50 {:.2f} µs  max {:.2f} µs  (one sampled token)\n",
             out["check_us"]["mean"].get<double>(), out["check_us"]["p50"].get<double>(),
             out["check_us"]["max"].get<double>());
  return out;
}

nlohmann::json bench_decode(Engine& engine, const std::string& path, int tokens, bool sampled) {
  Request req;
  req.prompt = "Run the tests. Arguments of the Bash tool as JSON: ";
  req.max_tokens = tokens;
  req.sampling = SamplingParams::greedy();
  if (sampled) {  // temperature 1 over the whole vocabulary: a random model's every token is a guess
    req.sampling.temperature = 1.0f;
    req.sampling.top_k = 0;
    req.sampling.top_p = 1.0f;
    req.sampling.min_p = 0.0f;
    req.sampling.seed = 7;
  }
  engine.submit(req).wait();  // warm-up: weights paged in, the prompt cached
  Request with = req;
  with.constraint.grammar = compile_gbnf(assist::json_schema_to_gbnf(kSchema));
  // Alternating runs, the median of each: a 2-core machine's decode speed
  // drifts by several percent between runs.
  std::vector<double> free_tps, schema_tps;
  int n = 0, masked = 0;
  for (int round = 0; round < 5; ++round) {
    const Result c = engine.submit(with).wait();
    n = c.timings.n_generated;
    masked = c.timings.n_masked;
    Request without = req;
    without.max_tokens = std::max(1, n);
    without.ignore_eos = true;
    const Result f = engine.submit(without).wait();
    schema_tps.push_back(c.timings.generate_tps());
    free_tps.push_back(f.timings.generate_tps());
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double tf = median(free_tps), ts = median(schema_tps);
  const nlohmann::json out = {{"model", path},    {"tokens", n},      {"tps_free", tf},    {"tps_schema", ts},
                              {"ratio", ts / tf}, {"masked", masked}, {"sampled", sampled}};
  fmt::print(
      "decode {} ({} tokens, {}, median of 5): free {:.1f} tokens/s, under the schema {:.1f} tokens/s "
      "({:.1f} %; {} of the tokens rejected and drawn again from a mask)\n",
      path, n, sampled ? "sampled at temperature 1" : "greedy", tf, ts, 100 * ts / tf, masked);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moelsp_bench_grammar: the cost of constrained decoding"};
  std::string model, json_out;
  int tokens = 128;
  app.add_option("--model", model, "Also measure decode with and without a schema on this GGUF");
  app.add_option("--tokens", tokens, "Tokens to decode each way");
  app.add_option("--json", json_out, "Write the figures as JSON");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json out = {{"mask", bench_mask()}};
  if (!model.empty()) {
    auto m = std::shared_ptr<Model>(Model::load(model, {}));
    Engine engine(m, {.n_ctx = 2048});
    out["decode"] = {bench_decode(engine, model, tokens, false), bench_decode(engine, model, tokens, true)};
  }
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
