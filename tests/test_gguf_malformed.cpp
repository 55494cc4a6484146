// Hostile and damaged GGUF files: every one must give a GgufError (or, where
// the damage leaves a well-formed file, parse), never a crash, hang or huge
// allocation. CI runs this binary under AddressSanitizer + UBSan as well.
#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "engine/gguf.h"
#include "engine/model_info.h"
#include "engine/tokenizer.h"
#include "test_data.h"

using namespace moelsp::gguf;

namespace {

std::vector<uint8_t> load(const std::string& rel) {
  const std::string s = moelsp::test::read_file(moelsp::test::data_path(rel));
  return {s.begin(), s.end()};
}

// Parses and, when that works, exercises what a user would run next.
// Returns the error text ("" when the file was accepted).
std::string try_parse(std::vector<uint8_t> bytes) {
  try {
    const File f = File::from_bytes(std::move(bytes), "damaged.gguf");
    for (const auto& t : f.tensors()) (void)f.tensor_data(t);
    (void)moelsp::summarize(f);
    try {
      auto tok = moelsp::Tokenizer::from_gguf(f);
      (void)tok->encode("def f(x):\n    return x  # \xc3\xa9", {.parse_special = true});
    } catch (const moelsp::TokenizerError&) {
    }
    return "";
  } catch (const GgufError& e) {
    return e.what();
  }
}

// resize + memcpy: GCC 12 at -O3 warns falsely on small vector inserts.
void put_bytes(std::vector<uint8_t>& b, const void* p, size_t n) {
  const size_t at = b.size();
  b.resize(at + n);
  if (n) std::memcpy(b.data() + at, p, n);
}
template <class T>
void put(std::vector<uint8_t>& b, T x) {
  put_bytes(b, &x, sizeof x);
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  put_bytes(b, s.data(), s.size());
}

std::vector<uint8_t> header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> b;
  put_bytes(b, "GGUF", 4);
  put(b, version);
  put(b, n_tensors);
  put(b, n_kv);
  return b;
}

}  // namespace

TEST_CASE("truncation at many offsets is a clean error") {
  for (const char* rel : {"vocab/ggml-vocab-deepseek-coder.gguf", "reference/mixtral-ref.gguf"}) {
    const auto good = load(rel);
    REQUIRE(try_parse(good).empty());
    std::vector<size_t> cuts;
    for (size_t i = 0; i < 512 && i < good.size(); ++i) cuts.push_back(i);  // every header byte
    std::mt19937_64 rng(42);
    for (int i = 0; i < 300; ++i) cuts.push_back(rng() % good.size());
    cuts.push_back(good.size() - 1);
    for (size_t cut : cuts) {
      std::vector<uint8_t> b(good.begin(), good.begin() + std::ptrdiff_t(cut));
      const std::string err = try_parse(b);
      INFO(rel << " cut at " << cut);
      // A file cut inside the padding after the last tensor can still be complete.
      if (err.empty()) continue;
      CHECK_THAT(err, Catch::Contains("damaged.gguf") && Catch::Contains("offset"));
    }
    // The model file has tensor data: cutting into it must be reported as truncation.
    if (std::string(rel).find("mixtral") != std::string::npos)
      CHECK_THAT(try_parse({good.begin(), good.end() - 4096}), Catch::Contains("truncated"));
  }
}

TEST_CASE("bit flips in the header never crash") {
  const auto good = load("vocab/ggml-vocab-gpt-2.gguf");
  std::mt19937_64 rng(7);
  int errors = 0;
  for (int i = 0; i < 400; ++i) {
    auto b = good;
    const size_t pos = rng() % std::min<size_t>(b.size(), 4096);
    b[pos] ^= uint8_t(1u << (rng() % 8));
    errors += !try_parse(std::move(b)).empty();
  }
  CHECK(errors > 0);  // most flips in lengths and types are caught
  // Flips anywhere (strings in the token list, merges…) must not crash the tokenizer either.
  for (int i = 0; i < 100; ++i) {
    auto b = good;
    for (int k = 0; k < 8; ++k) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
    (void)try_parse(std::move(b));
  }
}

