#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "test_data.h"

using namespace moelsp;

namespace {
std::unique_ptr<Tokenizer> load_tok(const std::string& rel) {
  const auto f = gguf::File::open(test::data_path(rel));
  return Tokenizer::from_gguf(f);
}
}  // namespace

TEST_CASE("reference models' prompts tokenize exactly as llama.cpp fed them") {
  // tests/data/reference/*.json: prompt_ids = llama_tokenize(prompt_text, add_special=true, parse_special=false)
  for (const char* name : {"deepseek2-lite-ref", "qwen3moe-ref", "mixtral-ref"}) {
    INFO(name);
    const auto j = nlohmann::json::parse(test::read_file(test::data_path(std::string("reference/") + name + ".json")));
    const auto tok = load_tok(std::string("reference/") + name + ".gguf");
    const auto ids = tok->encode(j["prompt_text"].get<std::string>(), {.add_special = true});
    CHECK(ids == j["prompt_ids"].get<std::vector<TokenId>>());
    if (j["bos_added"].get<bool>()) CHECK(ids.front() == j["bos_id"].get<TokenId>());
  }
}

TEST_CASE("special tokens are parsed only when asked") {
  const auto tok = load_tok("vocab/ggml-vocab-deepseek-coder.gguf");
  const TokenId eos = tok->special().eos;
  REQUIRE(eos != kNoToken);
  const std::string eos_text = tok->token_text(eos);
  const auto parsed = tok->encode("a" + eos_text + "b", {.parse_special = true});
  REQUIRE(parsed.size() == 3);
  CHECK(parsed[1] == eos);
  const auto plain = tok->encode("a" + eos_text + "b");
  CHECK(plain.size() > 3);
  CHECK(std::find(plain.begin(), plain.end(), eos) == plain.end());
  CHECK(tok->is_eog(eos));
  // control tokens decode to nothing unless rendered
  CHECK(tok->decode(parsed) == "ab");
  CHECK(tok->decode(parsed, {.render_special = true}) == "a" + eos_text + "b");
}

TEST_CASE("FIM tokens of a coder vocabulary are found") {
  const auto tok = load_tok("vocab/ggml-vocab-deepseek-coder.gguf");
  const auto& s = tok->special();
  CHECK(s.fim_pre != kNoToken);
  CHECK(s.fim_suf != kNoToken);
  CHECK(s.fim_mid != kNoToken);
  CHECK((tok->attr(s.fim_pre) & kAttrControl));
  const auto st = load_tok("vocab/ggml-vocab-starcoder.gguf");
  CHECK(st->special().fim_pre == st->find("<fim_prefix>"));
  CHECK(st->special().fim_mid == st->find("<fim_middle>"));
}

TEST_CASE("SentencePiece: add_special adds BOS, and special text is split out") {
  const auto tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
  const auto ids = tok->encode("Hello world", {.add_special = true});
  REQUIRE(!ids.empty());
  CHECK(ids[0] == tok->special().bos);
  CHECK(tok->decode(ids) == "Hello world");
  const auto with_eos = tok->encode("Hi</s>there", {.parse_special = true});
  CHECK(std::find(with_eos.begin(), with_eos.end(), tok->special().eos) != with_eos.end());
  CHECK(tok->special().linefeed == tok->find("<0x0A>"));
}

TEST_CASE("invalid UTF-8 input: byte tokens for SentencePiece, U+FFFD for byte-level BPE") {
  const auto spm = load_tok("vocab/ggml-vocab-llama-spm.gguf");
  const std::string bad =
      "ab\xff"
      "cd\xe4";
  const auto ids = spm->encode(bad);
  CHECK(std::find(ids.begin(), ids.end(), spm->find("<0xFF>")) != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), spm->find("<0xE4>")) != ids.end());
  CHECK(spm->decode(ids) == bad);  // raw bytes come back
  const auto bpe = load_tok("vocab/ggml-vocab-gpt-2.gguf");
  CHECK(bpe->decode(bpe->encode(bad)) ==
        "ab\xef\xbf\xbd"
        "cd\xef\xbf\xbd");
}

TEST_CASE("streaming decode never splits a UTF-8 sequence") {
  const auto tok = load_tok("vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "emoji 🦙 and 中文 and é";
  const auto ids = tok->encode(text);
  StreamingDecoder dec(*tok);
  std::string out;
  for (TokenId id : ids) {
    const std::string part = dec.push(id);
    CHECK(valid_utf8_prefix(part) == part.size());
    out += part;
  }
  out += dec.flush();
  CHECK(out == text);
  // A lone lead byte at the end is flushed as U+FFFD.
  StreamingDecoder d2(*tok);
  const auto e4 = tok->encode("\xf0\x9f\xa6\x99");  // 🦙 → several byte tokens
  REQUIRE(e4.size() >= 2);
  CHECK(d2.push(e4[0]).empty());
  CHECK(d2.flush() == "\xef\xbf\xbd");
}

TEST_CASE("streaming SentencePiece decode drops only the first leading space") {
  const auto tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
  const auto ids = tok->encode("Hello world  again");
  StreamingDecoder dec(*tok);
  std::string out;
  for (TokenId id : ids) out += dec.push(id);
  CHECK(out + dec.flush() == "Hello world  again");
}

TEST_CASE("unsupported tokenizers fail with a clear message") {
  const auto bert = gguf::File::open(test::data_path("vocab/ggml-vocab-bert-bge.gguf"));
  CHECK_THROWS_WITH(Tokenizer::from_gguf(bert), Catch::Contains("bert") && Catch::Contains("not supported"));

  gguf::Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "no-such-pre");
  w.set("tokenizer.ggml.tokens", gguf::make_array(std::vector<std::string>{"a", "b"}));
  w.set("tokenizer.ggml.merges", gguf::make_array(std::vector<std::string>{"a b"}));
  const auto f = gguf::File::from_bytes(w.to_bytes(), "x.gguf");
  CHECK_THROWS_WITH(Tokenizer::from_gguf(f), Catch::Contains("unknown pre-tokenizer 'no-such-pre'"));

  gguf::Writer w2;
  w2.set("general.architecture", "llama");
  const auto f2 = gguf::File::from_bytes(w2.to_bytes(), "y.gguf");
  CHECK_THROWS_WITH(Tokenizer::from_gguf(f2), Catch::Contains("y.gguf") && Catch::Contains("no tokenizer"));

  gguf::Writer w3;
  w3.set("tokenizer.ggml.model", "gpt2");
  w3.set("tokenizer.ggml.pre", "qwen2");
  w3.set("tokenizer.ggml.tokens", gguf::make_array(std::vector<std::string>{"a", "b"}));
  w3.set("tokenizer.ggml.merges", gguf::make_array(std::vector<std::string>{"a b"}));
  w3.set("tokenizer.ggml.eos_token_id", uint32_t(99));
  const auto f3 = gguf::File::from_bytes(w3.to_bytes(), "z.gguf");
  CHECK_THROWS_WITH(Tokenizer::from_gguf(f3), Catch::Contains("outside the vocabulary"));
}

