// The moelsp executable's inspect / tokenize / detokenize, run as a user would.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_data.h"

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args, bool with_stderr = false, const std::string& stdin_text = "") {
  std::string cmd = std::string(MOELSP_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  if (!stdin_text.empty()) cmd = "printf '" + stdin_text + "' | " + cmd;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("inspect --json describes a deepseek2 MoE model") {
  const auto r = run("inspect --json " + moelsp::test::data_path("reference/deepseek2-lite-ref.gguf"));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["architecture"] == "deepseek2");
  CHECK(j["tokenizer"]["model"] == "gpt2");
  CHECK(j["tokenizer"]["pre"] == "deepseek-coder");
  CHECK(j["tokenizer"]["n_vocab"] == 32256);
  CHECK(j["parameters"]["moe"] == true);
  CHECK(j["parameters"]["active"].get<uint64_t>() < j["parameters"]["total"].get<uint64_t>());
  CHECK(j["hyperparameters"].contains("expert_count"));
  CHECK(j["tensors"].size() == 54);
  CHECK(j["supported"] == true);
  CHECK(j["problems"].empty());
}

TEST_CASE("inspect says what is missing from a vocabulary-only file") {
  const auto r = run("inspect --json " + moelsp::test::data_path("vocab/ggml-vocab-llama-spm.gguf"));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["supported"] == false);
  CHECK(!j["problems"].empty());
  const auto t = run("inspect " + moelsp::test::data_path("reference/mixtral-ref.gguf"));
  CHECK(t.code == 0);
  CHECK_THAT(t.out, Catch::Contains("architecture:  llama") && Catch::Contains("supported:     yes"));
}

TEST_CASE("inspect of a non-GGUF file fails cleanly") {
  const auto r = run("inspect " + moelsp::test::data_path("vocab/README.md"));
  CHECK(r.code == 1);
  CHECK(r.out.empty());
}

TEST_CASE("tokenize --ids and detokenize round trip") {
  const std::string model = moelsp::test::data_path("vocab/ggml-vocab-deepseek-coder.gguf");
  const auto r = run("tokenize -m " + model + " -p 'def f(x):' --ids");
  REQUIRE(r.code == 0);
  REQUIRE(!r.out.empty());
  CHECK(r.out.find('\n') == r.out.size() - 1);  // one line
  const std::string ids = r.out.substr(0, r.out.size() - 1);
  const auto d = run("detokenize -m " + model + " " + ids);
  CHECK(d.code == 0);
  CHECK(d.out == "def f(x):\n");
  const auto bad = run("detokenize -m " + model + " 12 banana");
  CHECK(bad.code == 1);
}

namespace {
std::string ids_arg(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}
}  // namespace

TEST_CASE("generate --tokens --greedy --ids reproduces llama.cpp's greedy ids") {
  const auto j =
      nlohmann::json::parse(moelsp::test::read_file(moelsp::test::data_path("reference/deepseek2-v3-ref.json")));
  const auto r = run("generate -m " + moelsp::test::data_path("reference/deepseek2-v3-ref.gguf") + " --tokens '" +
                     ids_arg(j["prompt_ids"].get<std::vector<int>>()) + "' -n 16 --greedy --ids --ignore-eos -t 2");
  REQUIRE(r.code == 0);
  CHECK(r.out == ids_arg(j["greedy_ids"].get<std::vector<int>>()) + "\n");
}

TEST_CASE("generate from text streams to stdout and reports tokens/s on stderr") {
  const auto r = run(
      "generate -m " + moelsp::test::data_path("reference/qwen3moe-ref.gguf") + " -p 'def main():' -n 8 --seed 1 -t 2",
      true);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("tokens/s") && Catch::Contains("prompt:") && Catch::Contains("generated:"));
  const auto bad = run("generate -m /nonexistent.gguf -p x", true);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Catch::Contains("cannot open"));
}

TEST_CASE("logits writes llama.cpp-layout rows, batch and incremental") {
  const auto j = nlohmann::json::parse(moelsp::test::read_file(moelsp::test::data_path("reference/mixtral-ref.json")));
  const auto ids = j["prompt_ids"].get<std::vector<int>>();
  const std::string ref = moelsp::test::read_file(moelsp::test::data_path("reference/mixtral-ref.prefill.f32"));
  for (const char* mode : {"", " --incremental"}) {
    const std::string out = "/tmp/moelsp_test_logits.f32";
    const auto r = run("logits -m " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " --tokens '" +
                       ids_arg(ids) + "' -o " + out + mode + " -t 2");
    REQUIRE(r.code == 0);
    const std::string got = moelsp::test::read_file(out);
    REQUIRE(got.size() == ref.size());
    double mx = 0;
    for (size_t i = 0; i < got.size() / 4; ++i) {
      float a, b;
      std::memcpy(&a, got.data() + 4 * i, 4);
      std::memcpy(&b, ref.data() + 4 * i, 4);
      mx = std::max(mx, double(std::fabs(a - b)));
    }
    INFO("mode" << mode);
    CHECK(mx < 1e-3);
  }
}

