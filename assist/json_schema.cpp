// JSON Schema → GBNF (json_schema.h has what is enforced and why). The rule
// shapes follow llama.cpp's json-schema-to-grammar, so a grammar written for
// one reads the same here: every value rule ends in `space` (bounded
// whitespace: a model cannot pad forever), keys are literals, and optional
// properties are a chain of rules that admits any subset in schema order.
#include "assist/json_schema.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace moelsp::assist {

using json = nlohmann::ordered_json;  // schema order is the order properties are written in

namespace {

// name → (body, the primitives it uses)
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& primitives() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> p = {
      {"space", {R"(| " " | "\n"{1,2} [ \t]{0,20})", {}}},
      {"boolean", {R"(("true" | "false") space)", {"space"}}},
      {"null", {R"("null" space)", {"space"}}},
      {"char", {R"([^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}))", {}}},
      {"string", {R"("\"" char* "\"" space)", {"char", "space"}}},
      {"integral-part", {R"([0] | [1-9] [0-9]{0,15})", {}}},
      {"decimal-part", {R"([0-9]{1,16})", {}}},
      {"number",
       {R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)",
        {"integral-part", "decimal-part", "space"}}},
      {"integer", {R"(("-"? integral-part) space)", {"integral-part", "space"}}},
      {"value",
       {R"(object | array | string | number | boolean | null)",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)",
        {"string", "value", "space"}}},
      {"array", {R"("[" space ( value ("," space value)* )? "]" space)", {"value", "space"}}},
      // Formats. A date's day is bounded by its month (February to 28: the
      // grammar cannot see leap years), and its year by 0001 (validators
      // built on Python's datetime refuse year 0000), so every date it admits
      // exists.
      {"date",
       {R"(([1-9] [0-9]{3} | "0" ([1-9] [0-9]{2} | "0" ([1-9] [0-9] | "0" [1-9]))) "-" ( ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]) ))",
        {}}},
      {"time",
       {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
        {}}},
      {"date-time", {R"(date "T" time)", {"date", "time"}}},
      {"date-string", {R"("\"" date "\"" space)", {"date", "space"}}},
      {"time-string", {R"("\"" time "\"" space)", {"time", "space"}}},
      {"date-time-string", {R"("\"" date-time "\"" space)", {"date-time", "space"}}},
      {"uuid-string",
       {R"("\"" [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12} "\"" space)", {"space"}}},
      {"email-string",
       {R"("\"" [a-zA-Z0-9._+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){0,4} "." [a-zA-Z]{2,6} "\"" space)",
        {"space"}}},
      {"ipv4-octet", {R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9])", {}}},
      {"ipv4-string", {R"("\"" ipv4-octet ("." ipv4-octet){3} "\"" space)", {"ipv4-octet", "space"}}},
  };
  return p;
}

std::string sanitize(std::string_view name) {
  std::string out;
  for (char c : name) out += (std::isalnum(uint8_t(c)) || c == '-') ? c : '-';
  return out.empty() ? std::string("r") : out;
}

// `text` as it appears inside a JSON string (escaped where JSON must).
std::string json_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (uint8_t(c) < 0x20) out += fmt::format("\\u{:04x}", unsigned(uint8_t(c)));
    else out += c;
  }
  return out;
}

// A JSON Schema regex (the subset json_schema.h lists) → a GBNF expression
// for the JSON-string text of a match: characters that JSON must escape are
// left out of classes, and literal ones written escaped.
class PatternConverter {
 public:
  PatternConverter(std::string_view p, std::string where) : p_(p), where_(std::move(where)) {}