TEST_CASE("the FIM order a file declares (moelsp.fim_order): psm, spm, or a clear error") {
  const auto with_order = [](const char* order) {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", "qwen2");
    w.set("tokenizer.ggml.tokens", gguf::make_array(std::vector<std::string>{"a", "b"}));
    w.set("tokenizer.ggml.merges", gguf::make_array(std::vector<std::string>{"a b"}));
    if (order) w.set("moelsp.fim_order", order);
    return gguf::File::from_bytes(w.to_bytes(), "order.gguf");
  };
  CHECK_FALSE(Tokenizer::from_gguf(with_order(nullptr))->special().fim_spm);
  CHECK_FALSE(Tokenizer::from_gguf(with_order("psm"))->special().fim_spm);
  CHECK(Tokenizer::from_gguf(with_order("spm"))->special().fim_spm);
  CHECK_THROWS_WITH(Tokenizer::from_gguf(with_order("pms")),
                    Catch::Contains("moelsp.fim_order") && Catch::Contains("\"pms\"") && Catch::Contains("psm"));
}

TEST_CASE("a tiny BPE vocabulary built with our writer merges by rank") {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "gpt-2");
  // byte-level: 'Ġ' is the space byte
  w.set("tokenizer.ggml.tokens", gguf::make_array(std::vector<std::string>{"a", "b", "c", "ab", "bc", "abc", "\xc4\xa0",
                                                                           "\xc4\xa0"
                                                                           "a"}));
  w.set("tokenizer.ggml.merges", gguf::make_array(std::vector<std::string>{"b c", "a b", "a bc", "\xc4\xa0 a"}));
  w.set("tokenizer.ggml.padding_token_id", int32_t(-1));  // "none", as some converters write it
  w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
  const auto f = gguf::File::from_bytes(w.to_bytes(), "tiny.gguf");
  const auto tok = Tokenizer::from_gguf(f);
  CHECK(tok->special().pad == kNoToken);
  CHECK(tok->special().eos == 2);
  CHECK(tok->is_eog(2));
  // "abc": rank 0 merges b+c first, then a+bc → abc (not ab + c).
  CHECK(tok->encode("abc") == std::vector<TokenId>{5});
  CHECK(tok->encode("ab") == std::vector<TokenId>{3});
  CHECK(tok->encode(" a") == std::vector<TokenId>{7});
  CHECK(tok->decode(std::vector<TokenId>{7, 5}) == " aabc");
}

// gpt-oss's harmony vocabulary: <|end|> closes a channel's message inside an
// answer, so it must neither end generation nor vanish from the text; the
// turn ends at <|return|> or <|call|>.
TEST_CASE("harmony vocabularies: <|end|> is not end-of-generation and the channel markers render as text") {
  const std::vector<std::string> texts{"a",       "b",          "<|start|>", "<|channel|>",   "<|message|>",
                                       "<|end|>", "<|return|>", "<|call|>",  "<|constrain|>", "<|endoftext|>"};
  const auto build = [&](size_t n) {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", "gpt-2");
    w.set("tokenizer.ggml.tokens", gguf::make_array(std::vector<std::string>(texts.begin(), texts.begin() + n)));
    std::vector<int32_t> types(n, 1);
    for (size_t i = 2; i < n; ++i) types[i] = 3;  // CONTROL, as the converter writes them
    w.set("tokenizer.ggml.token_type", gguf::make_array(types));
    w.set("tokenizer.ggml.merges", gguf::make_array(std::vector<std::string>{}));
    w.set("tokenizer.ggml.eos_token_id", uint32_t(n - 1));
    return Tokenizer::from_gguf(gguf::File::from_bytes(w.to_bytes(), "harmony.gguf"));
  };
  const auto tok = build(texts.size());
  CHECK_FALSE(tok->is_eog(5));  // <|end|>
  CHECK(tok->is_eog(6));        // <|return|>
  CHECK(tok->is_eog(7));        // <|call|>
  CHECK(tok->decode(std::vector<TokenId>{3, 0, 4, 1, 5, 2}) == "<|channel|>a<|message|>b<|end|><|start|>");
  // Without <|return|> and <|call|> (another family's <|end|>), <|end|> still ends generation.
  const auto other = build(6);
  CHECK(other->is_eog(5));
}