TEST_CASE("generate --json-schema and --grammar constrain the output, a bad one is refused by name") {
  const std::string model = moelsp::test::data_path("reference/qwen3moe-ref.gguf");
  auto r = run("generate -m " + model +
               " -p 'Data:' -n 300 --temp 1 -s 3 -j "
               "'{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
               "\"n\":{\"type\":\"integer\"}},\"required\":[\"ok\",\"n\"]}'");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);  // random weights, yet JSON of the schema
  CHECK(j["ok"].is_boolean());
  CHECK(j["n"].is_number_integer());
  r = run("generate -m " + model + " -p 'x' -n 50 --grammar 'root ::= \"yes\" | \"no\"'");
  CHECK(r.code == 0);
  CHECK((r.out == "yes\n" || r.out == "no\n"));
  r = run("generate -m " + model + " -p 'x' --grammar 'root ::= nothing'", true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("'nothing' is used but never defined"));
}

TEST_CASE("perplexity runs over a text file") {
  const auto r = run("perplexity -m " + moelsp::test::data_path("reference/qwen3moe-ref.gguf") + " -f " +
                     moelsp::test::data_path("vocab/ggml-vocab-gpt-2.gguf.inp") + " -c 64 -t 2");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("perplexity: "));
}

TEST_CASE("progress goes to stderr only: plain lines when it is not a terminal, nothing with --quiet") {
  namespace fs = std::filesystem;
  const std::string model = moelsp::test::data_path("reference/qwen3moe-ref.gguf");
  const std::string out = "test_cli_progress.gguf";
  auto r = run("quantize " + model + " " + out + " Q8_0", true);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("quantize: done, ") && Catch::Contains("/s)") && !Catch::Contains("\r"));
  r = run("quantize --quiet " + model + " " + out + " Q8_0", true);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, !Catch::Contains("quantize: "));
  fs::remove(out);
  // Perplexity: the windows on stderr, the result alone on stdout.
  const std::string args =
      "perplexity -m " + model + " -f " + moelsp::test::data_path("vocab/ggml-vocab-gpt-2.gguf.inp") + " -c 64 -t 2";
  r = run(args, true);
  CHECK_THAT(r.out, Catch::Contains("perplexity: done, ") && Catch::Contains(" windows in "));
  r = run(args);
  CHECK_THAT(r.out, Catch::StartsWith("perplexity: ") && !Catch::Contains("windows in") && !Catch::Contains("loading"));
  r = run(args + " -q", true);
  CHECK_THAT(r.out, !Catch::Contains("perplexity: done") && !Catch::Contains("loading "));
  // A load that fails says why, with no "done" before it.
  r = run("perplexity -m " + moelsp::test::data_path("vocab/ggml-vocab-gpt-2.gguf.inp") + " -f " +
              moelsp::test::data_path("vocab/ggml-vocab-gpt-2.gguf.inp"),
          true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("moelsp perplexity: ") && !Catch::Contains("done"));
}