  std::string convert() {
    bool start = false, end = false;
    if (!p_.empty() && p_.front() == '^') {
      start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) {
      end = true;
      p_.remove_suffix(1);
    }
    std::string body = alternation();
    if (pos_ != p_.size()) fail("unbalanced ')'");
    return fmt::format("{}({}){}", start ? "" : "char* ", body, end ? "" : " char*");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw SchemaError(fmt::format("{}: pattern: {} (at offset {})", where_, what, pos_));
  }
  bool at(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  std::string alternation() {
    std::string out = sequence();
    while (at('|')) {
      ++pos_;
      out += " | " + sequence();
    }
    return out;
  }

  std::string sequence() {
    std::string out;
    while (pos_ < p_.size() && !at('|') && !at(')')) {
      std::string a = atom();
      a += quantifier();
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string atom() {
    const char c = p_[pos_++];
    switch (c) {
      case '(': {
        if (++nesting_ > 50) fail("groups nested too deeply");
        if (p_.substr(pos_, 2) == "?:") pos_ += 2;
        else if (at('?')) fail("only (?:…) groups are supported");
        std::string inner = alternation();
        if (!at(')')) fail("missing ')'");
        ++pos_;
        --nesting_;
        return "(" + inner + ")";
      }
      case '[': return char_class();
      case '.': return R"([^"\\\x7F\x00-\x1F])";
      case '\\': return escape();
      case '^':
      case '$': fail("anchors are supported only at the ends");
      case '*':
      case '+':
      case '?':
      case '{': fail("a quantifier with nothing to repeat");
      default: {  // a literal character, whole (UTF-8)
        size_t n = 1;
        while (uint8_t(c) >= 0xC0 && pos_ < p_.size() && (uint8_t(p_[pos_]) & 0xC0) == 0x80 && n < 4) ++pos_, ++n;
        return gbnf_literal(json_text(p_.substr(pos_ - n, n)));
      }
    }
  }

  // After a backslash, outside a class.
  std::string escape() {
    if (pos_ >= p_.size()) fail("a '\\' at the end");
    const char e = p_[pos_++];
    const char* cls = e == 'd' ? "0-9" : e == 'w' ? "a-zA-Z0-9_" : e == 's' ? " " : nullptr;
    if (cls) return fmt::format("[{}]", cls);
    if (e == 'D' || e == 'W' || e == 'S') {
      const char* neg = e == 'D' ? "0-9" : e == 'W' ? "a-zA-Z0-9_" : " \\t\\n\\r";
      return fmt::format(R"([^{}"\\\x7F\x00-\x1F])", neg);
    }
    if (e == 'n' || e == 't') return gbnf_literal(json_text(std::string(1, e == 'n' ? '\n' : '\t')));
    if (std::isalnum(uint8_t(e))) fail(fmt::format("the escape \\{} is not supported", e));
    return gbnf_literal(json_text(std::string(1, e)));
  }

  // One character of a class, UTF-8 decoded.
  uint32_t next_codepoint() {
    const auto b = uint8_t(p_[pos_]);
    const size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || pos_ + n > p_.size()) fail("invalid UTF-8");
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(p_[pos_ + i]) & 0x3F);
    pos_ += n;
    return cp;
  }

  // A class as codepoint ranges. A positive class loses the characters JSON
  // must escape (", \, controls, DEL), a negated one excludes them too: every
  // match is JSON string text as it stands (a subset of the pattern's).
  std::string char_class() {
    const bool negated = at('^');
    if (negated) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (!at(']')) {
      if (pos_ >= p_.size()) fail("unterminated class");
      uint32_t lo = 0;
      if (p_[pos_] == '\\') {
        if (++pos_ >= p_.size()) fail("a '\\' at the end");
        const char e = p_[pos_++];
        if (e == 'd' || e == 'w' || e == 's') {
          if (e == 'd' || e == 'w') ranges.emplace_back('0', '9');
          if (e == 'w') ranges.insert(ranges.end(), {{'a', 'z'}, {'A', 'Z'}, {'_', '_'}});
          if (e == 's') ranges.emplace_back(' ', ' ');
          continue;
        }
        if (std::isalnum(uint8_t(e)) && e != 'n' && e != 't') fail(fmt::format("the escape \\{} is not supported", e));
        lo = e == 'n' ? '\n' : e == 't' ? '\t' : uint8_t(e);
      } else {
        lo = next_codepoint();
      }
      uint32_t hi = lo;
      if (at('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          if (++pos_ >= p_.size()) fail("a '\\' at the end");
          hi = uint8_t(p_[pos_++]);
        } else {
          hi = next_codepoint();
        }
        if (hi < lo) fail("a class range runs backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    static constexpr std::pair<uint32_t, uint32_t> kForbidden[] = {
        {0x00, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}, {0x7F, 0x7F}};
    std::string out = negated ? "[^" : "[";
    const auto emit = [&](uint32_t lo, uint32_t hi) {
      const auto esc = [](uint32_t cp) {
        return cp < 0x100     ? fmt::format("\\x{:02X}", cp)
               : cp < 0x10000 ? fmt::format("\\u{:04X}", cp)
                              : fmt::format("\\U{:08X}", cp);
      };
      out += lo == hi ? esc(lo) : esc(lo) + "-" + esc(hi);
    };
    bool any = false;
    for (auto [lo, hi] : ranges) {
      if (negated) {
        emit(lo, hi);
        continue;
      }
      for (const auto& [flo, fhi] : kForbidden) {  // cut the forbidden ranges out, left to right
        if (hi < flo || lo > fhi || lo > hi) continue;
        if (lo < flo) {
          emit(lo, flo - 1);
          any = true;
        }
        lo = fhi + 1;
      }
      if (lo <= hi) {
        emit(lo, hi);
        any = true;
      }
    }
    if (negated) {
      for (const auto& [flo, fhi] : kForbidden) emit(flo, fhi);
    } else if (!any) {
      fail("a class that admits only characters JSON must escape");
    }
    return out + "]";
  }

  std::string quantifier() {
    if (pos_ >= p_.size()) return "";
    const char c = p_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{') {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos) fail("unterminated {m,n}");
      q = std::string(p_.substr(pos_, close - pos_ + 1));
      pos_ = close + 1;
    }
    if (!q.empty() && at('?')) ++pos_;  // lazy: the same language
    return q;
  }

  std::string_view p_;
  std::string where_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = uint8_t(c);
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02X}", u);
    else out += c;
  }
  return out + "\"";
}

