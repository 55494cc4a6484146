// Jinja2 3.1's filters and tests (jinja2/filters.py, jinja2/tests.py) with
// HuggingFace's tojson, argument for argument. Filters Jinja has but chat
// templates do not use (urlize, xmlattr, wordwrap, …) are refused by name.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "interpreter.h"
#include "pystr.h"
#include "util/markup.h"

namespace moelsp::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, Args&);
using TestFn = bool (*)(Interpreter&, const Value&, Args&);

Value arg_or(const Args& a, size_t i, std::string_view name, const Value& fallback) {
  const Value* v = a.find(i, name);
  return v ? *v : fallback;
}

bool bool_arg(const Args& a, size_t i, std::string_view name, bool fallback) {
  const Value* v = a.find(i, name);
  return v ? truthy(*v) : fallback;
}

int64_t int_arg(const Args& a, size_t i, std::string_view name, int64_t fallback) {
  const Value* v = a.find(i, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_number() || v->type() == Type::Float) throw Error(std::string(name) + " must be an integer");
  return v->as_int();
}

// soft_str: undefined is "", a str (safe or not) stays itself.
std::string soft_str(const Value& v) { return to_str(v); }

Value same_safety(const Value& input, std::string s) {
  return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

// make_attrgetter: "a.b.0" looks up each part as an item (then attribute).
Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit((unsigned char)c); });
    const bool index = digits && part.size() <= 18;  // fits in int64
    v = get_item(v, index ? Value(int64_t(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// The sort key of sort/unique/dictsort/min/max: strings lowercased unless
// case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py::lower(v.str())) : v;
}

// ---- filters --------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, Args&) {
  if (!v.is_number()) throw Error("bad operand type for abs(): '" + type_name(v) + "'");
  if (v.type() == Type::Float) return Value(std::fabs(v.as_float()));
  return Value(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
}

Value f_attr(Interpreter&, const Value& v, Args& a) {
  const Value name = arg_or(a, 0, "name", Value(""));
  if (v.is_mapping()) {  // getattr, not a key: only a dict's methods
    Value m = get_attr(v, to_str(name));
    return m.type() == Type::Object ? m : Value::undefined("'dict object' has no attribute '" + to_str(name) + "'");
  }
  return get_attr(v, to_str(name));
}

Value f_batch(Interpreter&, const Value& v, Args& a) {
  const int64_t n = int_arg(a, 0, "linecount", 1);
  if (n <= 0) throw Error("batch size must be positive");
  const Value* fill = a.find(1, "fill_with");
  std::vector<Value> out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (int64_t(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      check_size(uint64_t(n) * sizeof(Value), "a batch of " + std::to_string(n) + " items");
      while (int64_t(cur.size()) < n) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::generator(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, Args&) { return same_safety(v, py::capitalize(soft_str(v))); }
Value f_lower(Interpreter&, const Value& v, Args&) { return same_safety(v, py::lower(soft_str(v))); }
Value f_upper(Interpreter&, const Value& v, Args&) { return same_safety(v, py::upper(soft_str(v))); }

Value f_title(Interpreter&, const Value& v, Args&) {
  // Jinja's own title: a word starts after '-', whitespace or an opening bracket.
  const std::string s = soft_str(v);
  std::string out;
  bool start = true;
  for (char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space((unsigned char)c);
    if (sep) out += c;
    else out += start ? py::upper(std::string(1, c)) : py::lower(std::string(1, c));
    start = sep;
  }
  return same_safety(v, out);
}

Value f_center(Interpreter&, const Value& v, Args& a) {
  const std::string s = soft_str(v);
  const int64_t width = int_arg(a, 0, "width", 80), len = int64_t(py::length(s));
  if (width <= len) return Value(s);
  check_size(uint64_t(width - len) + s.size(), "the centered string");
  const int64_t total = width - len, left = total / 2 + (total & width & 1);
  return Value(std::string(size_t(left), ' ') + s + std::string(size_t(total - left), ' '));
}

Value f_length(Interpreter&, const Value& v, Args&) { return Value(length(v)); }

Value f_default(Interpreter&, const Value& v, Args& a) {
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return arg_or(a, 0, "default_value", Value(""));
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, Args& a) {
  if (!v.is_mapping()) throw Error("dictsort: you can only sort by either a mapping");
  const bool cs = bool_arg(a, 0, "case_sensitive", false), reverse = bool_arg(a, 2, "reverse", false);
  const std::string by = to_str(arg_or(a, 1, "by", Value("key")));
  if (by != "key" && by != "value") throw Error("dictsort: you can only sort by either 'key' or 'value'");
  std::vector<std::pair<Value, Value>> items = v.dict().items;
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    const Value &l = by == "key" ? x.first : x.second, &r = by == "key" ? y.first : y.second;
    return reverse ? less(sort_key(r, cs), sort_key(l, cs)) : less(sort_key(l, cs), sort_key(r, cs));
  });
  std::vector<Value> out;
  for (auto& [k, x] : items) out.push_back(Value::tuple({k, x}));
  return Value::list(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, Args&) {
  return v.is_markup() ? v : Value::markup(markup_escape(soft_str(v)));
}
Value f_forceescape(Interpreter&, const Value& v, Args&) { return Value::markup(markup_escape(soft_str(v))); }
Value f_safe(Interpreter&, const Value& v, Args&) { return v.is_markup() ? v : Value::markup(soft_str(v)); }
Value f_string(Interpreter&, const Value& v, Args&) { return v.is_string() ? v : Value(soft_str(v)); }

Value f_first(Interpreter&, const Value& v, Args&) {
  if (v.is_list()) {
    const auto& items = v.list().items;
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, Args&) {
  if (v.is_sequence() && v.list().kind == ListData::Kind::Generator)
    throw Error("'" + type_name(v) + "' object is not reversible");
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python's float(str): surrounding whitespace, underscores between digits,
// inf/nan; nullopt where Python raises.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != '_' ||
        (i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) && std::isdigit((unsigned char)s[i + 1])))
      clean += s[i];
  if (clean.empty() || (clean.find('_') != std::string::npos)) return std::nullopt;
  if (clean.size() > 1 && (clean[0] == '0') && (clean[1] == 'x' || clean[1] == 'X')) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  const Value fallback = arg_or(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.str())) return Value(*d);
  return fallback;
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  const Value fallback = arg_or(a, 0, "default", Value(0));
  const int64_t base = int_arg(a, 1, "base", 10);
  if (base != 0 && (base < 2 || base > 36)) throw Error("int() base must be >= 2 and <= 36, or 0");
  if (v.type() == Type::Float) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(int64_t(d));
  }
  if (v.is_number()) return Value(v.as_int());
  if (!v.is_string()) return fallback;
  // int(str, base), else int(float(str)), else the default (Jinja's do_int).
  std::string s = py::strip(v.str(), std::nullopt, true, true);
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  if (!digits.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(digits.c_str(), &end, int(base));
    if (end == digits.c_str() + digits.size() && errno == 0) return Value(int64_t(n));
  }
  if (auto d = parse_float(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value(int64_t(*d));
  return fallback;
}

// indent(width) and tojson(indent=width): a string as is, else " " * width
// (an int; Python's TypeError for anything else).
std::string indent_text(const Value& width, const char* what) {
  if (width.is_string()) return width.str();
  if (width.is_undefined()) fail_undefined(width);
  if (width.type() != Type::Int && width.type() != Type::Bool)
    throw Error(std::string(what) + ": can't multiply sequence by non-int of type '" + type_name(width) + "'");
  const int64_t n = std::max<int64_t>(0, width.as_int());
  check_size(uint64_t(n), std::string("the ") + what + " width");
  return std::string(size_t(n), ' ');
}

Value f_indent(Interpreter&, const Value& v, Args& a) {
  const std::string ind = indent_text(arg_or(a, 0, "width", Value(4)), "indent");
  const bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  std::vector<std::string> lines = py::splitlines(soft_str(v) + "\n");
  check_size(uint64_t(lines.size() + 1) * ind.size() + soft_str(v).size(), "the indented text");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent = i > 0 && (blank || !lines[i].empty());
    out += (indent ? ind : "") + lines[i];
  }
  if (first) out = ind + out;
  return same_safety(v, out);
}

Value f_items(Interpreter&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_mapping()) throw Error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items) out.push_back(Value::tuple({k, x}));
  return Value::generator(std::move(out));
}