// The heatmap is checked as a browser would read it: Python's XML parser
// must accept it, with one cell per (MoE layer, expert) whose count is the
// JSON's and whose share is count / the layer's total.
TEST_CASE("experts writes a well-formed SVG heatmap whose cells match the CSV and JSON counts") {
  namespace fs = std::filesystem;
  const std::string dir = "test_cli_experts";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto r = run("experts -q -m " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " -f " +
                     moelsp::test::data_path("vocab/ggml-vocab-gpt-2.gguf.inp") + " -c 64 -t 2 --svg " + dir +
                     "/e.svg --csv " + dir + "/e.csv --json " + dir + "/e.json");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("perplexity: ") && Catch::Contains("entropy") && Catch::Contains("wrote "));
  std::ifstream jf(dir + "/e.json");
  const auto j = nlohmann::json::parse(jf);
  const int n_expert = j["experts"], k = j["used"];
  REQUIRE(n_expert == 8);
  REQUIRE(!j["layers"].empty());
  // Every token passes every layer and picks k experts: the same total in each.
  const int64_t total = j["layers"][0]["total"];
  CHECK(total > 0);
  CHECK(total % k == 0);
  for (const auto& l : j["layers"]) CHECK(l["total"] == total);
  const std::string check =
      "import json, sys, xml.etree.ElementTree as ET\n"
      "j = json.load(open(sys.argv[2]))\n"
      "cells = {}\n"
      "for e in ET.parse(sys.argv[1]).iter('{http://www.w3.org/2000/svg}rect'):\n"
      "    if 'data-expert' in e.attrib:\n"
      "        cells[(int(e.get('data-layer')), int(e.get('data-expert')))] = e\n"
      "want = {(l['layer'], x): (t, t / l['total']) for l in j['layers'] for x, t in "
      "enumerate(l['tokens'])}\n"
      "assert set(cells) == set(want), (len(cells), len(want))\n"
      "for key, (t, share) in want.items():\n"
      "    assert int(cells[key].get('data-tokens')) == t, key\n"
      "    assert abs(float(cells[key].get('data-share')) - share) < 1e-6, key\n"
      "print('ok', len(cells))\n";
  { std::ofstream(dir + "/check.py") << check; }
  FILE* p = popen(("python3 " + dir + "/check.py " + dir + "/e.svg " + dir + "/e.json 2>&1").c_str(), "r");
  REQUIRE(p);
  std::string py;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) py.append(buf.data(), n);
  CHECK(pclose(p) == 0);
  CHECK(py == fmt::format("ok {}\n", j["layers"].size() * size_t(n_expert)));
  // The CSV: a header and a row per cell, the same counts.
  std::ifstream cf(dir + "/e.csv");
  std::string line;
  std::getline(cf, line);
  CHECK(line == "layer,expert,tokens,share");
  size_t rows = 0;
  while (std::getline(cf, line)) {
    int layer = 0, e = 0;
    long long t = 0;
    REQUIRE(std::sscanf(line.c_str(), "%d,%d,%lld,", &layer, &e, &t) == 3);
    for (const auto& l : j["layers"])
      if (l["layer"] == layer) CHECK(l["tokens"][size_t(e)] == t);
    ++rows;
  }
  CHECK(rows == j["layers"].size() * size_t(n_expert));
  fs::remove_all(dir);
}

TEST_CASE("chat: a model without a template needs --chat-template, with one it answers") {
  const std::string model = moelsp::test::data_path("reference/qwen3moe-ref.gguf");
  const auto no = run("chat -m " + model + " < /dev/null", true);
  CHECK(no.code == 1);
  CHECK_THAT(no.out, Catch::Contains("--chat-template"));
  const auto yes = run("chat -m " + model + " --chat-template chatml -n 4 -s 1 -t 2", false, "hello\\n/exit\\n");
  CHECK(yes.code == 0);
  CHECK(!yes.out.empty());
}

TEST_CASE("bench reports pp, tg, memory and the roofline") {
  const auto r = run("bench -m " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " -p 32 -n 8 -r 1 -t 2");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("pp32") && Catch::Contains("tg8") && Catch::Contains("roofline") &&
                        Catch::Contains("peak RSS") && Catch::Contains("expert activation entropy"));
}

TEST_CASE("bench -d measures pp and tg at a context depth, the roofline counting the KV bytes read") {
  const std::string model = moelsp::test::data_path("reference/mixtral-ref.gguf");
  auto r = run("bench -m " + model + " -p 16 -n 8 -d 64 -r 1 -t 2");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("pp16 @ d64") && Catch::Contains("tg8 @ d64") &&
                        Catch::Contains("MiB of KV at the mean depth") && Catch::Contains("weights alone"));
  r = run("bench -m " + model + " -p 16 -n 8 -d 1000000 -r 1", true);
  CHECK(r.code != 0);  // beyond the model's context: refused, naming it
  CHECK_THAT(r.out, Catch::Contains("-d 1000000") && Catch::Contains("training context"));
}

TEST_CASE("bench --streams reports batched decode against one stream and its bandwidth bound") {
  const auto r =
      run("bench -m " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " -p 0 -n 8 -r 1 -t 2 --streams 1,3");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains(" 1 stream ") && Catch::Contains(" 3 streams") && Catch::Contains("x one stream") &&
                        Catch::Contains("bandwidth bound"));
  // Streams alone (no pp or tg): no empty table, no decode share measured by nothing.
  const auto s =
      run("bench -m " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " -p 0 -n 0 -r 1 -t 2 --streams 1,2");
  CHECK(s.code == 0);
  CHECK_THAT(s.out, Catch::Contains(" 2 streams") && Catch::Contains("x one stream") && Catch::Contains("roofline"));
  CHECK_THAT(s.out, !Catch::Contains("llama.cpp t/s") && !Catch::Contains("decode at"));
}

