// The prompt cache on disk (engine/prompt_cache.h) through the engine: a
// fresh engine (as a new process would) restores a stored prompt and gives the
// same logits; damaged files and files of another model or row format are
// never used; the size bound evicts the least recently used; a later prompt
// that grows the stored one writes only its new blocks; the device forward
// pass (emulated) restores and stores through its copy of the rows.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <catch2/catch.hpp>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "test_data.h"

using namespace moelsp;
namespace fs = std::filesystem;

namespace {

constexpr int kBlock = 4;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "moelsp-prompt-cache-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".kvc") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::shared_ptr<Model> load(const std::string& path, ComputeBackend b = ComputeBackend::Cpu) {
  return std::shared_ptr<Model>(Model::load(path, {.threads = 2, .backend = b, .gpu = 0}));
}

std::string ref(const std::string& name) { return test::data_path("reference/" + name + ".gguf"); }

EngineOptions options(const TempDir* dir, KvType kv = KvType::F16, uint64_t max_bytes = uint64_t(1) << 30) {
  EngineOptions o{.n_ctx = 256, .block_size = kBlock, .kv_type = kv};
  if (dir) o.prompt_cache = {.dir = dir->path.string(), .max_bytes = max_bytes, .min_tokens = 8};
  return o;
}

std::vector<TokenId> random_prompt(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(3, vocab - 1);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

Request request(const std::vector<TokenId>& prompt) {
  Request req;
  req.prompt_tokens = prompt;
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 6;
  req.ignore_eos = true;
  req.logprobs = 5;
  req.store_prompt = true;
  return req;
}

Result ask(Engine& e, const std::vector<TokenId>& prompt) {
  const Result r = e.submit(request(prompt)).wait();
  REQUIRE(r.error.empty());
  return r;
}

// Every generated token's log-probability and its alternatives, bit for bit.
void check_identical(const Result& a, const Result& b) {
  REQUIRE(a.tokens == b.tokens);
  REQUIRE(a.logprobs.size() == b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(a.logprobs[i].logprob == b.logprobs[i].logprob);
    REQUIRE(a.logprobs[i].top.size() == b.logprobs[i].top.size());
    for (size_t k = 0; k < a.logprobs[i].top.size(); ++k)
      CHECK(a.logprobs[i].top[k].logprob == b.logprobs[i].top[k].logprob);
  }
}

void check_close(const Result& a, const Result& b, double tol) {
  REQUIRE(a.tokens == b.tokens);
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(std::fabs(a.logprobs[i].logprob - b.logprobs[i].logprob) <= tol);
  }
}