Value f_join(Interpreter&, const Value& v, Args& a) {
  const std::string sep = soft_str(arg_or(a, 0, "d", Value("")));
  const Value* attribute = a.find(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    const std::string part = soft_str(attribute && !attribute->is_none() ? attribute_of(x, to_str(*attribute)) : x);
    check_size(uint64_t(out.size()) + sep.size() + part.size(), "the joined string");
    if (!first) out += sep;
    out += part;
    first = false;
  }
  return Value(std::move(out));
}

Value f_list(Interpreter&, const Value& v, Args&) { return Value::list(iterate(v)); }

Value f_map(Interpreter& in, const Value& v, Args& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::generator({});  // Jinja maps only a true value
  if (const Value* attribute = a.find(SIZE_MAX, "attribute")) {
    const Value* fallback = a.find(SIZE_MAX, "default");
    for (const Value& x : iterate(v)) {
      Value y = attribute_of(x, to_str(*attribute));
      out.push_back(fallback && y.is_undefined() ? *fallback : y);
    }
    return Value::generator(std::move(out));
  }
  if (a.pos.empty()) throw Error("map requires a filter argument");
  const std::string name = to_str(a.pos[0]);
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& x : iterate(v)) {
    Args each = rest;
    out.push_back(apply_filter(in, name, x, each));
  }
  return Value::generator(std::move(out));
}

