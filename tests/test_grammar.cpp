// The output-constraint grammar (engine/grammar.h): GBNF compiled to a
// byte-level automaton, the matcher, the vocabulary mask (checked against
// the naive reference: every token tested alone), and the engine sampling
// under a grammar with a random-weight model.
#include <random>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "test_data.h"

using namespace moelsp;

namespace {

// JSON as llama.cpp's grammars/json.gbnf writes it (bounded whitespace).
const char* kJson = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
)";

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.accepting();
}

bool is_prefix(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text);
}

std::string error_of(std::string_view gbnf) {
  try {
    compile_gbnf(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a JSON grammar accepts JSON and rejects what is not, byte by byte") {
  const auto g = compile_gbnf(kJson);
  CHECK(matches(g, R"({"a": [1, 2.5e3, "x\n\u00e9", true, null], "b": {}})"));
  CHECK(matches(g, "{\"ключ\": \"значение — ✓ 😀\"}"));
  CHECK(matches(g, "{}"));
  CHECK_FALSE(matches(g, "{"));         // a prefix, not a sentence
  CHECK(is_prefix(g, "{\"a\": [1, "));  // …and a valid prefix
  CHECK_FALSE(is_prefix(g, "[1]"));     // root is an object
  CHECK_FALSE(is_prefix(g, R"({"a": tru3})"));
  CHECK_FALSE(is_prefix(g, "{\"a\x01\""));         // a control character inside a string
  CHECK_FALSE(is_prefix(g, "{\"\xC3\x28\""));      // not UTF-8: a lead byte without its continuation
  CHECK_FALSE(is_prefix(g, "{\"\xED\xA0\x80\""));  // a UTF-16 surrogate, which UTF-8 never encodes
  // A token may end inside a character: the matcher stops anywhere.
  GrammarMatcher m(g);
  CHECK(m.accept("{\"\xE2"));
  CHECK(m.accept("\x9C"));
  CHECK(m.accept("\x93\" "));
  CHECK_FALSE(m.accept("x"));  // rejected bytes leave the state as it was
  CHECK(m.accept(": 1}"));
  CHECK(m.accepting());
  CHECK_FALSE(m.finished());  // bounded whitespace may still follow
}

TEST_CASE("repetition counts, optional parts, character classes and the end of a sentence") {
  const auto g = compile_gbnf(R"(root ::= "id-" [0-9]{2,4} ("." [a-c]+)? tail
tail ::= [^\x00-\x7f] | "!")");
  CHECK(matches(g, "id-12!"));
  CHECK(matches(g, "id-1234.abca!"));
  CHECK(matches(g, "id-123é"));
  CHECK_FALSE(is_prefix(g, "id-1!"));
  CHECK_FALSE(is_prefix(g, "id-12345"));
  CHECK_FALSE(is_prefix(g, "id-12.d"));
  GrammarMatcher m(g);
  REQUIRE(m.accept("id-99!"));
  CHECK(m.finished());  // nothing may follow
  const auto any = compile_gbnf("root ::= . .");
  CHECK(matches(any, "a😀"));
  CHECK_FALSE(matches(any, "abc"));
}

TEST_CASE("bad grammars are refused with the line and the problem") {
  CHECK_THAT(error_of("root ::= \"a"), Catch::Contains("line 1") && Catch::Contains("unterminated string"));
  CHECK_THAT(error_of("root ::= a\n"), Catch::Contains("'a' is used but never defined"));
  CHECK_THAT(error_of("x ::= \"a\""), Catch::Contains("no rule 'root'"));
  CHECK_THAT(error_of("root ::= root \"a\" | \"b\""), Catch::Contains("'root' is left-recursive"));
  CHECK_THAT(error_of("root ::= x\nx ::= y? x\ny ::= \"a\""), Catch::Contains("left-recursive"));
  CHECK_THAT(error_of("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("defined twice"));
  CHECK_THAT(error_of("root ::= [z-a]"), Catch::Contains("backwards"));
  CHECK_THAT(error_of("root ::= \"a\"{3,1}"), Catch::Contains("n < m"));
  CHECK_THAT(error_of("root ::= \"a\"{99999}"), Catch::Contains("above"));
  CHECK_THAT(error_of("\n\nroot ::= \"\\q\""), Catch::Contains("line 3") && Catch::Contains("unknown escape"));
  CHECK_THAT(error_of("root ::= ( \"a\" "), Catch::Contains("expected ')'"));
  // Limits that keep a hostile grammar from exhausting the stack or memory.
  CHECK_THAT(error_of(fmt::format("root ::= {}\"a\"{}", std::string(500, '('), std::string(500, ')'))),
             Catch::Contains("nested deeper"));
  std::string huge = "root ::=";
  for (int i = 0; i < 200; ++i) huge += " [a-z]{0,10000}";
  CHECK_THAT(error_of(huge), Catch::Contains("elements"));
  std::string chain = "root ::= r0\n";  // each rule begins with the next: expansion stops, no crash
  for (int i = 0; i < 5000; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r5000 ::= \"a\"\n";
  GrammarMatcher deep(compile_gbnf(chain));
  CHECK_FALSE(deep.accept("a"));
  std::string longer = "root ::= r0\n";  // 100k rules: the left-recursion check is iterative and linear
  for (int i = 0; i < 100000; ++i) longer += fmt::format("r{} ::= r{}\n", i, i + 1);
  longer += "r100000 ::= \"\"\n";
  CHECK_NOTHROW(compile_gbnf(longer));
  std::string copies = "root ::=";  // repeat counts are checked before they are expanded
  for (int i = 0; i < 500; ++i) copies += " \"ab\"{10000}";
  CHECK_THAT(error_of(copies), Catch::Contains("elements"));
  // Many ways to match nothing: each intermediate stack is expanded once per step, not 2^60 times.
  GrammarMatcher empties(compile_gbnf(R"(root ::= ("" | ""){60} "a")"));
  CHECK(empties.accept("a"));
  CHECK(empties.accepting());
}

TEST_CASE("a generated rule never takes the name of a rule the grammar defines later") {
  const auto g = compile_gbnf("root ::= \"a\"? root-1\nroot-1 ::= \"b\"");
  CHECK(matches(g, "ab"));
  CHECK(matches(g, "b"));
  CHECK_FALSE(matches(g, "a"));
  CHECK_FALSE(matches(g, "abb"));
}

TEST_CASE("the vocabulary mask equals checking every token alone, on real vocabularies") {
  const auto g = compile_gbnf(kJson);
  for (const char* vocab :
       {"vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-llama-spm.gguf"}) {
    const auto file = gguf::File::open(test::data_path(vocab));
    const auto tok = Tokenizer::from_gguf(file);
    std::vector<std::string> pieces(tok->n_vocab());
    std::vector<bool> eog(tok->n_vocab());
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i] = tok->piece(TokenId(i), true);
      eog[i] = tok->is_eog(TokenId(i));
    }
    const VocabTrie trie(pieces, eog);
    // States: the start, inside a key, after a colon, inside a value string,
    // inside a number, after a whole object.
    for (const char* prefix : {"", "{\"ke", "{\"key\": ", "{\"key\": \"va", "{\"key\": [12", "{\"a\": 1}"}) {
      INFO(vocab << " after " << prefix);
      GrammarMatcher m(g);
      REQUIRE(m.accept(prefix));
      std::vector<uint8_t> allowed;
      const size_t n = m.mask(trie, allowed);
      size_t naive = 0, differ = 0;
      for (size_t id = 0; id < pieces.size(); ++id) {
        const bool ok = m.allows(trie, int32_t(id));
        naive += ok;
        differ += ok != bool(allowed[id]);
      }
      CHECK(differ == 0);
      CHECK(n == naive);
      CHECK(n > 0);
    }
  }
}

TEST_CASE("sampling under a grammar: every output of a random-weight model matches it") {
  const auto model =
      std::shared_ptr<Model>(Model::load(test::data_path("reference/qwen3moe-ref.gguf"), {.threads = 2}));
  Engine engine(model, {.n_ctx = 512});
  const auto g = compile_gbnf(
      R"(root ::= "{\"answer\": " ("\"yes\"" | "\"no\"" | [0-9]{1,3}) ", \"why\": \"" [a-z ]{1,20} "\"}")");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Request req;
    req.prompt = "The answer is";
    req.max_tokens = 100;
    req.sampling.seed = seed;
    req.sampling.temperature = seed % 2 ? 1.0f : 0.0f;
    req.constraint.grammar = g;
    const Result r = engine.submit(req).wait();
    INFO("seed " << seed << ": " << r.text);
    CHECK(r.reason == FinishReason::Eos);  // ended by the grammar, not by the limit
    CHECK(matches(g, r.text));
  }
}

TEST_CASE("a lazy grammar leaves the text free until its trigger, then constrains what follows") {
  const auto model =
      std::shared_ptr<Model>(Model::load(test::data_path("reference/qwen3moe-ref.gguf"), {.threads = 2}));
  Engine engine(model, {.n_ctx = 512});
  // Find text the model writes freely, and make its third word the trigger.
  Request free;
  free.prompt = "Once upon a time";
  free.max_tokens = 12;
  free.sampling = SamplingParams::greedy();
  const std::string text = engine.submit(free).wait().text;
  REQUIRE(text.size() > 6);
  const std::string trigger = text.substr(2, 3);
  Request lazy = free;
  lazy.max_tokens = 40;
  lazy.constraint.grammar = compile_gbnf("root ::= \"" + trigger + "\" [^\\x00]* \"<call>\" [0-9]{3} \"</call>\"");
  lazy.constraint.triggers = {trigger};
  const Result r = engine.submit(lazy).wait();
  INFO(r.text);
  const size_t at = r.text.find(trigger);
  REQUIRE(at != std::string::npos);
  CHECK(r.text.substr(0, at) == text.substr(0, at));  // free until the trigger: the greedy text itself
  CHECK(is_prefix(compile_gbnf("root ::= [^\\x00]* \"<call>\" [0-9]{3} \"</call>\""), r.text.substr(at)));
}