TEST_CASE("quantize writes loadable files whose logits track the original") {
  // Median per-row cosine against llama.cpp's F32 logits. (Single rows can drop
  // further: these random-weight models have near-tied router scores, and
  // quantization noise flips experts there, as the reference README measures.)
  // mixtral-ref's rows (64) are too short for K-quant blocks; the 256-wide qwen3moe quant reference is
  // requantized from Q8_0 (its logits, llama.cpp's on the Q8_0 file, are the baseline). Plain Q3_K and Q2_K
  // hit this model hard: llama-quantize --pure on the same file gives 0.822 and 0.593 (measured; ours
  // 0.829 and 0.561).
  struct Case {
    std::string model, type;
    double min_cos;
    size_t n_vocab;
  };
  for (const auto& [model, type, min_cos, nv_given] : std::vector<Case>{{"mixtral-ref", "F16", 0.9999, 32000},
                                                                        {"mixtral-ref", "Q8_0", 0.995, 32000},
                                                                        {"mixtral-ref", "Q5_0", 0.97, 32000},
                                                                        {"mixtral-ref", "Q4_0", 0.9, 32000},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q6_K", 0.99, 0},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q4_K_M", 0.95, 0},
                                                                        {"mixtral-ref", "Q4_1", 0.9, 32000},
                                                                        {"mixtral-ref", "Q5_1", 0.97, 32000},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q5_K_M", 0.97, 0},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q3_K_M", 0.9, 0},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q3_K", 0.78, 0},
                                                                        {"qwen3moe-quant-ref-Q8_0", "Q2_K", 0.5, 0},
                                                                        {"mixtral-ref", "MXFP4_MOE", 0.97, 32000}}) {
    const std::string src = moelsp::test::data_path("reference/" + model + ".gguf");
    const auto j =
        nlohmann::json::parse(moelsp::test::read_file(moelsp::test::data_path("reference/" + model + ".json")));
    const auto ids = j["prompt_ids"].get<std::vector<int>>();
    const std::string ref = moelsp::test::read_file(moelsp::test::data_path("reference/" + model + ".prefill.f32"));
    const std::string out = "/tmp/moelsp_test_q_" + model + "_" + type + ".gguf";
    REQUIRE(run("quantize " + src + " " + out + " " + type).code == 0);
    const std::string logits = "/tmp/moelsp_test_q_" + model + "_" + type + ".f32";
    REQUIRE(run("logits -m " + out + " --tokens '" + ids_arg(ids) + "' -o " + logits + " -t 2").code == 0);
    const std::string got = moelsp::test::read_file(logits);
    std::filesystem::remove(out);  // 13 quantized models and their logits: not left in /tmp
    std::filesystem::remove(logits);
    REQUIRE(got.size() == ref.size());
    const size_t nv = nv_given ? nv_given : got.size() / 4 / ids.size();
    std::vector<double> cosines;
    for (size_t r = 0; r < got.size() / 4 / nv; ++r) {
      double dot = 0, na = 0, nb = 0;
      for (size_t i = 0; i < nv; ++i) {
        float a, b;
        std::memcpy(&a, got.data() + 4 * (r * nv + i), 4);
        std::memcpy(&b, ref.data() + 4 * (r * nv + i), 4);
        dot += double(a) * b, na += double(a) * a, nb += double(b) * b;
      }
      cosines.push_back(dot / std::sqrt(na * nb));
    }
    std::sort(cosines.begin(), cosines.end());
    const double median = cosines[cosines.size() / 2];
    INFO(model << " " << type << ": median row cosine " << median << ", worst " << cosines.front());
    WARN(model << " → " << type << ": median row cosine " << median << ", worst " << cosines.front());
    CHECK(median >= min_cos);
  }
  const auto bad =
      run("quantize " + moelsp::test::data_path("reference/mixtral-ref.gguf") + " /tmp/x.gguf IQ2_XXS", true);
  CHECK(bad.code == 1);  // no i-quant quantizer: a clear error naming what is supported
  CHECK_THAT(bad.out, Catch::Contains("Q4_K_M") && Catch::Contains("Q3_K_M") && Catch::Contains("Q2_K"));
}

TEST_CASE("more threads than logical CPUs are refused with the allowed range") {
  const auto r = run("generate -t 100000 -n 2 -p x -m " + moelsp::test::data_path("reference/qwen3moe-ref.gguf"), true);
  CHECK(r.code != 0);
  CHECK_THAT(r.out, Catch::Contains("setting threads") && Catch::Contains("logical CPUs"));
}