// select/reject/selectattr/rejectattr share this: keep the items whose
// (attribute's) test result is `keep`.
Value select_items(Interpreter& in, const Value& v, Args& a, bool by_attr, bool keep) {
  if (!truthy(v)) return Value::generator({});  // Jinja selects only from a true value
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.pos.empty()) throw Error("selectattr/rejectattr need an attribute name");
    attribute = to_str(a.pos[next++]);
  }
  std::string test;
  if (next < a.pos.size()) test = to_str(a.pos[next++]);
  Args test_args;
  test_args.pos.assign(a.pos.begin() + std::ptrdiff_t(std::min(next, a.pos.size())), a.pos.end());
  test_args.kw = a.kw;
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    const Value subject = by_attr ? attribute_of(x, attribute) : x;
    Args each = test_args;
    const bool ok = test.empty() ? truthy(subject) : apply_test(in, test, subject, each);
    if (ok == keep) out.push_back(x);
  }
  return Value::generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_items(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_items(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_items(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_items(in, v, a, true, false); }

// min/max/sort/unique: the key of an item (attribute, case folding).
Value item_key(const Value& x, const Value* attribute, bool cs) {
  return sort_key(attribute && !attribute->is_none() ? attribute_of(x, to_str(*attribute)) : x, cs);
}

Value extreme(const Value& v, Args& a, bool want_max) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attribute = a.find(1, "attribute");
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const Value k = item_key(items[i], attribute, cs), b = item_key(items[best], attribute, cs);
    if (want_max ? less(b, k) : less(k, b)) best = i;
  }
  return items[best];
}

Value f_max(Interpreter&, const Value& v, Args& a) { return extreme(v, a, true); }
Value f_min(Interpreter&, const Value& v, Args& a) { return extreme(v, a, false); }

