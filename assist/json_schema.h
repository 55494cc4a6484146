// JSON Schema → GBNF (engine/grammar.h), so that constrained output parses
// and validates: `response_format` json_schema, tool-call arguments, and
// llama.cpp's `json_schema` field.
//
// What is enforced (the subset the OpenAI and Anthropic tool APIs use):
//   type (one or a list), properties / required, enum, const, anyOf, oneOf
//   (as anyOf: alternatives should not overlap), allOf of objects (merged),
//   items / prefixItems / minItems / maxItems, nested objects and arrays,
//   local $ref (#, #/$defs/…, #/definitions/…; recursion allowed), nullable,
//   strings' minLength / maxLength / pattern (a regex subset: literals,
//   classes, ., groups, |, * + ? {m,n}, \d \w \s; unanchored patterns may
//   have text around them, as JSON Schema's search semantics allow) and
//   format (date, time, date-time, uuid, email, ipv4), integers' minimum
//   when it is 0 or 1 (no sign; no zero).
// Decisions, each producing a subset of the valid documents:
//   - an object with `properties` gets only those, in schema order (the
//     optional ones may be left out), whatever additionalProperties says —
//     OpenAI's strict mode writes them exactly so;
//   - other numeric bounds, uniqueItems, min/maxProperties, not,
//     if/then/else are not enforced (listed in docs/design.md).
// A schema the converter cannot read (a remote $ref, `false`, an unknown
// type) throws SchemaError naming the place in the schema.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Accumulates GBNF rules; equal rules are shared, names kept unique.
class GbnfBuilder {
 public:
  GbnfBuilder();
  // Rules for JSON values of `schema_json` (the schema as JSON text); returns
  // the name of the rule that matches one (with trailing whitespace).
  std::string add_schema(std::string_view name, std::string_view schema_json);
  // The properties of an object schema (a tool's parameters), in schema
  // order, each with the rule for its value — for the call syntaxes that
  // write parameters one by one (Qwen3-Coder's XML, GLM's arg_value). A
  // string parameter is written raw there, not as JSON: `raw` then says
  // so, and `rule` is "" for any text or a rule for the raw enum values.
  struct Param {
    std::string key;
    bool required = false;
    bool raw = false;
    std::string rule;
  };
  std::vector<Param> add_params(std::string_view name, std::string_view schema_json);
  // Adds `name ::= body` (a fresh name if taken by another body); returns the name used.
  std::string add_rule(std::string_view name, const std::string& body);
  std::string gbnf() const;  // every rule, root first when there is one

 private:
  // A fresh name of its own (never shared by an equal body), its body "" for now.
  std::string reserve(std::string_view name);
  friend class SchemaConverter;
  std::map<std::string, std::string> rules_;
  std::vector<std::string> order_;
};

// The whole grammar for one schema: `root` matches a value of it.
std::string json_schema_to_gbnf(std::string_view schema_json);
// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// A GBNF literal for `text`: quoted, with ", \ and control characters escaped.
std::string gbnf_literal(std::string_view text);

}  // namespace moelsp::assist