TEST_CASE("quantize never writes onto its input, and a failed write leaves no partial output") {
  namespace fs = std::filesystem;
  const std::string dir = "test_cli_quantize";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = dir + "/m.gguf";
  fs::copy_file(moelsp::test::data_path("reference/qwen3moe-ref.gguf"), model);
  const auto size = fs::file_size(model);
  auto r = run("quantize " + model + " " + model + " F32", true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("is the input file"));
  CHECK(fs::file_size(model) == size);
  // The same file by another path.
  r = run("quantize " + model + " " + dir + "/../" + dir + "/m.gguf F16", true);
  CHECK(r.code == 1);
  CHECK(fs::file_size(model) == size);
  // Into a directory that does not exist: an error, and nothing left behind.
  r = run("quantize " + model + " " + dir + "/missing/out.gguf Q8_0", true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("cannot open for writing"));
  // A good run replaces an existing output whole, with no temporary file left.
  { std::ofstream(dir + "/out.gguf") << "old"; }
  REQUIRE(run("quantize " + model + " " + dir + "/out.gguf Q8_0").code == 0);
  CHECK(fs::file_size(dir + "/out.gguf") > 1000);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 2);
  fs::remove_all(dir);
}

TEST_CASE("profile prints the machine and the plan with reasons, overrides and config files apply") {
  const std::string model = moelsp::test::data_path("reference/qwen3moe-ref.gguf");
  auto r = run("profile --no-calibrate -m " + model);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("cpu ") && Catch::Contains("memory") && Catch::Contains("plan") &&
                        Catch::Contains("weights") && Catch::Contains("kvCache.tokens"));
  r = run("profile --no-calibrate --json --weights stream --prefetch-distance 2 -m " + model);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["hardware"]["cpu"]["physical"].get<int>() >= 1);
  CHECK(j["model"]["experts"] == 8);
  CHECK(j["plan"]["weights"] == "stream");
  CHECK(j["plan"]["experts"]["prefetchDistance"] == 2);
  int user = 0;
  for (const auto& reason : j["plan"]["reasons"]) {
    CHECK(!reason["why"].get<std::string>().empty());
    user += reason["why"] == "set by the user";
  }
  CHECK(user >= 2);
  // A config file (TOML) sets what the flags do not; a bad one is an error naming its line.
  const std::string cfg = "test_cli_profile.toml", bad = "test_cli_bad.toml";
  {
    std::FILE* f = std::fopen(cfg.c_str(), "w");
    std::fputs("[kvCache]\nblockSize = 32\n", f);
    std::fclose(f);
    f = std::fopen(bad.c_str(), "w");
    std::fputs("threads = 2\nwhat is this\n", f);
    std::fclose(f);
  }
  r = run("profile --no-calibrate --json --config " + cfg + " -m " + model);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["plan"]["kvCache"]["blockSize"] == 32);
  r = run("profile --no-calibrate --config " + bad + " -m " + model, true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("line 2"));
  std::remove(cfg.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("command-line values outside their range are refused naming the option") {
  const std::string model = moelsp::test::data_path("reference/qwen3moe-ref.gguf");
  const struct {
    std::string args, says;
  } cases[] = {
      {"bench -r 0 -m " + model, "--repetitions"},
      {"bench -p -1 -m " + model, "--n-prompt"},
      {"bench -p 100000 -n 0 -m " + model, "training context"},
      {"bench --streams 2,0 -m " + model, "--streams"},
      {"bench -p 0 -n 0 -m " + model, "nothing to measure"},
      {"bench --peer /no/such/llama-bench -m " + model, "not an executable"},
      {"perplexity -c 100000 -f " + moelsp::test::data_path("README.md") + " -m " + model, "training context"},
      {"tokenize -f " + moelsp::test::data_path("reference") + " -m " + model, "not a readable file"},
      {"generate -n -1 -p x -m " + model, "--n-predict"},
      {"generate --temp nan -p x -m " + model, "--temp"},
      {"generate --top-p nan -p x -m " + model, "--top-p"},
      {"generate --repeat-penalty 0 -p x -m " + model, "--repeat-penalty"},
      {"generate --min-p 2 -p x -m " + model, "--min-p"},
      {"--log-level bogus inspect " + model, "--log-level"},
      {"lsp --threads 5000", "threads"},
      {"lsp --completion-max-tokens 0", "completion.maxTokens"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const auto r = run(c.args, true);
    CHECK(r.code != 0);
    CHECK_THAT(r.out, Catch::Contains(c.says));
  }
}