Value f_sort(Interpreter&, const Value& v, Args& a) {
  const bool reverse = bool_arg(a, 0, "reverse", false), cs = bool_arg(a, 1, "case_sensitive", false);
  const Value* attribute = a.find(2, "attribute");
  std::vector<Value> items = iterate(v);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = item_key(x, attribute, cs), ky = item_key(y, attribute, cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value f_unique(Interpreter&, const Value& v, Args& a) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attribute = a.find(1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& x : iterate(v)) {
    const Value k = item_key(x, attribute, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::generator(std::move(out));
}

Value f_replace(Interpreter&, const Value& v, Args& a) {
  const int64_t count = int_arg(a, 2, "count", -1);
  return same_safety(v, py::replace(soft_str(v), soft_str(arg_or(a, 0, "old", Value(""))),
                                    soft_str(arg_or(a, 1, "new", Value(""))), count));
}

Value f_reverse(Interpreter&, const Value& v, Args&) {
  if (v.is_string()) {
    std::u32string u = py::decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(py::encode(u));
  }
  // reversed(x) is an iterator; a generator cannot be reversed, so Jinja
  // falls back to a reversed list.
  const bool generator = v.is_sequence() && v.list().kind == ListData::Kind::Generator;
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (generator) return Value::list(std::move(items));
  const std::string label = v.is_mapping()                     ? "dict_reversekeyiterator"
                            : v.is_list() && !v.list().tuple() ? "list_reverseiterator"
                                                               : "reversed";
  return Value::generator(std::move(items), label);
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  if (!v.is_number()) throw Error("round: a number is required, not " + type_name(v));
  const int64_t precision = int_arg(a, 0, "precision", 0);
  const std::string method = to_str(arg_or(a, 1, "method", Value("common")));
  const double x = v.as_float();
  if (method == "ceil" || method == "floor") {
    const double scale = std::pow(10.0, double(precision));
    return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (method != "common") throw Error("method must be common, ceil or floor");
  if (precision < 0 || precision > 300 || !std::isfinite(x)) return Value(std::nearbyint(x));
  // Python's round(): correctly rounded, ties to even, as printf's %.*f does.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", int(precision), x);
  return Value(std::strtod(buf, nullptr));
}

Value f_sum(Interpreter&, const Value& v, Args& a) {
  const Value* attribute = a.find(0, "attribute");
  Value total = arg_or(a, 1, "start", Value(0));
  for (const Value& x : iterate(v)) total = binary_op("+", total, item_key(x, attribute, true));
  return total;
}

Value f_trim(Interpreter&, const Value& v, Args& a) {
  const Value* chars = a.find(0, "chars");
  std::optional<std::string> set;
  if (chars && !chars->is_none()) set = to_str(*chars);
  return same_safety(v, py::strip(soft_str(v), set, true, true));
}

Value f_truncate(Interpreter&, const Value& v, Args& a) {
  const std::string s = soft_str(v);
  const int64_t len = int_arg(a, 0, "length", 255), leeway = int_arg(a, 3, "leeway", 5);
  const bool killwords = bool_arg(a, 1, "killwords", false);
  const std::string end = soft_str(arg_or(a, 2, "end", Value("...")));
  const int64_t end_len = int64_t(py::length(end));
  if (len < end_len) throw Error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(len));
  const std::u32string u = py::decode(s);
  if (__int128(u.size()) <= __int128(len) + leeway) return Value(s);
  std::string head = py::encode(u.substr(0, size_t(len - end_len)));
  if (!killwords) head = py::rsplit(head, std::string(" "), 1).front();
  return Value(head + end);
}

Value f_wordcount(Interpreter&, const Value& v, Args&) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : soft_str(v)) {
    const bool w = std::isalnum((unsigned char)c) || c == '_' || (unsigned char)c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_format(Interpreter&, const Value& v, Args& a) {
  if (!a.kw.empty()) {
    std::vector<std::pair<Value, Value>> items;
    for (const auto& [k, x] : a.kw) items.emplace_back(Value(k), x);
    return binary_op("%", Value(soft_str(v)), Value::dict(std::move(items)));
  }
  return binary_op("%", Value(soft_str(v)), Value::tuple(a.pos));
}

// HuggingFace's tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), positional order included.
Value f_tojson(Interpreter&, const Value& v, Args& a) {
  JsonOptions opt;
  opt.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value indent = arg_or(a, 1, "indent", Value::none());
  if (!indent.is_none()) {
    opt.pretty = true;
    opt.indent = indent_text(indent, "tojson");
    opt.item_sep = ",";  // json.dumps' default separators when indenting
  }
  const Value seps = arg_or(a, 2, "separators", Value::none());
  if (!seps.is_none()) {
    const std::vector<Value> parts = iterate(seps);
    if (parts.size() != 2) throw Error("tojson: separators must be a pair of strings");
    opt.item_sep = to_str(parts[0]);
    opt.key_sep = to_str(parts[1]);
  }
  opt.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value(to_json(v, opt));
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table{
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_forceescape},
      {"format", f_format},     {"indent", f_indent},
      {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},
      {"length", f_length},     {"list", f_list},
      {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

// Jinja's filters that are left out (nothing in chat templates uses them).
bool jinja_only_filter(std::string_view name) {
  static const std::string_view kNames[] = {"filesizeformat", "groupby",   "pprint", "random",   "slice",
                                            "striptags",      "urlencode", "urlize", "wordwrap", "xmlattr"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// ---- tests ----------------------------------------------------------------

const Value& test_arg(const Args& a) {
  if (a.pos.empty() && a.kw.empty()) throw Error("the test needs an argument");
  return a.pos.empty() ? a.kw.front().second : a.pos.front();
}

int64_t int_subject(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw Error("not all arguments converted during string formatting");
  return v.type() == Type::Float ? int64_t(std::fmod(v.as_float(), 2.0)) : v.as_int();
}

bool t_defined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args&) { return v.type() == Type::Bool; }
bool t_true(Interpreter&, const Value& v, Args&) { return v.type() == Type::Bool && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, Args&) { return v.type() == Type::Bool && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, Args&) { return v.type() == Type::Int; }
bool t_float(Interpreter&, const Value& v, Args&) { return v.type() == Type::Float; }
bool t_number(Interpreter&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args&) { return v.is_mapping(); }
// Python's iter()/len()+__getitem__: Jinja's Undefined has both.
bool t_iterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
// len() and __getitem__: generators and dict views have no __getitem__.
bool t_sequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool t_callable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || (v.type() == Type::Object && v.obj().callable());
}
bool t_escaped(Interpreter&, const Value& v, Args&) { return v.is_markup(); }
bool t_odd(Interpreter&, const Value& v, Args&) { return int_subject(v) % 2 != 0; }
bool t_even(Interpreter&, const Value& v, Args&) { return int_subject(v) % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, Args& a) {
  const Value r = binary_op("%", v, test_arg(a));
  return r.as_float() == 0.0;
}
bool t_eq(Interpreter&, const Value& v, Args& a) { return equal(v, test_arg(a)); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equal(v, test_arg(a)); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return less(v, test_arg(a)); }
bool t_le(Interpreter&, const Value& v, Args& a) { return !less(test_arg(a), v); }
bool t_gt(Interpreter&, const Value& v, Args& a) { return less(test_arg(a), v); }
bool t_ge(Interpreter&, const Value& v, Args& a) { return !less(v, test_arg(a)); }
bool t_in(Interpreter&, const Value& v, Args& a) { return contains(test_arg(a), v); }
bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value& o = test_arg(a);
  if (v.identity() || o.identity()) return v.identity() == o.identity();
  return v.type() == o.type() && equal(v, o);
}
bool t_lower(Interpreter&, const Value& v, Args&) {
  const std::string s = soft_str(v);
  return py::lower(s) == s && py::upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, Args&) {
  const std::string s = soft_str(v);
  return py::upper(s) == s && py::lower(s) != s;
}
bool t_filter(Interpreter&, const Value& v, Args&) { return v.is_string() && has_filter(v.str()); }
bool t_test(Interpreter&, const Value& v, Args&) { return v.is_string() && has_test(v.str()); }

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table{
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lessthan", t_lt},
      {"lower", t_lower},
      {"lt", t_lt},
      {"<", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) != 0; }
bool has_test(std::string_view name) { return tests().count(name) != 0; }

std::string missing_filter_message(std::string_view name) {
  if (jinja_only_filter(name)) return "filter '" + std::string(name) + "' is not supported by moelsp's Jinja";
  return "unknown filter '" + std::string(name) + "'";
}

std::string missing_test_message(std::string_view name) { return "unknown test '" + std::string(name) + "'"; }

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw Error(missing_filter_message(name));
  return it->second(in, input, args);
}

bool apply_test(Interpreter& in, std::string_view name, const Value& input, Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw Error(missing_test_message(name));
  return it->second(in, input, args);
}

}  // namespace moelsp::jinja
