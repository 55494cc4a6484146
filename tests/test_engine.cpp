// The engine API on a real (tiny, random-weight) model: streaming, stop
// strings, limits, cancellation, prefix reuse, determinism; and sampling.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "test_data.h"

using namespace moelsp;

namespace {

std::shared_ptr<Model> model(const std::string& name = "qwen3moe-ref") {
  return std::shared_ptr<Model>(Model::load(test::data_path("reference/" + name + ".gguf"), {.threads = 2}));
}

std::vector<TokenId> prompt_ids(const std::string& name = "qwen3moe-ref") {
  const auto j = nlohmann::json::parse(test::read_file(test::data_path("reference/" + name + ".json")));
  return j["prompt_ids"].get<std::vector<TokenId>>();
}

}  // namespace

TEST_CASE("greedy generation through the engine equals llama.cpp's continuation, tokens stream") {
  const auto j = nlohmann::json::parse(test::read_file(test::data_path("reference/qwen3moe-ref.json")));
  Engine engine(model(), {.n_ctx = 128});
  Request req;
  req.prompt_tokens = prompt_ids();
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 16;
  req.ignore_eos = true;
  std::string streamed;
  int calls = 0;
  const Result r = engine
                       .submit(req, {.on_token =
                                         [&](TokenId, const std::string& t) {
                                           streamed += t;
                                           ++calls;
                                         }})
                       .wait();
  CHECK(r.reason == FinishReason::Length);
  CHECK(r.tokens == j["greedy_ids"].get<std::vector<TokenId>>());
  CHECK(streamed == r.text);
  CHECK(calls >= 1);
  CHECK(r.timings.n_generated == 16);
  CHECK(r.timings.prompt_ms > 0);
}

