// JSON Schema → GBNF (assist/json_schema.h): what each keyword admits and
// refuses, checked by running the compiled grammar over documents. The
// constrained_json test validates sampled outputs with an independent
// validator; this one pins the edges by hand.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "assist/json_schema.h"
#include "engine/grammar.h"

using namespace moelsp;
using assist::json_schema_to_gbnf;

namespace {

bool admits(const std::string& schema, std::string_view doc) {
  GrammarMatcher m(compile_gbnf(json_schema_to_gbnf(schema)));
  return m.accept(doc) && m.accepting();
}

std::string error_of(const std::string& schema) {
  try {
    json_schema_to_gbnf(schema);
  } catch (const assist::SchemaError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("objects: properties in schema order, the optional ones skippable, no others") {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["b"]})";
  CHECK(admits(s, R"({"b": "x"})"));
  CHECK(admits(s, R"({"a": 1, "b": "x", "c": true})"));
  CHECK_FALSE(admits(s, R"({"b": "x", "a": 1})"));  // schema order
  CHECK(admits(s, R"({"b": "x", "c": false})"));
  CHECK_FALSE(admits(s, R"({"a": 1})"));                    // b is required
  CHECK_FALSE(admits(s, R"({"b": "x", "d": 1})"));          // only the declared properties
  CHECK_FALSE(admits(s, R"({"b": "x", "c": 1})"));          // c is a boolean
  CHECK_FALSE(admits(s, R"({"b": "x", "a": 1, "a": 2})"));  // no repeats
  CHECK(admits(R"({"type":"object"})", R"({"any": [1, {"x": null}]})"));
  CHECK(admits(R"({"type":"object","additionalProperties":false})", "{}"));
  CHECK_FALSE(admits(R"({"type":"object","additionalProperties":false})", R"({"a": 1})"));
  CHECK(admits(R"({"type":"object","additionalProperties":{"type":"integer"}})", R"({"a": 1, "b": 2})"));
  CHECK_FALSE(admits(R"({"type":"object","additionalProperties":{"type":"integer"}})", R"({"a": "1"})"));
}

TEST_CASE("arrays, enums, consts, alternatives, references") {
  const std::string arr = R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})";
  CHECK(admits(arr, "[1]"));
  CHECK(admits(arr, "[1, 2, 3]"));
  CHECK_FALSE(admits(arr, "[]"));
  CHECK_FALSE(admits(arr, "[1, 2, 3, 4]"));
  CHECK(admits(R"({"enum":["a b", 1, null, "q\"t"]})", R"("q\"t")"));
  CHECK_FALSE(admits(R"({"enum":["a", "b"]})", R"("c")"));
  CHECK(admits(R"({"const":{"k":[1,"x"]}})", R"({"k":[1,"x"]})"));
  CHECK(admits(R"({"anyOf":[{"type":"string"},{"type":"null"}]})", "null"));
  CHECK(admits(R"({"type":["integer","null"]})", "-12"));
  CHECK_FALSE(admits(R"({"type":["integer","null"]})", "1.5"));
  CHECK(admits(R"({"type":"string","nullable":true})", "null"));
  const std::string tree = R"({"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"]})";
  CHECK(admits(tree, R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]})"));
  CHECK(admits(R"({"$defs":{"P":{"type":"integer","minimum":1}},"$ref":"#/$defs/P"})", "7"));
  CHECK_FALSE(admits(R"({"$defs":{"P":{"type":"integer","minimum":1}},"$ref":"#/$defs/P"})", "0"));
  CHECK(admits(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                            {"properties":{"b":{"type":"integer"}},"required":["b"]}]})",
               R"({"a": 1, "b": 2})"));
}

