// assist/hub.h without a network: references as users write them, the
// quantization a file name carries, the choice of files in a repository
// (split models, the Q4_K_M default, what a missing quant's error lists),
// and the cache's listing and removal. The downloads themselves are tested
// against a double of the hub (tests/test_pull.py).
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "assist/hub.h"

using namespace moelsp::assist;
namespace fs = std::filesystem;

TEST_CASE("model references: hf://, short, with a file, and what is not one") {
  const ModelRef a = parse_model_ref("hf://unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M");
  CHECK(a.owner == "unsloth");
  CHECK(a.repo == "Qwen3-Coder-30B-A3B-Instruct-GGUF");
  CHECK(a.quant == "Q4_K_M");
  CHECK(a.file.empty());
  const ModelRef b = parse_model_ref("bartowski/gpt-oss-20b-GGUF:q8_0");
  CHECK(b.repo_id() == "bartowski/gpt-oss-20b-GGUF");
  CHECK(b.quant == "q8_0");
  const ModelRef c = parse_model_ref("hf://owner/repo/sub/dir/model-Q5_K_M.gguf");
  CHECK(c.file == "sub/dir/model-Q5_K_M.gguf");
  CHECK(c.quant.empty());
  CHECK(parse_model_ref("hf://owner/repo").quant.empty());
  for (const char* bad : {"hf://", "justaname", "hf://owner/", "owner/repo:", "a b/c:Q4_0", "hf://o/r/../../etc/passwd",
                          "hf://o/r/f.gguf:Q4_0"})
    CHECK_THROWS_AS(parse_model_ref(bad), std::invalid_argument);
  CHECK_THROWS_WITH(parse_model_ref("justaname"), Catch::Contains("expected hf://owner/repo"));
  CHECK(looks_like_model_ref("hf://a/b"));
  CHECK(looks_like_model_ref("a/b:Q4_K_M"));
  CHECK_FALSE(looks_like_model_ref("models/x.gguf"));
  CHECK_FALSE(looks_like_model_ref("/abs/path.gguf"));
}

TEST_CASE("the quantization in a GGUF file's name") {
  CHECK(quant_of("Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf") == "Q4_K_M");
  CHECK(quant_of("Q4_K_M/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M-00001-of-00002.gguf") == "Q4_K_M");
  CHECK(quant_of("gpt-oss-20b-MXFP4.gguf") == "MXFP4");
  CHECK(quant_of("model.Q8_0.gguf") == "Q8_0");
  CHECK(quant_of("DeepSeek-Coder-V2-Lite-Instruct-IQ4_XS.gguf") == "IQ4_XS");
  CHECK(quant_of("Qwen3-Coder-30B-A3B-Instruct-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL");
  CHECK(quant_of("glm-4.7-flash-bf16.gguf") == "BF16");
  CHECK(quant_of("model.gguf") == "");
}

namespace {
std::vector<HubFile> repo() {
  return {{"README.md", 10, ""},
          {"model-Q8_0.gguf", 800, "aa"},
          {"model-Q4_K_M.gguf", 400, "bb"},
          {"model-UD-Q4_K_XL.gguf", 420, "cc"},
          {"Q4_0/model-Q4_0-00002-of-00002.gguf", 150, "dd"},
          {"Q4_0/model-Q4_0-00001-of-00002.gguf", 200, "ee"},
          {"mmproj-model-F16.gguf", 50, "ff"}};
}
std::vector<std::string> paths(const std::vector<HubFile>& fs_) {
  std::vector<std::string> out;
  for (const auto& f : fs_) out.push_back(f.path);
  return out;
}
}  // namespace

TEST_CASE("choosing files: a quant, its parts, the default, a file, and the errors") {
  const auto r = repo();
  CHECK(paths(choose_files(parse_model_ref("o/r:q8_0"), r)) == std::vector<std::string>{"model-Q8_0.gguf"});
  CHECK(paths(choose_files(parse_model_ref("o/r:Q4_0"), r)) ==
        std::vector<std::string>{"Q4_0/model-Q4_0-00001-of-00002.gguf", "Q4_0/model-Q4_0-00002-of-00002.gguf"});
  CHECK(paths(choose_files(parse_model_ref("o/r:Q4_K_XL"), r)) == std::vector<std::string>{"model-UD-Q4_K_XL.gguf"});
  CHECK(paths(choose_files(parse_model_ref("hf://o/r"), r)) == std::vector<std::string>{"model-Q4_K_M.gguf"});
  CHECK(paths(choose_files(parse_model_ref("hf://o/r/Q4_0/model-Q4_0-00002-of-00002.gguf"), r)).size() == 2);
  CHECK_THROWS_WITH(choose_files(parse_model_ref("o/r:Q2_K"), r),
                    Catch::Contains("no Q2_K") && Catch::Contains("Q8_0") && Catch::Contains("Q4_0"));
  CHECK_THROWS_WITH(choose_files(parse_model_ref("o/r"), {{"config.json", 1, ""}, {"model.safetensors", 9, ""}}),
                    Catch::Contains("no GGUF"));
  CHECK_THROWS_WITH(choose_files(parse_model_ref("o/r"), {{"a-Q8_0.gguf", 1, ""}, {"a-Q6_K.gguf", 1, ""}}),
                    Catch::Contains("several GGUF files") && Catch::Contains("Q6_K"));
  // One model only: chosen without a quant; the projector is never the model.
  CHECK(paths(choose_files(parse_model_ref("o/r"), {{"mmproj-F16.gguf", 1, ""}, {"x-Q6_K.gguf", 1, ""}})) ==
        std::vector<std::string>{"x-Q6_K.gguf"});
}

TEST_CASE("the cache: listed with sizes, complete parts found, removed by reference or path") {
  const fs::path dir = fs::temp_directory_path() / ("moelsp-hub-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto put = [&](const std::string& rel, size_t n) {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel) << std::string(n, 'x');
  };
  put("o/r/model-Q8_0.gguf", 800);
  put("o/r/Q4_0/model-Q4_0-00001-of-00002.gguf", 200);
  put("o/r/Q4_0/model-Q4_0-00002-of-00002.gguf.part", 10);
  put("o/r/README.md", 5);
  const auto list = cached_models(dir.string());
  REQUIRE(list.size() == 3);
  CHECK(list[0].rel == "o/r/Q4_0/model-Q4_0-00001-of-00002.gguf");
  CHECK(list[1].partial);
  CHECK(list[2].size == 800);
  CHECK(cached_paths(dir.string(), parse_model_ref("o/r:Q8_0")).size() == 1);
  CHECK(cached_paths(dir.string(), parse_model_ref("o/r:Q4_0")).empty());  // a part is missing
  CHECK(remove_cached(dir.string(), "o/r:Q6_K").empty());
  CHECK(remove_cached(dir.string(), "o/r:Q4_0").size() == 2);
  CHECK_FALSE(fs::exists(dir / "o/r/Q4_0"));  // its emptied folder went too
  CHECK(remove_cached(dir.string(), "o/r/model-Q8_0.gguf") == std::vector<std::string>{"o/r/model-Q8_0.gguf"});
  CHECK(cached_models(dir.string()).empty());
  fs::remove_all(dir);
}