TEST_CASE("specific malformations name the problem") {
  CHECK_THAT(try_parse({}), Catch::Contains("empty file"));
  {
    std::vector<uint8_t> b;
    put_bytes(b, "GGML\0\0\0\0", 8);
    CHECK_THAT(try_parse(b), Catch::Contains("bad magic"));
  }
  CHECK_THAT(try_parse(header(1, 0, 0)), Catch::Contains("version 1"));
  CHECK_THAT(try_parse(header(7, 0, 0)), Catch::Contains("unsupported GGUF version 7"));
  CHECK_THAT(try_parse(header(3, 0, 1ull << 60)), Catch::Contains("absurd metadata count"));
  CHECK_THAT(try_parse(header(3, 1ull << 62, 0)), Catch::Contains("absurd tensor count"));
  CHECK(try_parse(header(3, 0, 0)).empty());  // an empty but valid file

  {  // string length past the end
    auto b = header(3, 0, 1);
    put<uint64_t>(b, 1ull << 40);
    b.resize(b.size() + 16, 'x');
    CHECK_THAT(try_parse(b), Catch::Contains("absurd length"));
  }
  {  // array count that cannot fit
    auto b = header(3, 0, 1);
    put_str(b, "k");
    put<uint32_t>(b, 9);  // array
    put<uint32_t>(b, 6);  // of float32
    put<uint64_t>(b, 1ull << 50);
    CHECK_THAT(try_parse(b), Catch::Contains("cannot fit"));
  }
  {  // unknown value type
    auto b = header(3, 0, 1);
    put_str(b, "k");
    put<uint32_t>(b, 99);
    CHECK_THAT(try_parse(b), Catch::Contains("unknown value type 99"));
  }
  {  // deeply nested arrays
    auto b = header(3, 0, 1);
    put_str(b, "k");
    put<uint32_t>(b, 9);
    for (int i = 0; i < 20; ++i) {
      put<uint32_t>(b, 9);
      put<uint64_t>(b, 1);
    }
    put<uint32_t>(b, 0);
    put<uint64_t>(b, 0);
    CHECK_THAT(try_parse(b), Catch::Contains("nested"));
  }
  {  // duplicate key
    auto b = header(3, 0, 2);
    for (int i = 0; i < 2; ++i) {
      put_str(b, "dup");
      put<uint32_t>(b, 4);
      put<uint32_t>(b, 1);
    }
    CHECK_THAT(try_parse(b), Catch::Contains("duplicate metadata key 'dup'"));
  }
  {  // bad alignment
    auto b = header(3, 0, 1);
    put_str(b, "general.alignment");
    put<uint32_t>(b, 4);
    put<uint32_t>(b, 48);
    CHECK_THAT(try_parse(b), Catch::Contains("power of two"));
  }
  auto tensor_file = [](const std::string& name2, uint32_t type, uint64_t dim, uint64_t off2, uint32_t ndims = 1) {
    auto b = header(3, 2, 0);
    put_str(b, "t0");
    put<uint32_t>(b, 1);
    put<uint64_t>(b, 8);
    put<uint32_t>(b, 0);
    put<uint64_t>(b, 0);
    put_str(b, name2);
    put<uint32_t>(b, ndims);
    for (uint32_t d = 0; d < ndims; ++d) put<uint64_t>(b, dim);
    put<uint32_t>(b, type);
    put<uint64_t>(b, off2);
    b.resize((b.size() + 31) / 32 * 32 + 64, 0);
    return b;
  };
  CHECK(try_parse(tensor_file("t1", 0, 8, 32)).empty());
  CHECK_THAT(try_parse(tensor_file("t0", 0, 8, 32)), Catch::Contains("duplicate tensor name 't0'"));
  CHECK_THAT(try_parse(tensor_file("t1", 77, 8, 32)), Catch::Contains("unknown tensor type 77"));
  CHECK_THAT(try_parse(tensor_file("t1", 8, 8, 32)), Catch::Contains("block size"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 8, 33)), Catch::Contains("not a multiple of the alignment"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 8, 0)), Catch::Contains("overlap"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 8, 1ull << 40)), Catch::Contains("extends past the end"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 1ull << 40, 32)), Catch::Contains("extends past the end"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 1ull << 62, 32)), Catch::Contains("byte size overflows"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 1ull << 40, 32, 4)), Catch::Contains("overflows"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, 8, 32, 5)), Catch::Contains("dimensions"));
  CHECK_THAT(try_parse(tensor_file("t1", 0, ~0ull, 32)), Catch::Contains("negative"));
}

TEST_CASE("a missing file or a directory is a clean error") {
  CHECK_THROWS_WITH(File::open("/nonexistent/model.gguf"), Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(File::open("/tmp"), Catch::Contains("not a regular file"));
}
