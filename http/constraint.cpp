// Output constraints from the APIs' fields (constraint.h).
#include "constraint.h"

#include <fmt/format.h>

#include "assist/json_schema.h"

namespace moelsp::http {

namespace {

OutputConstraint compiled(const std::string& gbnf, const char* param) {
  try {
    return {compile_gbnf(gbnf), {}, {}};
  } catch (const GrammarError& e) {
    throw BadField(fmt::format("field '{}': {}", param, e.what()), param);
  }
}

OutputConstraint any_object() { return compiled(assist::json_object_gbnf(), "response_format"); }

// The schema at `path` in the body, as its text with the keys in the order
// sent; `parsed` (keys sorted) where the text disagrees with the parsed body
// (a key sent twice: ordered_json keeps the first, json the last).
std::string schema_text(const std::string& body, const char* path, const json& parsed) {
  try {
    const nlohmann::ordered_json in_order =
        nlohmann::ordered_json::parse(body).at(nlohmann::ordered_json::json_pointer(path));
    if (json::parse(in_order.dump()) == parsed) return in_order.dump();
  } catch (const std::exception&) {
  }
  return parsed.dump();
}

OutputConstraint schema_constraint(const json& schema, const std::string& text, const char* param) {
  if (!schema.is_object() && !schema.is_boolean())
    throw BadField(fmt::format("field '{}' must be a JSON Schema (an object)", param), param);
  try {
    return compiled(assist::json_schema_to_gbnf(text), param);
  } catch (const assist::SchemaError& e) {
    throw BadField(fmt::format("field '{}': {}", param, e.what()), param);
  }
}

OutputConstraint schema_at(const json& j, const std::string& body, const char* pointer, const char* param) {
  const json& schema = j.at(json::json_pointer(pointer));
  return schema_constraint(schema, schema_text(body, pointer, schema), param);
}

}  // namespace

OutputConstraint llama_constraint(const json& j, const std::string& body) {
  if (has(j, "grammar") && has(j, "json_schema"))
    throw BadField("fields 'grammar' and 'json_schema' cannot be used together", "grammar");
  if (has(j, "json_schema")) return schema_at(j, body, "/json_schema", "json_schema");
  if (!has(j, "grammar")) return {};
  if (!j["grammar"].is_string()) throw BadField("field 'grammar' must be a string (GBNF)", "grammar");
  const std::string g = j["grammar"];
  return g.empty() ? OutputConstraint{} : compiled(g, "grammar");
}

OutputConstraint response_format(const json& j, const std::string& body) {
  if (!has(j, "response_format")) return {};
  const json& f = j["response_format"];
  const std::string type = kind_of(f, "type");
  if (type == "text") return {};
  if (type == "json_object")
    return f.contains("schema") ? schema_at(j, body, "/response_format/schema", "response_format") : any_object();
  if (type == "json_schema") {
    const json spec = field_or(f, "json_schema", json());
    if (!spec.is_object() || !spec.contains("schema"))
      throw BadField("field 'response_format.json_schema' must be {\"name\", \"schema\", \"strict\"}",
                     "response_format");
    return schema_at(j, body, "/response_format/json_schema/schema", "response_format");
  }
  throw BadField("field 'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                 "response_format");
}

OutputConstraint responses_text_format(const json& j, const std::string& body) {
  if (!has(j, "text")) return {};
  const json f = field_or(j["text"], "format", json());
  if (f.is_null()) return {};
  const std::string type = kind_of(f, "type");
  if (type == "text") return {};
  if (type == "json_object") return any_object();
  if (type == "json_schema") {
    if (!f.contains("schema")) throw BadField("field 'text.format' of type json_schema needs a 'schema'", "text");
    return schema_at(j, body, "/text/format/schema", "text");
  }
  throw BadField("field 'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}", "text");
}

}  // namespace moelsp::http
