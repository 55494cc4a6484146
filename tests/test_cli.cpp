// The moelsp executable's inspect / tokenize / detokenize, run as a user would.
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_data.h"

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(MOELSP_BINARY) + " " + args + " 2>/dev/null";
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
