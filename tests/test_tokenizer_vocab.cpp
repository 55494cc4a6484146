// llama.cpp's tokenizer test vectors (tests/data/vocab, from llama.cpp's
// models/ggml-vocab-*.gguf + .inp/.out; format of its test-tokenizer-0.cpp):
// each input must encode to exactly the expected ids (no BOS, special tokens
// not parsed) and, for lossless tokenizers, decode back to the input.
#include <filesystem>

#include <catch2/catch.hpp>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "test_data.h"

using namespace moelsp;

namespace {

struct Case {
  std::string input;
  std::vector<TokenId> expected;
};

std::vector<Case> read_cases(const std::string& base) {
  const std::string inp = test::read_file(test::data_path_abs(base + ".inp"));
  const std::string out = test::read_file(test::data_path_abs(base + ".out"));
  std::vector<std::string> inputs;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<TokenId>> outputs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<TokenId> ids;
    std::istringstream ws(line);
    for (long v; ws >> v;) ids.push_back(TokenId(v));
    outputs.push_back(ids);
  }
  REQUIRE(inputs.size() == outputs.size());
  REQUIRE(!inputs.empty());
  std::vector<Case> cases;
  for (size_t i = 0; i < inputs.size(); ++i) cases.push_back({inputs[i], outputs[i]});
  return cases;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

// Vocabularies we do not tokenize, and why.
const std::map<std::string, std::string> kOutOfScope = {
    {"ggml-vocab-bert-bge.gguf",
     "BERT WordPiece (tokenizer.ggml.model = bert) is an embedding-model tokenizer; moelsp serves generative "
     "code models (SentencePiece or byte-level BPE)"},
};

// Checks every vector of `vectors_dir`/NAME.inp/.out against the vocabulary
// vocab/NAME; returns the number of inputs checked.
size_t check_vectors(const std::string& vocab_path, const std::string& vectors_base) {
  const std::string name = std::filesystem::path(vocab_path).filename().string();
  const auto f = gguf::File::open(vocab_path);
  const auto tok = Tokenizer::from_gguf(f);
  const auto cases = read_cases(vectors_base);
  for (const auto& c : cases) {
    const auto ids = tok->encode(c.input);
    INFO(name << ": input '" << c.input << "'\n expected " << show(c.expected) << "\n got      " << show(ids));
    CHECK(ids == c.expected);
    // Byte-level BPE and SentencePiece with byte fallback are lossless on valid UTF-8.
    if (valid_utf8_prefix(c.input) == c.input.size()) CHECK(tok->decode(ids) == c.input);
  }
  return cases.size();
}

std::vector<std::string> vocab_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(test::data_path("vocab")))
    if (e.path().extension() == ".gguf") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("llama.cpp tokenizer test vectors") {
  const auto files = vocab_files();
  REQUIRE(files.size() >= 10);
  size_t n_vocabs = 0, n_cases = 0;
  for (const auto& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    REQUIRE(std::filesystem::exists(path + ".inp"));
    if (auto it = kOutOfScope.find(name); it != kOutOfScope.end()) {
      WARN(name << " out of scope: " << it->second);
      // and it must fail clearly, not silently produce ids
      const auto f = gguf::File::open(path);
      CHECK_THROWS_AS(Tokenizer::from_gguf(f), TokenizerError);
      continue;
    }
    n_cases += check_vectors(path, path);
    ++n_vocabs;
  }
  CHECK(n_vocabs == files.size() - kOutOfScope.size());
  WARN("checked " << n_cases << " inputs across " << n_vocabs << " vocabularies");
}

// Random strings (code fragments, scripts, emoji, random code points, stray
// bytes) tokenized by llama.cpp's llama-tokenize: see tests/data/README.md.
TEST_CASE("random strings tokenize as llama.cpp does") {
  size_t n_vocabs = 0, n_cases = 0;
  for (const auto& path : vocab_files()) {
    const std::string name = std::filesystem::path(path).filename().string();
    if (kOutOfScope.count(name)) continue;
    n_cases += check_vectors(path, std::string(MOELSP_TEST_DATA) + "/vocab-random/" + name);
    ++n_vocabs;
  }
  CHECK(n_vocabs == 9);
  WARN("checked " << n_cases << " random inputs across " << n_vocabs << " vocabularies");
}