class SchemaConverter {
 public:
  SchemaConverter(GbnfBuilder& b, json root) : b_(b), root_(std::move(root)) {}

  std::string visit(const json& s, const std::string& name, const std::string& where) {
    // A budget: type lists and allOf copy subschemas, so a small hostile
    // schema could otherwise take exponential time on an HTTP thread.
    if (++visits_ > kMaxVisits)
      throw SchemaError(
          fmt::format("{}: the schema is too large (more than {} subschemas to convert)", where, kMaxVisits));
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw SchemaError(where + ": the schema `false` admits no value");
      return prim("value");
    }
    if (!s.is_object()) throw SchemaError(where + ": a schema must be an object or a boolean");
    if (s.contains("$ref")) return ref(s["$ref"], where);
    if (s.contains("nullable") && s["nullable"] == true) {
      json copy = s;
      copy.erase("nullable");
      return b_.add_rule(name, visit(copy, name + "-nn", where) + " | " + prim("null"));
    }
    if (s.contains("const")) return b_.add_rule(name, constant(s["const"]));
    if (s.contains("enum")) return enumeration(s["enum"], name, where);
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) return alternatives(s[k], name, where + "/" + k);
    if (s.contains("allOf")) return all_of(s, name, where);
    if (s.contains("type") && s["type"].is_array()) {
      std::vector<std::string> alts;
      std::vector<json> seen;
      for (const json& t : s["type"]) {
        if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;  // ["object", "object"]: once
        seen.push_back(t);
        json one = s;
        one["type"] = t;
        alts.push_back(visit(one, name + "-" + sanitize(t.is_string() ? t.get<std::string>() : "t"), where));
      }
      if (alts.empty()) throw SchemaError(where + "/type: an empty list of types");
      return b_.add_rule(name, join(alts, " | "));
    }
    const std::string type = s.contains("type") && s["type"].is_string() ? s["type"].get<std::string>() : "";
    if (type.empty() && (s.contains("properties") || s.contains("required"))) return object(s, name, where);
    if (type.empty() && (s.contains("items") || s.contains("prefixItems"))) return array(s, name, where);
    if (type.empty()) return prim("value");
    if (type == "object") return object(s, name, where);
    if (type == "array") return array(s, name, where);
    if (type == "string") return string(s, name, where);
    if (type == "integer") return integer(s, name);
    if (type == "number" || type == "boolean" || type == "null") return prim(type);
    throw SchemaError(fmt::format("{}/type: unknown type '{}'", where, type));
  }

  std::vector<GbnfBuilder::Param> params(const json& s, const std::string& name) {
    std::vector<GbnfBuilder::Param> out;
    const json props = s.is_object() ? s.value("properties", json::object()) : json::object();
    const json req = s.is_object() ? s.value("required", json::array()) : json::array();
    for (const auto& [key, sub] : props.items()) {
      GbnfBuilder::Param p;
      p.key = key;
      p.required = std::find(req.begin(), req.end(), json(key)) != req.end();
      const bool str = sub.is_object() && sub.value("type", json()) == "string";
      if (str && !sub.contains("pattern") && !sub.contains("format") && !sub.contains("const")) {
        p.raw = true;
        if (sub.contains("enum") && sub["enum"].is_array()) {
          std::vector<std::string> alts;
          for (const json& v : sub["enum"])
            if (v.is_string()) alts.push_back(gbnf_literal(v.get<std::string>()));
          if (!alts.empty()) p.rule = b_.add_rule(name + "-" + sanitize(key) + "-raw", join(alts, " | "));
        }
      } else {
        p.rule = visit(sub, name + "-" + sanitize(key), "schema/properties/" + key);
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  std::string prim(const std::string& name) {
    const auto& p = primitives().at(name);
    if (!b_.rules_.count(name)) {
      b_.add_rule(name, p.first);
      for (const auto& dep : p.second) prim(dep);
    }
    return name;
  }

 private:
  static std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : sep) + x;
    return out;
  }

  std::string constant(const json& v) { return gbnf_literal(v.dump()) + " " + prim("space"); }

  std::string enumeration(const json& e, const std::string& name, const std::string& where) {
    if (!e.is_array() || e.empty()) throw SchemaError(where + "/enum: must be a non-empty list");
    std::vector<std::string> alts;
    for (const json& v : e) alts.push_back(gbnf_literal(v.dump()));
    return b_.add_rule(name, "(" + join(alts, " | ") + ") " + prim("space"));
  }

  std::string alternatives(const json& list, const std::string& name, const std::string& where) {
    if (!list.is_array() || list.empty()) throw SchemaError(where + ": must be a non-empty list");
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.size(); ++i)
      alts.push_back(visit(list[i], fmt::format("{}-{}", name, i), fmt::format("{}/{}", where, i)));
    return b_.add_rule(name, join(alts, " | "));
  }

  // allOf: one schema is that schema; objects merge their properties and
  // requirements; anything else cannot be expressed as one grammar here.
  std::string all_of(const json& s, const std::string& name, const std::string& where) {
    const json& list = s["allOf"];
    if (!list.is_array() || list.empty()) throw SchemaError(where + "/allOf: must be a non-empty list");
    json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < list.size(); ++i) {
      json part = list[i].contains("$ref") ? resolve(list[i]["$ref"], where) : list[i];
      const bool objecty = (!part.contains("type") || part["type"] == "object") && !part.contains("anyOf") &&
                           !part.contains("oneOf") && !part.contains("enum") && !part.contains("const");
      if (!objecty) throw SchemaError(fmt::format("{}/allOf/{}: only objects can be combined with allOf", where, i));
      merged["type"] = "object";
      const json props = part.value("properties", json::object());
      for (const auto& [k, v] : props.items()) merged["properties"][k] = v;
      for (const json& r : part.value("required", json::array())) merged["required"].push_back(r);
    }
    return visit(merged, name, where);
  }

  json resolve(const json& ref, const std::string& where) {
    if (!ref.is_string()) throw SchemaError(where + "/$ref: must be a string");
    const std::string r = ref;
    if (r == "#") return root_;
    if (r.rfind("#/", 0) != 0) throw SchemaError(fmt::format("{}/$ref: '{}' is not a local reference (#/…)", where, r));
    try {
      return root_.at(json::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      throw SchemaError(fmt::format("{}/$ref: '{}' names nothing in the schema", where, r));
    }
  }

  std::string ref(const json& r, const std::string& where) {
    const json target = resolve(r, where);
    const std::string key = r.get<std::string>();
    if (auto it = refs_.find(key); it != refs_.end()) return it->second;
    // Named before it is visited, so a recursive reference finds the name.
    const std::string name = b_.reserve("ref" + sanitize(key.substr(1)));
    refs_[key] = name;
    const std::string body = visit(target, name + "-def", where + "/$ref");
    b_.rules_[name] = body;
    return name;
  }

  std::string object(const json& s, const std::string& name, const std::string& where) {
    const json props = s.value("properties", json::object());
    std::vector<std::string> required;
    const json req_list = s.value("required", json::array());
    for (const json& r : req_list)
      if (r.is_string() && std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
        required.push_back(r);
    if (props.empty() && required.empty()) {
      const json extra = s.value("additionalProperties", json(true));
      if (extra.is_boolean() && !extra.get<bool>())
        return b_.add_rule(name, fmt::format(R"("{{" {} "}}" {})", prim("space"), prim("space")));
      if (extra.is_boolean()) return prim("object");
      const std::string v = visit(extra, name + "-value", where + "/additionalProperties");
      const std::string kv = b_.add_rule(name + "-kv", prim("string") + " \":\" space " + v);
      return b_.add_rule(name, fmt::format(R"("{{" space ({} ("," space {})*)? "}}" space)", kv, kv));
    }
    // Schema order, each required property present and each optional one
    // skippable, commas only between those present: first_i (nothing
    // written yet) and rest_i (each item after a comma), built from the end.
    std::vector<std::pair<std::string, bool>> keys;  // (key, required)
    for (const auto& [k, v] : props.items())
      keys.emplace_back(k, std::find(required.begin(), required.end(), k) != required.end());
    for (const std::string& r : required)
      if (!props.contains(r)) keys.emplace_back(r, true);  // required without a schema: any value
    std::string first, rest;                               // of items i+1.., "" for none
    for (size_t i = keys.size(); i-- > 0;) {
      const auto& [key, req] = keys[i];
      const json sub = props.contains(key) ? props[key] : s.value("additionalProperties", json(true));
      const std::string v = visit(sub.is_boolean() && sub.get<bool>() ? json::object() : sub,
                                  name + "-" + sanitize(key), where + "/properties/" + key);
      const std::string kv =
          b_.add_rule(name + "-" + sanitize(key) + "-kv", gbnf_literal(json(key).dump()) + " space \":\" space " + v);
      const std::string after = rest.empty() ? "" : " " + rest;
      const std::string r =
          req ? fmt::format("\",\" space {}{}", kv, after) : fmt::format("(\",\" space {})?{}", kv, after);
      std::string f = kv + after;
      if (!req) f += " | " + (first.empty() ? std::string("\"\"") : first);
      rest = b_.add_rule(fmt::format("{}-rest-{}", name, i), r);
      first = b_.add_rule(fmt::format("{}-first-{}", name, i), f);
    }
    return b_.add_rule(name, "\"{\" space " + first + " \"}\" space");
  }

  std::string array(const json& s, const std::string& name, const std::string& where) {
    const int lo = count(s, "minItems", 0, where);
    const int hi = count(s, "maxItems", -1, where);
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > 1000 || hi > 1000)
      throw SchemaError(where + ": minItems/maxItems must satisfy 0 ≤ minItems ≤ maxItems ≤ 1000");
    if (s.contains("prefixItems")) {  // a tuple: exactly these
      std::vector<std::string> parts;
      const json& items = s["prefixItems"];
      for (size_t i = 0; i < items.size(); ++i)
        parts.push_back(visit(items[i], fmt::format("{}-{}", name, i), fmt::format("{}/prefixItems/{}", where, i)));
      return b_.add_rule(name, "\"[\" space " + join(parts, " \",\" space ") + " \"]\" space");
    }
    const std::string item = s.contains("items") ? visit(s["items"], name + "-item", where + "/items") : prim("value");
    std::string body;
    if (hi == 0) body = "";
    else if (lo == 0) body = fmt::format("({} (\",\" space {}){})?", item, item, reps(0, hi < 0 ? -1 : hi - 1));
    else body = fmt::format("{} (\",\" space {}){}", item, item, reps(lo - 1, hi < 0 ? -1 : hi - 1));
    return b_.add_rule(name, "\"[\" space " + body + " \"]\" space");
  }

  static std::string reps(int lo, int hi) {
    if (hi < 0) return lo == 0 ? "*" : lo == 1 ? "+" : fmt::format("{{{},}}", lo);
    return fmt::format("{{{},{}}}", lo, hi);
  }

  std::string string(const json& s, const std::string& name, const std::string& where) {
    if (s.contains("pattern") && s["pattern"].is_string()) {
      const std::string body = PatternConverter(s["pattern"].get<std::string>(), where).convert();
      prim("char");
      return b_.add_rule(name, "\"\\\"\" " + body + " \"\\\"\" " + prim("space"));
    }
    const std::string format = s.contains("format") && s["format"].is_string() ? s["format"].get<std::string>() : "";
    for (const char* f : {"date", "time", "date-time", "uuid", "email", "ipv4"})
      if (format == f) return prim(format + "-string");
    const int lo = count(s, "minLength", 0, where);
    const int hi = count(s, "maxLength", -1, where);
    if (lo == 0 && hi < 0) return prim("string");
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > 10000 || hi > 10000)
      throw SchemaError(where + ": minLength/maxLength must satisfy 0 ≤ minLength ≤ maxLength ≤ 10000");
    return b_.add_rule(name, fmt::format(R"("\"" {}{} "\"" {})", prim("char"), reps(lo, hi), prim("space")));
  }

  std::string integer(const json& s, const std::string& name) {
    double lo = -1;
    if (s.contains("minimum") && s["minimum"].is_number()) lo = s["minimum"].get<double>();
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number())
      lo = std::max(lo, s["exclusiveMinimum"].get<double>() + 1);
    if (lo >= 1) return b_.add_rule(name, "[1-9] [0-9]{0,15} " + prim("space"));
    if (lo >= 0) return b_.add_rule(name, prim("integral-part") + " " + prim("space"));
    return prim("integer");
  }

  // A count keyword (minItems, maxLength, …): a non-negative integer, or
  // `absent` when not given; anything else is the schema's mistake.
  static int count(const json& s, const char* key, int absent, const std::string& where) {
    if (!s.contains(key)) return absent;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000)
      throw SchemaError(fmt::format("{}/{}: must be an integer in [0, 1000000]", where, key));
    return int(v.get<int64_t>());
  }

  static constexpr size_t kMaxVisits = 20000;
  GbnfBuilder& b_;
  json root_;
  std::map<std::string, std::string> refs_;
  size_t visits_ = 0;
};