TEST_CASE("strings: lengths, patterns (as JSON text) and formats") {
  CHECK(admits(R"({"type":"string","minLength":2,"maxLength":3})", R"("ab")"));
  CHECK_FALSE(admits(R"({"type":"string","minLength":2,"maxLength":3})", R"("abcd")"));
  CHECK(admits(R"({"type":"string","maxLength":1})", R"("\n")"));  // an escape is one character
  const std::string pat = R"({"type":"string","pattern":"^(foo|bar)-\\d{2}$"})";
  CHECK(admits(pat, R"("foo-12")"));
  CHECK_FALSE(admits(pat, R"("foo-1")"));
  CHECK_FALSE(admits(pat, R"("xfoo-12")"));
  CHECK(admits(R"({"type":"string","pattern":"ab"})", R"("xxabyy")"));    // unanchored: a search
  CHECK(admits(R"({"type":"string","pattern":"^a\"b$"})", R"("a\"b")"));  // a quote, escaped in JSON
  CHECK(admits(R"({"type":"string","format":"date"})", R"("2024-02-28")"));
  CHECK_FALSE(admits(R"({"type":"string","format":"date"})", R"("2024-02-30")"));
  CHECK_FALSE(admits(R"({"type":"string","format":"date"})", R"("2024-04-31")"));
  CHECK_FALSE(admits(R"({"type":"string","format":"date"})", R"("0000-11-22")"));  // no year 0 (Python's datetime)
  CHECK(admits(R"({"type":"string","format":"date"})", R"("0001-01-01")"));
  CHECK(admits(R"({"type":"string","format":"date"})", R"("0042-01-01")"));
  CHECK(admits(R"({"type":"string","format":"date"})", R"("0999-12-31")"));
  CHECK_FALSE(admits(R"({"type":"string","format":"date-time"})", R"("0000-11-22T03:01:34-00:00")"));
  CHECK(admits(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
  CHECK(admits(R"({"type":"string","format":"ipv4"})", R"("192.168.0.255")"));
  CHECK_FALSE(admits(R"({"type":"string","format":"ipv4"})", R"("192.168.0.256")"));
  CHECK(admits(R"({"type":"string","format":"date-time"})", R"("2024-01-02T03:04:05.123+01:00")"));
}

TEST_CASE("hostile or odd schemas: never invalid JSON, never unbounded work, never a crash") {
  // A class range that spans ", \ and controls admits none of them raw.
  const std::string printable = R"({"type":"string","pattern":"^[ -~]{0,5}$"})";
  CHECK(admits(printable, R"("a b~")"));
  CHECK_FALSE(admits(printable, "\"\"\""));
  CHECK_FALSE(admits(printable, R"("\")"));
  // Two definitions whose names sanitize alike stay two rules.
  const std::string defs = R"({"$defs":{"a_b":{"type":"integer"},"a-b":{"type":"string"}},"type":"object",
    "properties":{"x":{"$ref":"#/$defs/a_b"},"y":{"$ref":"#/$defs/a-b"}},"required":["x","y"]})";
  CHECK(admits(defs, R"({"x": 1, "y": "s"})"));
  CHECK_FALSE(admits(defs, R"({"x": {}, "y": "s"})"));
  CHECK_FALSE(admits(defs, R"({"x": 1, "y": 2})"));
  // Repeated types are converted once; a schema past the budget is refused.
  std::string nested = R"({"type":"string"})";
  for (int i = 0; i < 40; ++i)
    nested = fmt::format(R"({{"type":["object","object"],"properties":{{"a":{}}},"required":["a"]}})", nested);
  CHECK_NOTHROW(json_schema_to_gbnf(nested));
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 25000; ++i) wide += fmt::format(R"({}"p{}":{{}})", i ? "," : "", i);
  wide += "}}";
  CHECK_THAT(error_of(wide), Catch::Contains("too large"));
  // Keywords of the wrong JSON type are the schema's mistake, named.
  CHECK_THAT(error_of(R"({"type":"array","minItems":"3"})"), Catch::Contains("minItems"));
  CHECK_THAT(error_of(R"({"type":"string","maxLength":4294967296})"), Catch::Contains("maxLength"));
  CHECK_FALSE(error_of(R"({"type":"array","prefixItems":{"a":1}})").empty());
}

TEST_CASE("schemas that cannot be compiled say where and why") {
  CHECK_THAT(error_of(R"({"type":"strnig"})"), Catch::Contains("schema/type") && Catch::Contains("'strnig'"));
  CHECK_THAT(error_of(R"({"$ref":"https://x/y.json"})"), Catch::Contains("not a local reference"));
  CHECK_THAT(error_of(R"({"$ref":"#/$defs/Nope"})"), Catch::Contains("names nothing"));
  CHECK_THAT(error_of("false"), Catch::Contains("admits no value"));
  CHECK_THAT(error_of(R"({"type":"array","minItems":3,"maxItems":1})"), Catch::Contains("minItems"));
  CHECK_THAT(error_of(R"({"type":"string","pattern":"^(a$"})"), Catch::Contains("pattern"));
  CHECK_THAT(error_of(R"({"properties":{"a":{"type":"nope"}}})"), Catch::Contains("schema/properties/a/type"));
  CHECK_THAT(error_of("{not json"), Catch::Contains("not JSON"));
}