void flip_byte(const fs::path& p, uint64_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("prompt cache: a fresh engine restores a stored prompt, the logits are those of a cached prefix") {
  for (const std::string name : {"qwen3moe-ref", "deepseek2-lite-ref"}) {  // GQA rows (K and V), MLA rows (latent)
    INFO(name);
    TempDir dir;
    auto m = load(ref(name));
    const auto prompt = random_prompt(8 * kBlock + 1, int(m->tokenizer().n_vocab()), 7);
    const int stored = 8 * kBlock;  // every whole block before the last token (which always runs again)
    Result first;
    {
      Engine a(m, options(&dir));
      first = ask(a, prompt);
      CHECK(first.timings.n_prompt_cached == 0);
    }  // the engine waits for its writes
    REQUIRE(dir.files().size() == 1);

    Engine b(m, options(&dir));  // a new process: nothing in memory
    const Result restored = ask(b, prompt);
    CHECK(restored.timings.n_prompt_restored == stored);
    CHECK(restored.timings.n_prompt_cached == stored);
    const EngineMetrics mb = b.metrics();
    CHECK(mb.prompt_cache_on);
    CHECK(mb.prompt_cache.blocks_restored == stored / kBlock);
    CHECK(mb.prompt_cache.files == 1);

    // The same prompt again in one engine maps the same prefix from memory:
    // the same computation, so the same bits.
    Engine c(m, options(nullptr));
    ask(c, prompt);
    const Result from_memory = ask(c, prompt);
    CHECK(from_memory.timings.n_prompt_cached == stored);
    check_identical(restored, from_memory);
    // Against the prompt computed whole: the last token alone in its batch,
    // the rest as before.
    check_close(restored, first, 1e-4);
  }
}

TEST_CASE("prompt cache: a damaged file is deleted and its tokens computed, never used") {
  TempDir dir;
  auto m = load(ref("qwen3moe-ref"));
  const auto prompt = random_prompt(6 * kBlock + 1, int(m->tokenizer().n_vocab()), 11);
  Result first;
  {
    Engine a(m, options(&dir));
    first = ask(a, prompt);
  }
  REQUIRE(dir.files().size() == 1);
  const fs::path file = dir.files()[0];
  const uint64_t size = fs::file_size(file);

  SECTION("a row byte changed") {
    flip_byte(file, size - 100);  // in the last block's rows: the blocks before it are still good
    Engine b(m, options(&dir));
    const Result r = ask(b, prompt);
    CHECK(r.timings.n_prompt_restored < 6 * kBlock);
    CHECK(b.metrics().prompt_cache.files_refused == 1);
    check_close(r, first, 1e-4);
  }
  SECTION("a header byte changed") {
    flip_byte(file, 80);  // a block name
    Engine b(m, options(&dir));
    const Result r = ask(b, prompt);
    CHECK(r.timings.n_prompt_restored == 0);
    CHECK(b.metrics().prompt_cache.files_refused == 1);
    check_close(r, first, 1e-4);
  }
  SECTION("the file cut short") {
    fs::resize_file(file, size - 4096);
    Engine b(m, options(&dir));
    const Result r = ask(b, prompt);
    CHECK(r.timings.n_prompt_restored == 0);
    CHECK(b.metrics().prompt_cache.files_refused == 1);
    check_close(r, first, 1e-4);
  }
  SECTION("not a prompt cache file at all") {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << "MOELSPKV but nothing after it";
    Engine b(m, options(&dir));
    CHECK(ask(b, prompt).timings.n_prompt_restored == 0);
  }
  // Whatever was refused is gone; the engine that found it stored the prompt again.
  Engine after(m, options(&dir));
  CHECK(ask(after, prompt).timings.n_prompt_restored == 6 * kBlock);
  CHECK(after.metrics().prompt_cache.files_refused == 0);
}

TEST_CASE("prompt cache: another model's or another row format's files are left alone") {
  TempDir dir;
  auto m = load(ref("qwen3moe-ref"));
  const auto prompt = random_prompt(6 * kBlock + 1, int(m->tokenizer().n_vocab()), 13);
  {
    Engine a(m, options(&dir));
    ask(a, prompt);
  }
  REQUIRE(dir.files().size() == 1);
  const fs::path stored = dir.files()[0];
  {
    Engine f32(m, options(&dir, KvType::F32));  // another row format: another name for every block
    CHECK(ask(f32, prompt).timings.n_prompt_restored == 0);
  }
  const fs::path copy = dir.path / "copy.gguf";
  fs::copy_file(ref("qwen3moe-ref"), copy);
  {
    // The same file under another path is the same model: it shares.
    Engine same(load(copy.string()), options(&dir));
    CHECK(ask(same, prompt).timings.n_prompt_restored == 6 * kBlock);
  }
  {
    // One weight changed (a file re-quantized in place): another model.
    const auto g = gguf::File::open(copy.string());
    // The lowest byte of an f32 weight at a tensor's middle: a tiny change.
    const auto t = std::find_if(g.tensors().begin(), g.tensors().end(), [](const gguf::TensorInfo& x) {
      return x.type == gguf::DType::F32 && x.n_bytes % 8 == 0 && x.n_bytes > 64;
    });
    REQUIRE(t != g.tensors().end());
    const uint64_t at = g.data_offset() + t->offset + t->n_bytes / 2;
    flip_byte(copy, at);
    Engine other(load(copy.string()), options(&dir));
    CHECK(ask(other, prompt).timings.n_prompt_restored == 0);
    CHECK(other.metrics().prompt_cache.files_refused == 0);
  }
  CHECK(fs::exists(stored));
  Engine again(m, options(&dir));
  CHECK(ask(again, prompt).timings.n_prompt_restored == 6 * kBlock);
}

TEST_CASE("prompt cache: a grown prompt writes only its new blocks, the size bound drops the least recently used") {
  TempDir dir;
  auto m = load(ref("qwen3moe-ref"));
  const int nv = int(m->tokenizer().n_vocab());
  auto head = random_prompt(6 * kBlock, nv, 17);
  auto turn1 = head, turn2 = head;
  turn1.push_back(5);
  const auto more = random_prompt(4 * kBlock + 1, nv, 19);
  turn2.insert(turn2.end(), more.begin(), more.end());
  uint64_t one_file = 0;
  {
    Engine a(m, options(&dir));
    ask(a, turn1);
  }
  REQUIRE(dir.files().size() == 1);
  one_file = fs::file_size(dir.files()[0]);
  {
    Engine b(m, options(&dir));  // the next session's longer prompt: the head from disk, the rest written
    const Result r = ask(b, turn2);
    CHECK(r.timings.n_prompt_restored == 6 * kBlock);
  }
  REQUIRE(dir.files().size() == 2);
  {
    Engine c(m, options(&dir));
    CHECK(ask(c, turn2).timings.n_prompt_restored == 10 * kBlock);
    CHECK(c.metrics().prompt_cache.blocks_written == 0);  // nothing new
  }
  // Room for about one file: a third prompt's file pushes out the oldest.
  const auto other = random_prompt(6 * kBlock + 1, nv, 23);
  {
    Engine d(m, options(&dir, KvType::F16, one_file + one_file / 2));
    ask(d, other);
  }
  Engine e(m, options(&dir));
  CHECK(ask(e, other).timings.n_prompt_restored == 6 * kBlock);
  CHECK(ask(e, turn2).timings.n_prompt_restored < 10 * kBlock);
}

TEST_CASE("prompt cache: writes never leave a small pool short of blocks, copied rows restore the same bits") {
  TempDir dir;
  auto m = load(ref("qwen3moe-ref"));
  const int nv = int(m->tokenizer().n_vocab());
  EngineOptions small = options(&dir);
  small.n_ctx = 64;
  small.kv_tokens = 18 * kBlock;  // a write may hold 2 of its 18 blocks; past that its rows are copied
  const auto p1 = random_prompt(10 * kBlock + 1, nv, 37), p2 = random_prompt(14 * kBlock + 1, nv, 41);
  {
    Engine a(m, small);
    ask(a, p1);  // 10 blocks to write
    ask(a, p2);  // at once 16 blocks: the write must not be holding p1's
    CHECK(a.metrics().prompt_cache.writes_skipped == 0);
  }
  Engine b(m, options(&dir));
  const Result restored = ask(b, p1);
  CHECK(restored.timings.n_prompt_restored == 10 * kBlock);
  Engine c(m, options(nullptr));
  ask(c, p1);
  check_identical(restored, ask(c, p1));
}

TEST_CASE("prompt cache: two engines storing the same prompt at once share one file") {
  TempDir dir;
  // Two models: an engine's scheduler owns its model's thread pool (two
  // servers are two processes, each with its own).
  auto m = load(ref("qwen3moe-ref")), m2 = load(ref("qwen3moe-ref"));
  const auto prompt = random_prompt(6 * kBlock + 1, int(m->tokenizer().n_vocab()), 43);
  for (int round = 0; round < 3; ++round) {  // the writes race differently each time
    {
      Engine a(m, options(&dir)), b(m2, options(&dir));
      Handle ha = a.submit(request(prompt)), hb = b.submit(request(prompt));
      const Result ra = ha.wait(), rb = hb.wait();
      INFO(ra.error << " | " << rb.error);
      REQUIRE(ra.error.empty());
      REQUIRE(rb.error.empty());
      CHECK(a.metrics().prompt_cache.files_refused == 0);
      CHECK(b.metrics().prompt_cache.files_refused == 0);
    }
    CHECK(dir.files().size() == 1);
    Engine c(m, options(&dir));
    CHECK(ask(c, prompt).timings.n_prompt_restored == 6 * kBlock);
    CHECK(c.metrics().prompt_cache.files_refused == 0);
    for (const auto& f : dir.files()) fs::remove(f);
  }
}

TEST_CASE("prompt cache: the device forward pass (emulated) restores into and stores from its copy of the rows") {
  TempDir dir;
  auto cpu = load(ref("qwen3moe-ref"));
  auto dev = load(ref("qwen3moe-ref"), ComputeBackend::Emulated);
  REQUIRE(dev->backend() == ComputeBackend::Emulated);
  REQUIRE(dev->fingerprint() == cpu->fingerprint());
  const int nv = int(cpu->tokenizer().n_vocab());
  const auto p1 = random_prompt(6 * kBlock + 1, nv, 29), p2 = random_prompt(6 * kBlock + 1, nv, 31);
  Result cpu_p1, dev_p2;
  {
    Engine a(cpu, options(&dir));
    cpu_p1 = ask(a, p1);
  }
  {
    Engine b(dev, options(&dir));
    const Result r = ask(b, p1);  // restored before the device has a copy of the rows
    CHECK(r.timings.n_prompt_restored == 6 * kBlock);
    check_close(r, cpu_p1, 1e-3);
    dev_p2 = ask(b, p2);  // written from the device's rows
  }
  Engine c(cpu, options(&dir));
  const Result r = ask(c, p2);
  CHECK(r.timings.n_prompt_restored == 6 * kBlock);
  check_close(r, dev_p2, 1e-3);
}

TEST_CASE("prompt cache: a directory that cannot be made is refused by name") {
  auto m = load(ref("qwen3moe-ref"));
  EngineOptions o = options(nullptr);
  o.prompt_cache.dir = "/proc/version/cache";
  CHECK_THROWS_WITH(Engine(m, o), Catch::Contains("/proc/version/cache"));
  o.prompt_cache.dir = "/tmp/x";
  o.prefix_cache = false;
  CHECK_THROWS_WITH(Engine(m, o), Catch::Contains("needs the prefix cache"));
}