GbnfBuilder::GbnfBuilder() = default;

std::string GbnfBuilder::reserve(std::string_view name) {
  const std::string base = sanitize(name);
  for (int i = 0;; ++i) {
    const std::string n = i == 0 ? base : fmt::format("{}-{}", base, i);
    if (rules_.count(n)) continue;
    rules_[n] = "\"\"";
    order_.push_back(n);
    return n;
  }
}

std::string GbnfBuilder::add_rule(std::string_view name, const std::string& body) {
  const std::string base = sanitize(name);
  for (int i = 0;; ++i) {
    const std::string n = i == 0 ? base : fmt::format("{}-{}", base, i);
    const auto it = rules_.find(n);
    if (it == rules_.end()) {
      rules_[n] = body;
      order_.push_back(n);
      return n;
    }
    if (it->second == body) return n;
  }
}

namespace {
// Parses `schema_json` and runs `convert` on it; JSON errors, in the text or
// from a keyword of the wrong JSON type, become SchemaError.
template <class Convert>
auto converted(std::string_view schema_json, Convert convert) {
  json schema;
  try {
    schema = json::parse(schema_json);
  } catch (const json::exception& e) {
    throw SchemaError(fmt::format("the schema is not JSON: {}", e.what()));
  }
  try {
    return convert(schema);
  } catch (const json::exception& e) {
    throw SchemaError(fmt::format("schema: {}", e.what()));
  }
}
}  // namespace

std::string GbnfBuilder::add_schema(std::string_view name, std::string_view schema_json) {
  return converted(schema_json, [&](const json& schema) {
    return SchemaConverter(*this, schema).visit(schema, std::string(name), "schema");
  });
}

std::vector<GbnfBuilder::Param> GbnfBuilder::add_params(std::string_view name, std::string_view schema_json) {
  return converted(schema_json, [&](const json& schema) {
    return SchemaConverter(*this, schema).params(schema, std::string(name));
  });
}

std::string GbnfBuilder::gbnf() const {
  std::string out;
  if (rules_.count("root")) out += "root ::= " + rules_.at("root") + "\n";
  for (const auto& n : order_)
    if (n != "root") out += n + " ::= " + rules_.at(n) + "\n";
  return out;
}

std::string json_schema_to_gbnf(std::string_view schema_json) {
  GbnfBuilder b;
  const std::string top = b.add_schema("root", schema_json);
  if (top != "root") b.add_rule("root", top);
  return b.gbnf();
}

std::string json_object_gbnf() {
  GbnfBuilder b;
  SchemaConverter c(b, json::object());
  b.add_rule("root", c.prim("object"));
  return b.gbnf();
}

}  // namespace moelsp::assist
