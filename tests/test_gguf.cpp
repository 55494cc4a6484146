#include <cstring>
#include <filesystem>

#include <catch2/catch.hpp>

#include "engine/gguf.h"
#include "test_data.h"

using namespace moelsp::gguf;

namespace {

Writer sample_writer(uint32_t version = 3, uint32_t alignment = 32) {
  Writer w(version, alignment);
  w.set("general.architecture", "deepseek2");
  w.set("t.u8", uint8_t(200));
  w.set("t.i8", int8_t(-5));
  w.set("t.u16", uint16_t(60000));
  w.set("t.i16", int16_t(-30000));
  w.set("t.u32", uint32_t(4000000000u));
  w.set("t.i32", int32_t(-2000000000));
  w.set("t.f32", 1.5f);
  w.set("t.bool", true);
  w.set("t.str", std::string("h\xc3\xa9llo\nworld"));
  w.set("t.empty_str", std::string());
  w.set("t.u64", uint64_t(1) << 60);
  w.set("t.i64", int64_t(-1) << 60);
  w.set("t.f64", 2.25);
  w.set("t.arr_f32", make_array(std::vector<float>{1.0f, -2.0f, 3.5f}));
  w.set("t.arr_str", make_array(std::vector<std::string>{"a", "", "c c"}));
  w.set("t.arr_empty", make_array(std::vector<int32_t>{}));
  Array nested;
  nested.elem = ValueType::ARRAY;
  nested.items.push_back(make_array(std::vector<uint8_t>{1, 2}));
  nested.items.push_back(make_array(std::vector<uint8_t>{}));
  w.set("t.nested", Value(nested));
  std::vector<float> t0(64);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = float(i) * 0.5f;
  w.add_tensor("a.weight", DType::F32, {16, 4},
               {reinterpret_cast<const uint8_t*>(t0.data()), t0.size() * sizeof(float)});
  std::vector<uint8_t> q(34 * 2, 7);  // two Q8_0 blocks
  w.add_tensor("b.weight", DType::Q8_0, {64}, q);
  return w;
}

}  // namespace

TEST_CASE("GGUF round trip keeps every value type and tensor byte") {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u}) {
      Writer w = sample_writer(version, alignment);
      const auto bytes = w.to_bytes();
      const File f = File::from_bytes(bytes, "sample.gguf");
      CHECK(f.version() == version);
      CHECK(f.alignment() == alignment);
      CHECK(f.data_offset() % alignment == 0);

      CHECK(f.get<std::string>("general.architecture") == "deepseek2");
      CHECK(f.find("t.u8")->type() == ValueType::UINT8);
      CHECK(f.get<uint8_t>("t.u8") == 200);
      CHECK(f.get<int8_t>("t.i8") == -5);
      CHECK(f.get<uint16_t>("t.u16") == 60000);
      CHECK(f.get<int16_t>("t.i16") == -30000);
      CHECK(f.get<uint32_t>("t.u32") == 4000000000u);
      CHECK(f.get<int32_t>("t.i32") == -2000000000);
      CHECK(f.get<float>("t.f32") == 1.5f);
      CHECK(f.get<bool>("t.bool"));
      CHECK(f.get<std::string>("t.str") == "h\xc3\xa9llo\nworld");
      CHECK(f.get<std::string>("t.empty_str").empty());
      CHECK(f.get<uint64_t>("t.u64") == uint64_t(1) << 60);
      CHECK(f.get<int64_t>("t.i64") == int64_t(-1) << 60);
      CHECK(f.get<double>("t.f64") == 2.25);
      CHECK(f.get_array<float>("t.arr_f32") == std::vector<float>{1.0f, -2.0f, 3.5f});
      CHECK(f.get_array<std::string>("t.arr_str") == std::vector<std::string>{"a", "", "c c"});
      CHECK(f.get_array<int32_t>("t.arr_empty").empty());
      const auto& nested = std::get<Array>(f.find("t.nested")->v);
      REQUIRE(nested.items.size() == 2);
      CHECK(std::get<Array>(nested.items[0].v).items.size() == 2);

      // Metadata identical, in order, with exact types.
      Writer w2(version, alignment);
      for (const auto& [k, v] : f.metadata()) w2.set(k, v);
      for (const auto& t : f.tensors()) w2.add_tensor(t.name, t.type, t.shape, f.tensor_data(t));
      CHECK(w2.to_bytes() == bytes);

      REQUIRE(f.tensors().size() == 2);
      const auto* a = f.tensor("a.weight");
      REQUIRE(a);
      CHECK(a->shape == std::vector<uint64_t>{16, 4});
      CHECK(a->n_elements == 64);
      CHECK(a->n_bytes == 256);
      float x[64];
      std::memcpy(x, f.tensor_data(*a).data(), sizeof x);
      CHECK(x[63] == 31.5f);
      const auto* b = f.tensor("b.weight");
      REQUIRE(b);
      CHECK(b->type == DType::Q8_0);
      CHECK(b->n_bytes == 68);
      CHECK(f.tensor("missing") == nullptr);
    }
  }
}

TEST_CASE("GGUF writes to disk and reads back through mmap") {
  const auto path = (std::filesystem::temp_directory_path() / "moelsp_test_rt.gguf").string();
  sample_writer().write(path);
  const File f = File::open(path);
  CHECK(f.get<int64_t>("t.i64") == int64_t(-1) << 60);
  CHECK(f.tensors().size() == 2);
  std::filesystem::remove(path);
}