TEST_CASE("the same seed gives the same tokens, another seed usually does not") {
  Engine engine(model(), {.n_ctx = 128});
  auto run = [&](uint64_t seed) {
    Request req;
    req.prompt_tokens = prompt_ids();
    req.sampling.temperature = 1.5f;
    req.sampling.top_k = 0;
    req.sampling.top_p = 1.0f;
    req.sampling.min_p = 0.0f;
    req.sampling.seed = seed;
    req.max_tokens = 24;
    req.ignore_eos = true;
    return engine.submit(req).wait().tokens;
  };
  const auto a = run(7), b = run(7), c = run(8);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("stop strings end generation and are never emitted") {
  auto m = model();
  Engine engine(m, {.n_ctx = 128});
  Request req;
  req.prompt_tokens = prompt_ids();
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 16;
  req.ignore_eos = true;
  const Result full = engine.submit(req).wait();
  REQUIRE(full.text.size() > 6);
  // Stop on a piece from the middle of the greedy text.
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  req.stop = {stop};
  std::string streamed;
  const Result r = engine.submit(req, {.on_token = [&](TokenId, const std::string& t) { streamed += t; }}).wait();
  CHECK(r.reason == FinishReason::Stop);
  CHECK(r.text == full.text.substr(0, full.text.find(stop)));
  CHECK(streamed == r.text);
}

TEST_CASE("should_stop ends generation early, keeping the text it saw") {
  Engine engine(model("qwen3moe-ref"));
  Request req;
  req.prompt_tokens = prompt_ids("qwen3moe-ref");
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 40;
  req.ignore_eos = true;
  const Result full = engine.submit(req).wait();
  REQUIRE(full.tokens.size() == 40);
  // Stop once the text has 4 tokens' worth: the predicate sees every piece.
  int asked = 0;
  std::string seen;
  const Result r = engine
                       .submit(req, {.should_stop =
                                         [&](const std::string& text) {
                                           seen = text;
                                           return ++asked >= 4;
                                         }})
                       .wait();
  CHECK(r.reason == FinishReason::Stop);
  CHECK(r.tokens.size() < 40);
  CHECK(asked == 4);
  CHECK(seen == r.text);
  CHECK(full.text.compare(0, r.text.size(), r.text) == 0);  // what it kept is the start of the full answer
}

TEST_CASE("cancellation ends a request promptly, the engine keeps serving") {
  Engine engine(model("mixtral-ref"), {.n_ctx = 4096});
  Request req;
  req.prompt_tokens = prompt_ids("mixtral-ref");
  req.max_tokens = 100000;
  req.ignore_eos = true;
  std::atomic<int> seen{0};
  Handle h = engine.submit(req, {.on_token = [&](TokenId, const std::string&) { ++seen; }});
  while (seen < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  h.cancel();
  const Result r = h.wait();
  CHECK(r.reason == FinishReason::Cancelled);
  CHECK(r.tokens.size() < 4000);
  // a request cancelled before it starts
  Request q = req;
  q.max_tokens = 4;
  Handle h2 = engine.submit(q);
  h2.cancel();
  CHECK(h2.wait().reason == FinishReason::Cancelled);
  // and the engine still works
  q.sampling = SamplingParams::greedy();
  CHECK(engine.submit(q).wait().tokens.size() == 4);
}

TEST_CASE("time and token limits") {
  Engine engine(model("mixtral-ref"), {.n_ctx = 4096});
  Request req;
  req.prompt_tokens = prompt_ids("mixtral-ref");
  req.ignore_eos = true;
  req.max_tokens = 5;
  CHECK(engine.submit(req).wait().tokens.size() == 5);
  req.max_tokens = 100000;
  req.t_max_predict_ms = 50;
  const Result r = engine.submit(req).wait();
  CHECK(r.reason == FinishReason::Timeout);
  CHECK(!r.tokens.empty());
}

TEST_CASE("a prompt out of time with finish_prompt answers at once and fills the prefix cache in the background") {
  // Steps of 4 × 32 prompt tokens (a request alone gets 4× prefill_chunk): the prompt takes 5.
  Engine engine(model("mixtral-ref"), {.n_ctx = 4096, .block_size = 16, .prefill_chunk = 32});
  Request req;
  req.prompt_tokens = prompt_ids("mixtral-ref");
  while (req.prompt_tokens.size() < 600) req.prompt_tokens.push_back(req.prompt_tokens[req.prompt_tokens.size() % 20]);
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 4;
  req.ignore_eos = true;
  req.t_max_prompt_ms = 1;  // runs out after its first chunk
  req.finish_prompt = true;
  const Result timed_out = engine.submit(req).wait();
  CHECK(timed_out.reason == FinishReason::Timeout);
  CHECK(timed_out.tokens.empty());
  for (int i = 0; i < 500 && engine.metrics().running + engine.metrics().waiting > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(engine.metrics().running + engine.metrics().waiting == 0);
  // The whole prompt is cached now (all but its last token, which runs again for the logits).
  req.t_max_prompt_ms = 0;
  const Result again = engine.submit(req).wait();
  CHECK(again.timings.n_prompt_cached == int(req.prompt_tokens.size()) - 1);
  CHECK(again.tokens.size() == 4);
  // Without finish_prompt the prefill stops where it was: less is cached.
  Engine plain(model("mixtral-ref"), {.n_ctx = 4096, .block_size = 16, .prefill_chunk = 32});
  req.t_max_prompt_ms = 1;
  req.finish_prompt = false;
  CHECK(plain.submit(req).wait().reason == FinishReason::Timeout);
  req.t_max_prompt_ms = 0;
  CHECK(plain.submit(req).wait().timings.n_prompt_cached < int(req.prompt_tokens.size()) - 1);
}

TEST_CASE("a repeated prompt reuses the cached prefix and gives the same result") {
  for (int bs :
       {16, 1}) {  // whole blocks, then the matching head of a cached block (copied); the last token runs again
    Engine engine(model(), {.n_ctx = 128, .block_size = bs});
    Request req;
    req.prompt_tokens = prompt_ids();
    req.sampling = SamplingParams::greedy();
    req.max_tokens = 8;
    req.ignore_eos = true;
    const int n = int(req.prompt_tokens.size());
    INFO("block size " << bs << ", prompt " << n);
    const Result a = engine.submit(req).wait();
    CHECK(a.timings.n_prompt_cached == 0);
    const Result b = engine.submit(req).wait();
    CHECK(b.timings.n_prompt_cached == n - 1);
    CHECK(a.tokens == b.tokens);
    // a prompt that shares only a prefix
    req.prompt_tokens.back() = req.prompt_tokens.front();
    const Result c = engine.submit(req).wait();
    CHECK(c.timings.n_prompt_cached == n - 1);
    const EngineMetrics m = engine.metrics();
    CHECK(m.kv.hit_tokens == b.timings.n_prompt_cached + c.timings.n_prompt_cached);
    CHECK(m.prefix_hit_rate > 0.5);
    CHECK(m.requests == 3);
  }
}

TEST_CASE("errors are results, not crashes") {
  Engine engine(model(), {.n_ctx = 16});
  Request req;
  req.prompt_tokens = std::vector<TokenId>(40, 5);
  CHECK(engine.submit(req).wait().reason == FinishReason::Error);
  req.prompt_tokens = {1, 2, 99999999};
  const Result r = engine.submit(req).wait();
  CHECK(r.reason == FinishReason::Error);
  CHECK_THAT(r.error, Catch::Contains("outside the vocabulary"));
}

TEST_CASE("sampler: greedy, top-k 1, penalties and determinism") {
  std::vector<float> logits{1.0f, 3.0f, 2.0f, -1.0f};
  Sampler g(SamplingParams::greedy(), 4);
  CHECK(g.sample(logits.data(), {}) == 1);
  SamplingParams p;
  p.top_k = 1;
  p.seed = 3;
  Sampler k1(p, 4);
  for (int i = 0; i < 20; ++i) CHECK(k1.sample(logits.data(), {}) == 1);
  // a strong repetition penalty on the best token moves greedy to the next
  SamplingParams rp = SamplingParams::greedy();
  rp.repeat_penalty = 2.0f;
  Sampler r(rp, 4);
  const std::vector<TokenId> hist{1};
  CHECK(r.sample(logits.data(), hist) == 2);
  SamplingParams fp = SamplingParams::greedy();
  fp.frequency_penalty = 0.6f;
  fp.presence_penalty = 0.0f;
  Sampler f(fp, 4);
  const std::vector<TokenId> hist2{1, 1};
  CHECK(f.sample(logits.data(), hist2) == 2);  // 3 - 1.2 < 2
  // min-p removes tokens far below the best
  SamplingParams mp;
  mp.min_p = 0.5f;
  mp.top_k = 0;
  mp.top_p = 1.0f;
  mp.seed = 9;
  Sampler m(mp, 4);
  for (int i = 0; i < 50; ++i) CHECK(m.sample(logits.data(), {}) == 1);  // p(2)/p(1) = e^-1 < 0.5
  // top-p 0.5 keeps only the most likely token here
  SamplingParams tp;
  tp.top_p = 0.5f;
  tp.top_k = 0;
  tp.min_p = 0;
  Sampler t(tp, 4);
  for (int i = 0; i < 50; ++i) CHECK(t.sample(logits.data(), {}) == 1);
}

TEST_CASE("chat templates") {
  const std::vector<ChatMessage> msgs{{"system", "Be brief."}, {"user", "Hi"}};
  CHECK(apply_chat_template("chatml", msgs) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(apply_chat_template("deepseek2", msgs) == "Be brief.\n\nUser: Hi\n\nAssistant:");
  CHECK(apply_chat_template("mistral", {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}) ==
        "[INST] Hi [/INST] Hello</s>[INST] Bye [/INST]");
  // The model's own template runs, whatever it is; a built-in one only when chosen.
  const ChatTemplate own(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "");
  CHECK(own.apply(msgs) == apply_chat_template("chatml", msgs));
  CHECK(own.describe() == "the model's template");
  CHECK(ChatTemplate("{{ messages[-1].content }}!", "").apply(msgs) == "Hi!");
  CHECK(ChatTemplate("{{ messages[-1].content }}!", "chatml").apply(msgs) == apply_chat_template("chatml", msgs));
  CHECK_THROWS_WITH(ChatTemplate("", ""), Catch::Contains("no chat template") && Catch::Contains("--chat-template"));
  CHECK_THROWS_WITH(ChatTemplate("", "nope"), Catch::Contains("unknown chat template 'nope'"));
  CHECK_THROWS_WITH(ChatTemplate("{{ x }}\n{{ x | nosuch }}", ""),
                    Catch::Contains("line 2: unknown filter 'nosuch'") && Catch::Contains("--chat-template"));
  // A BOS the tokenizer adds itself is not written twice.
  const ChatTemplate with_bos("{{ bos_token }}{{ messages[-1].content }}", "",
                              {.bos = "<s>", .eos = "</s>", .tokenizer_adds_bos = true});
  CHECK(with_bos.apply(msgs) == "Hi");
}

TEST_CASE("a higher-priority request overtakes a running one between tokens") {
  Engine engine(model("mixtral-ref"), {.n_ctx = 4096});
  Request slow;
  slow.prompt_tokens = prompt_ids("mixtral-ref");
  slow.max_tokens = 3000;
  slow.ignore_eos = true;
  slow.priority = 0;
  std::atomic<int> slow_tokens{0};
  Handle hs = engine.submit(slow, {.on_token = [&](TokenId, const std::string&) { ++slow_tokens; }});
  while (slow_tokens < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Request fast = slow;
  fast.max_tokens = 4;
  fast.priority = 10;
  fast.sampling = SamplingParams::greedy();
  const Result rf = engine.submit(fast).wait();
  CHECK(rf.tokens.size() == 4);
  CHECK(!hs.done());  // the long request is still going
  hs.cancel();
  CHECK(hs.wait().reason == FinishReason::Cancelled);
}

namespace {

// A copy of a reference model with 0xFF bytes (NaN in F32, F16 and BF16, and
// in a quantized block's scale) at the start of one tensor's data.
std::string with_nan_in(const std::string& name, const std::string& tensor) {
  const std::string src = test::data_path("reference/" + name + ".gguf");
  const std::string out = "test_engine_nan_" + tensor + ".gguf";
  std::filesystem::copy_file(src, out, std::filesystem::copy_options::overwrite_existing);
  const auto f = gguf::File::open(src);
  const auto* t = f.tensor(tensor);
  REQUIRE(t);
  std::fstream io(out, std::ios::binary | std::ios::in | std::ios::out);
  io.seekp(std::streamoff(f.data_offset() + t->offset));
  const char nan[4] = {'\xff', '\xff', '\xff', '\xff'};
  io.write(nan, 4);
  return out;
}

}  // namespace

TEST_CASE(
    "non-finite weights: the loader names a damaged norm, and damage it cannot see ends the request with an error") {
  const std::string norm = with_nan_in("qwen3moe-ref", "output_norm.weight");
  CHECK_THROWS_WITH(Model::load(norm), Catch::Contains("output_norm.weight") && Catch::Contains("NaN"));
  const std::string embd = with_nan_in("qwen3moe-ref", "token_embd.weight");
  CHECK_THROWS_WITH(Model::load(embd), Catch::Contains("token_embd.weight"));
  // A layer weight is not checked at load (too large to read whole): the
  // forward pass's logits show it, and the request ends with an error, not token 0.
  const std::string layer = with_nan_in("qwen3moe-ref", "blk.0.attn_q.weight");
  Engine engine(std::shared_ptr<Model>(Model::load(layer, {.threads = 2})));
  Request req;
  req.prompt_tokens = prompt_ids("qwen3moe-ref");
  req.sampling = SamplingParams::greedy();
  req.max_tokens = 4;
  const Result r = engine.submit(req).wait();
  CHECK(r.reason == FinishReason::Error);
  CHECK_THAT(r.error, Catch::Contains("non-finite"));
  CHECK(r.tokens.empty());
  for (const auto& f : {norm, embd, layer}) std::filesystem::remove(f);
}

// Prompt lookup decoding (Request::draft_max): the output must equal plain
// greedy decoding token for token — across block sizes (a rejected draft's
// rows are cut inside a block, or whole blocks go), with a stop string and a
// token limit that fall inside a draft, with logprobs, and with several
// requests verifying drafts in one batch. These random-weight models fall
// into loops quickly, which is where drafts are confirmed.
TEST_CASE("prompt lookup drafts give exactly the plain greedy output, alone and batched") {
  const auto ids = prompt_ids();
  std::vector<TokenId> repetitive = ids;  // the prompt twice: its second half is predictable from the first
  repetitive.insert(repetitive.end(), ids.begin() + 1, ids.end());
  for (int bs : {16, 5, 1}) {
    Engine engine(model(), {.n_ctx = 256, .block_size = bs});
    int64_t accepted = 0;
    for (const auto& prompt : {ids, repetitive})
      for (int max_tokens : {40, 7}) {
        Request plain;
        plain.prompt_tokens = prompt;
        plain.sampling = SamplingParams::greedy();
        plain.max_tokens = max_tokens;
        plain.ignore_eos = true;
        plain.logprobs = 2;
        Request drafted = plain;
        drafted.draft_max = 6;
        INFO("block size " << bs << ", prompt " << prompt.size() << " tokens, max_tokens " << max_tokens);
        const Result a = engine.submit(plain).wait();
        const auto before = engine.metrics();
        const Result b = engine.submit(drafted).wait();
        const auto after = engine.metrics();
        CHECK(a.tokens == b.tokens);
        CHECK(a.text == b.text);
        CHECK(a.reason == b.reason);
        REQUIRE(a.logprobs.size() == b.logprobs.size());
        for (size_t i = 0; i < a.logprobs.size(); ++i)
          CHECK(std::fabs(a.logprobs[i].logprob - b.logprobs[i].logprob) < 1e-3);
        CHECK(after.draft_steps > before.draft_steps);
        accepted += after.draft_accepted - before.draft_accepted;
        // A stop string on text the plain run produced ends both at the same place.
        if (a.text.size() > 8) {
          plain.stop = drafted.stop = {a.text.substr(a.text.size() / 2, 3)};
          const Result c = engine.submit(plain).wait(), d = engine.submit(drafted).wait();
          CHECK(c.tokens == d.tokens);
          CHECK(c.text == d.text);
        }
      }
    CHECK(accepted > 0);
    const auto m = engine.metrics();
    WARN("block size " << bs << ": " << m.draft_steps << " steps with a draft, " << m.draft_tokens << " draft tokens, "
                       << m.draft_accepted << " confirmed");
    // Three at once: drafts verified side by side in one step.
    Request r;
    r.prompt_tokens = repetitive;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = 30;
    r.ignore_eos = true;
    const Result alone = engine.submit(r).wait();
    r.draft_max = 4;
    std::vector<Handle> hs;
    for (int k = 0; k < 3; ++k) hs.push_back(engine.submit(r));
    for (auto& h : hs) CHECK(h.wait().tokens == alone.tokens);
    engine.inspect_pool([](const BlockPool& p) { CHECK_NOTHROW(p.check()); });
  }
}

TEST_CASE("prompt lookup finds the latest earlier occurrence of the last 4, 3 or 2 tokens") {
  const std::vector<TokenId> h{1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
  CHECK(lookup_draft(h, 3) == std::vector<TokenId>{7, 8, 5});  // "1 2 3" last seen before 7 8 5
  CHECK(lookup_draft(h, 10) == std::vector<TokenId>{7, 8, 5, 1, 2, 3});
  CHECK(lookup_draft(std::vector<TokenId>{4, 5, 6, 4, 5}, 4) == std::vector<TokenId>{6, 4, 5});
  CHECK(lookup_draft(std::vector<TokenId>{1, 2, 3, 4}, 4).empty());  // no repeat
  CHECK(lookup_draft(std::vector<TokenId>{7, 7, 1, 7}, 4).empty());  // a 1-token key is not enough
  CHECK(lookup_draft(std::vector<TokenId>{}, 4).empty());
}

// The engine's thread pool (engine/cpu/thread_pool.h, internal): threads claim
// chunks, so every index must be covered exactly once for any chunk count,
// across many back-to-back loops (a late worker must never run a chunk of a
// loop that already ended), and chunk boundaries must not depend on which
// thread runs them.
#include "../engine/cpu/thread_pool.h"

TEST_CASE("thread pool: claimed chunks cover every index once, loop after loop") {
  for (int threads : {1, 2, 3, 5})
    for (int per_thread : {1, 4, 100}) {
      ThreadPool pool(threads);
      for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(64), int64_t(1000)}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
              std::lock_guard lock(mu);
              ranges.emplace_back(b, e);
            },
            per_thread);
        INFO(threads << " threads, " << per_thread << " chunks per thread, n " << n);
        for (auto& h : hits) REQUIRE(h.load() == 1);
        // The same boundaries whoever ran them: n·c/chunks.
        const int64_t chunks = std::min<int64_t>(n, threads == 1 ? 1 : int64_t(threads) * per_thread);
        if (threads > 1 && n > 1) {
          std::sort(ranges.begin(), ranges.end());
          REQUIRE(int64_t(ranges.size()) <= chunks);
          for (size_t c = 0; c < ranges.size(); ++c) CHECK(ranges[c].second - ranges[c].first >= 1);
        }
      }
      // Many short loops back to back: each sees only its own work.
      std::atomic<int64_t> sum{0};
      for (int k = 0; k < 2000; ++k) {
        std::atomic<int64_t> loop{0};
        pool.parallel_for(
            8, [&](int64_t b, int64_t e) { loop += e - b; }, per_thread);
        REQUIRE(loop.load() == 8);
        sum += loop;
      }
      CHECK(sum.load() == 16000);
    }
}