TEST_CASE("a split model opens from its first part, with every part's tensors") {
  const auto dir = std::filesystem::temp_directory_path() / "moelsp_test_split";
  std::filesystem::create_directories(dir);
  const auto part = [&](int k) { return (dir / ("m-Q8_0-0000" + std::to_string(k) + "-of-00002.gguf")).string(); };
  std::vector<uint8_t> a(64), b(32);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(200 - i);
  Writer w1;
  w1.set("general.architecture", std::string("test"));
  w1.set("split.no", uint16_t(0));
  w1.set("split.count", uint16_t(2));
  w1.set("split.tensors.count", int32_t(2));
  w1.add_tensor("first", DType::F32, {16}, a);
  w1.write(part(1));
  Writer w2;
  w2.set("split.no", uint16_t(1));
  w2.set("split.count", uint16_t(2));
  w2.add_tensor("second", DType::F32, {8}, b);
  w2.write(part(2));
  {
    const File f = File::open(part(1));
    REQUIRE(f.tensors().size() == 2);
    REQUIRE(f.tensor("second") != nullptr);
    CHECK(f.tensor("second")->part == 1);
    const auto d = f.tensor_data(*f.tensor("second"));
    CHECK(std::vector<uint8_t>(d.begin(), d.end()) == b);
    const auto d1 = f.tensor_data(*f.tensor("first"));
    CHECK(std::vector<uint8_t>(d1.begin(), d1.end()) == a);
    CHECK(f.file_size() == std::filesystem::file_size(part(1)) + std::filesystem::file_size(part(2)));
  }
  std::filesystem::remove(part(2));
  CHECK_THROWS_WITH(File::open(part(1)), Catch::Contains("part 2 of 2 is missing"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a header alone: read from a file's first bytes, more asked for when it goes on") {
  const std::vector<uint8_t> whole = sample_writer().to_bytes();
  const File h = File::from_header(std::vector<uint8_t>(whole.begin(), whole.begin() + long(whole.size() - 8)),
                                   whole.size(), "head");
  CHECK(h.tensors().size() == 2);
  CHECK(h.file_size() == whole.size());
  CHECK_THROWS_AS(h.tensor_data(h.tensors().front()), GgufError);
  CHECK_THROWS_AS(File::from_header(std::vector<uint8_t>(whole.begin(), whole.begin() + 40), whole.size(), "head"),
                  GgufHeaderIncomplete);
  // The header must fit the whole file's size, as open() checks it.
  CHECK_THROWS_WITH(File::from_header(whole, whole.size() / 2, "head"), Catch::Contains("truncated file"));
}

TEST_CASE("typed accessors convert numbers that fit and refuse the rest") {
  const File f = File::from_bytes(sample_writer().to_bytes());
  CHECK(f.get<uint64_t>("t.u8") == 200);
  CHECK(f.get<double>("t.i32") == -2000000000.0);
  CHECK_THROWS_AS(f.get<uint8_t>("t.u16"), GgufError);  // 60000 does not fit
  CHECK_THROWS_AS(f.get<uint32_t>("t.i8"), GgufError);  // negative
  CHECK_THROWS_AS(f.get<int32_t>("t.f32"), GgufError);  // no float → int
  CHECK_THROWS_AS(f.get<std::string>("t.u8"), GgufError);
  CHECK_THROWS_WITH(f.get<uint32_t>("deepseek2.block_count"),
                    Catch::Contains("deepseek2.block_count") && Catch::Contains("missing"));
  CHECK(f.get_or<uint32_t>("deepseek2.block_count", 7) == 7);
  CHECK(!f.get_opt<uint32_t>("nope").has_value());
  CHECK_THROWS_AS(f.get_array<uint8_t>("t.arr_str"), GgufError);
}

TEST_CASE("writer refuses inconsistent tensors") {
  Writer w;
  std::vector<uint8_t> d(10);
  CHECK_THROWS(w.add_tensor("x", DType::Q8_0, {16}, d));  // 16 not a multiple of 32
  CHECK_THROWS(w.add_tensor("x", DType::F32, {4}, d));    // 16 bytes needed
  std::vector<uint8_t> ok(16);
  w.add_tensor("x", DType::F32, {4}, ok);
  CHECK_THROWS(w.add_tensor("x", DType::F32, {4}, ok));  // duplicate
}

TEST_CASE("reads real GGUF files: a vocabulary and a model") {
  const File v = File::open(moelsp::test::data_path("vocab/ggml-vocab-llama-spm.gguf"));
  CHECK(v.get<std::string>("tokenizer.ggml.model") == "llama");
  CHECK(v.get_array<std::string>("tokenizer.ggml.tokens").size() == 32000);
  const File m = File::open(moelsp::test::data_path("reference/deepseek2-lite-ref.gguf"));
  CHECK(m.get<std::string>("general.architecture") == "deepseek2");
  CHECK(m.get<uint32_t>("deepseek2.block_count") > 0);
  const auto* emb = m.tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->shape[1] == 32256);
  CHECK(m.data_offset() + emb->offset + emb->n_bytes <= m.file_size());
}
