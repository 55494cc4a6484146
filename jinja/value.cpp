#include "jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pystr.h"
#include "util/json_limits.h"

namespace moelsp::jinja {

const Value* Args::find(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value Args::get(size_t i, std::string_view name, const Value& fallback) const {
  const Value* v = find(i, name);
  return v ? *v : fallback;
}

void check_size(uint64_t bytes, std::string_view what) {
  if (bytes > kMaxValueBytes)
    throw Error(fmt::format("{} would be larger than 256 MiB, the limit on one value in a template", what));
}

void overflow() { throw Error("integer overflow: the result does not fit in 64 bits"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t int_value(const Value& v, std::string_view what) {
  if (v.type() == Type::Int || v.type() == Type::Bool) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  throw Error(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, type_name(v)));
}

namespace {

// Recursion guard of repr, ==, <, tojson and from_json: values nested deeper
// than kMaxNesting (through namespaces a template can build any depth) raise
// `message` instead of exhausting the stack.
thread_local int g_depth = 0;

class DepthGuard {
 public:
  explicit DepthGuard(const char* message) {
    if (g_depth >= kMaxNesting) throw Error(message);
    ++g_depth;
  }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  ~DepthGuard() { --g_depth; }
};

// The containers repr is printing, innermost last: one met again is a cycle
// (a namespace holding itself), printed as Python prints it: [...], {...}.
thread_local std::vector<const void*> g_printing;

class Printing {
 public:
  explicit Printing(const void* id) : guard_("maximum recursion depth exceeded while getting the repr of an object") {
    g_printing.push_back(id);
  }
  Printing(const Printing&) = delete;
  Printing& operator=(const Printing&) = delete;
  ~Printing() { g_printing.pop_back(); }
  static bool active(const void* id) { return std::find(g_printing.begin(), g_printing.end(), id) != g_printing.end(); }

 private:
  DepthGuard guard_;
};

thread_local bool g_releasing = false;
thread_local std::vector<Value> g_release;

}  // namespace

DeferredRelease::DeferredRelease() : outermost_(!g_releasing) { g_releasing = true; }

DeferredRelease::~DeferredRelease() {
  if (!outermost_) return;
  while (!g_release.empty()) {
    Value v = std::move(g_release.back());  // its destructor may add more
    g_release.pop_back();
  }
  g_releasing = false;
}

void DeferredRelease::add(Value& v) {
  const Type t = v.type();
  if (t == Type::List || t == Type::Dict || t == Type::Namespace || t == Type::Object)
    g_release.push_back(std::move(v));
}

ListData::~ListData() {
  DeferredRelease r;
  for (Value& v : items) r.add(v);
}

DictData::~DictData() {
  DeferredRelease r;
  for (auto& [k, v] : items) {
    r.add(k);
    r.add(v);
  }
}

Value::Value() : Value(Type::Undefined, std::string()) {}
Value::Value(bool b) : Value(Type::Bool, b) {}
Value::Value(int v) : Value(Type::Int, int64_t(v)) {}
Value::Value(int64_t v) : Value(Type::Int, v) {}
Value::Value(double v) : Value(Type::Float, v) {}
Value::Value(std::string s) : Value(Type::String, std::move(s)) {}
Value::Value(const char* s) : Value(Type::String, std::string(s)) {}

Value Value::undefined(std::string message) { return Value(Type::Undefined, std::move(message)); }
Value Value::none() { return Value(Type::None, std::monostate()); }

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

namespace {
std::shared_ptr<ListData> seq(std::vector<Value> items, ListData::Kind kind, std::string label = {}) {
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->kind = kind;
  d->label = std::move(label);
  return d;
}
}  // namespace

Value Value::list(std::vector<Value> items) { return Value(Type::List, seq(std::move(items), ListData::Kind::List)); }
Value Value::tuple(std::vector<Value> items) { return Value(Type::List, seq(std::move(items), ListData::Kind::Tuple)); }

Value Value::generator(std::vector<Value> items, std::string label) {
  return Value(Type::List, seq(std::move(items), ListData::Kind::Generator, std::move(label)));
}

Value Value::view(std::vector<Value> items, std::string label) {
  return Value(Type::List, seq(std::move(items), ListData::Kind::View, std::move(label)));
}

bool Value::is_list() const {
  if (type_ != Type::List) return false;
  const ListData::Kind k = list().kind;
  return k == ListData::Kind::List || k == ListData::Kind::Tuple;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  return Value(Type::Dict, std::make_shared<DictData>(DictData{std::move(items)}));
}

Value Value::ns(std::vector<std::pair<Value, Value>> items) {
  return Value(Type::Namespace, std::make_shared<DictData>(DictData{std::move(items)}));
}

Value Value::object(std::shared_ptr<Object> o) { return Value(Type::Object, std::move(o)); }

namespace {
[[noreturn]] void wrong_type(const Value& v, const char* want) {
  if (v.is_undefined()) fail_undefined(v);
  throw Error(fmt::format("expected {}, not '{}'", want, type_name(v)));
}
}  // namespace

bool Value::as_bool() const {
  if (type_ != Type::Bool) wrong_type(*this, "a bool");
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (type_ == Type::Bool) return int64_t(std::get<bool>(data_));
  if (type_ != Type::Int) {
    if (is_undefined()) fail_undefined(*this);
    throw Error(fmt::format("'{}' object cannot be interpreted as an integer", type_name(*this)));
  }
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (type_ == Type::Float) return std::get<double>(data_);
  if (type_ != Type::Int && type_ != Type::Bool) {
    if (is_undefined()) fail_undefined(*this);
    throw Error(fmt::format("must be real number, not {}", type_name(*this)));
  }
  return double(as_int());
}

const std::string& Value::str() const {
  if (type_ != Type::String) wrong_type(*this, "a string");
  return std::get<std::string>(data_);
}

const ListData& Value::list() const {
  if (type_ != Type::List) wrong_type(*this, "a list");
  return *std::get<std::shared_ptr<ListData>>(data_);
}

DictData& Value::dict() const {
  if (type_ != Type::Dict && type_ != Type::Namespace) wrong_type(*this, "a dict");
  return *std::get<std::shared_ptr<DictData>>(data_);
}

Object& Value::obj() const {
  if (type_ != Type::Object) wrong_type(*this, "an object");
  return *std::get<std::shared_ptr<Object>>(data_);
}

std::shared_ptr<DictData> Value::dict_ref() const {
  if (type_ != Type::Dict && type_ != Type::Namespace) wrong_type(*this, "a dict");
  return std::get<std::shared_ptr<DictData>>(data_);
}

const void* Value::identity() const {
  switch (type_) {
    case Type::List: return std::get<std::shared_ptr<ListData>>(data_).get();
    case Type::Dict:
    case Type::Namespace: return std::get<std::shared_ptr<DictData>>(data_).get();
    case Type::Object: return std::get<std::shared_ptr<Object>>(data_).get();
    default: return nullptr;
  }
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find_str(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value v) {
  for (auto& [k, old] : items)
    if (equal(k, key)) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Object::attr(std::string_view name) const {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(), name));
}

Value Object::call(Interpreter&, Args&) { throw Error("'" + type_name() + "' object is not callable"); }

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: {
      const ListData& l = v.list();
      return l.kind == ListData::Kind::List ? "list" : l.kind == ListData::Kind::Tuple ? "tuple" : l.label;
    }
    case Type::Dict: return "dict";
    case Type::Namespace: return "Namespace";
    case Type::Object: return v.obj().type_name();
  }
  return "object";
}

void fail_undefined(const Value& v) {
  throw Error(v.undefined_message().empty() ? "a value is undefined" : v.undefined_message());
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return v.as_bool();
    case Type::Int: return v.as_int() != 0;
    case Type::Float: return v.as_float() != 0.0;
    case Type::String: return !v.str().empty();
    case Type::List: return v.list().kind == ListData::Kind::Generator || !v.list().items.empty();
    case Type::Dict: return !v.dict().items.empty();
    case Type::Namespace:
    case Type::Object: return true;
  }
  return true;
}

namespace {
bool dicts_equal(const DictData& a, const DictData& b) {
  if (a.items.size() != b.items.size()) return false;
  for (const auto& [k, v] : a.items) {
    const Value* w = b.find(k);
    if (!w || !equal(v, *w)) return false;
  }
  return true;
}
}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.type() == Type::List || a.type() == Type::Dict) {
    DepthGuard guard("maximum recursion depth exceeded in comparison");
    if (a.type() != b.type()) return false;
    if (a.type() == Type::Dict) return a.identity() == b.identity() || dicts_equal(a.dict(), b.dict());
    const ListData &x = a.list(), &y = b.list();
    if (&x == &y) return true;
    if (x.kind == ListData::Kind::Generator || y.kind == ListData::Kind::Generator) return false;
    if (x.kind != y.kind || x.label != y.label || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!equal(x.items[i], y.items[i])) return false;
    return true;
  }
  if (a.is_number() && b.is_number()) {
    if (a.type() == Type::Float || b.type() == Type::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::Undefined:
    case Type::None: return true;
    case Type::String: return a.str() == b.str();
    default: return a.identity() == b.identity();
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() == Type::Float || b.type() == Type::Float) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.list().tuple() == b.list().tuple()) {
    DepthGuard guard("maximum recursion depth exceeded in comparison");
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw Error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {
std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i ? ", " : "") + repr(items[i]);
    check_size(out.size(), "the repr of the list");
  }
  return out;
}

std::string dict_repr(const DictData& d) {
  if (Printing::active(&d)) return "{...}";
  Printing printing(&d);
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    out += (i ? ", " : "") + repr(d.items[i].first) + ": " + repr(d.items[i].second);
    check_size(out.size(), "the repr of the dict");
  }
  return out + "}";
}
}  // namespace

std::string to_str(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return v.as_bool() ? "True" : "False";
    case Type::Int: return std::to_string(v.as_int());
    case Type::Float: return py::float_repr(v.as_float());
    case Type::String: return v.str();
    case Type::List: {
      const ListData& l = v.list();
      if (l.kind != ListData::Kind::Generator && Printing::active(&l))
        return l.kind == ListData::Kind::List ? "[...]" : l.kind == ListData::Kind::Tuple ? "(...)" : "...";
      Printing printing(&l);
      switch (l.kind) {
        case ListData::Kind::List: return "[" + join_repr(l.items) + "]";
        case ListData::Kind::Tuple: return "(" + join_repr(l.items) + (l.items.size() == 1 ? ",)" : ")");
        case ListData::Kind::View: return l.label + "([" + join_repr(l.items) + "])";
        case ListData::Kind::Generator: return "<" + l.label + " object>";
      }
      return "";
    }
    case Type::Dict: return dict_repr(v.dict());
    case Type::Namespace: return "<Namespace " + dict_repr(v.dict()) + ">";
    case Type::Object: return v.obj().repr();
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.is_string()) return v.is_markup() ? "Markup(" + py::repr(v.str()) + ")" : py::repr(v.str());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return 0;
    case Type::String: return int64_t(py::length(v.str()));
    case Type::List:
      if (v.list().kind == ListData::Kind::Generator) throw Error("object of type '" + type_name(v) + "' has no len()");
      return int64_t(v.list().items.size());
    case Type::Dict: return int64_t(v.dict().items.size());
    default: throw Error("object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Type::Undefined: return {};
    case Type::List: {
      const ListData& l = v.list();
      if (l.kind != ListData::Kind::Generator) return l.items;
      if (l.consumed) return {};  // a generator runs once
      l.consumed = true;
      return l.items;
    }
    case Type::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Type::String: {
      std::vector<Value> chars;
      for (char32_t c : py::decode(v.str())) {
        std::string s;
        py::append_utf8(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: throw Error("'" + type_name(v) + "' object is not iterable");
  }
}

namespace {
std::string json_key(const Value& k, const JsonOptions& opt) {
  switch (k.type()) {
    case Type::String: return py::json_quote(k.str(), opt.ensure_ascii);
    case Type::None: return "\"null\"";
    case Type::Bool: return k.as_bool() ? "\"true\"" : "\"false\"";
    case Type::Int:
    case Type::Float: return fmt::format("\"{}\"", to_str(k));
    default: throw Error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py::float_repr(d);
}

void dump(const Value& v, const JsonOptions& opt, int level, std::string& out);

// The separator before item `i` of a container at `level` (Python's
// encoder: items on their own indented lines when indenting).
void item_prefix(size_t i, const JsonOptions& opt, int level, std::string& out) {
  if (i) out += opt.item_sep;
  if (!opt.pretty) return;
  check_size(out.size() + (uint64_t(level) + 1) * opt.indent.size(), "the JSON text");
  out += '\n';
  for (int k = 0; k <= level; ++k) out += opt.indent;
}

void close(const JsonOptions& opt, int level, char bracket, std::string& out) {
  if (opt.pretty) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += opt.indent;
  }
  out += bracket;
}

void dump_dict(const DictData& d, const JsonOptions& opt, int level, std::string& out) {
  if (d.items.empty()) {
    out += "{}";
    return;
  }
  std::vector<const std::pair<Value, Value>*> items;
  for (const auto& kv : d.items) items.push_back(&kv);
  if (opt.sort_keys)
    std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return less(a->first, b->first); });
  out += '{';
  for (size_t i = 0; i < items.size(); ++i) {
    item_prefix(i, opt, level, out);
    out += json_key(items[i]->first, opt) + opt.key_sep;
    dump(items[i]->second, opt, level + 1, out);
  }
  close(opt, level, '}', out);
}

void dump(const Value& v, const JsonOptions& opt, int level, std::string& out) {
  check_size(out.size(), "the JSON text");
  DepthGuard guard("maximum recursion depth exceeded while encoding a JSON object");
  switch (v.type()) {
    case Type::None: out += "null"; return;
    case Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Type::Int: out += std::to_string(v.as_int()); return;
    case Type::Float: out += json_float(v.as_float()); return;
    case Type::String: out += py::json_quote(v.str(), opt.ensure_ascii); return;
    case Type::List: {
      if (!v.is_list()) throw Error("Object of type " + type_name(v) + " is not JSON serializable");
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        item_prefix(i, opt, level, out);
        dump(items[i], opt, level + 1, out);
      }
      close(opt, level, ']', out);
      return;
    }
    case Type::Dict: dump_dict(v.dict(), opt, level, out); return;
    default: throw Error("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

Value from_nlohmann(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json;
  DepthGuard guard("the JSON nests too deeply");
  switch (j.type()) {
    case J::value_t::null: return Value::none();
    case J::value_t::boolean: return Value(j.get<bool>());
    case J::value_t::number_integer: return Value(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case J::value_t::number_float: return Value(j.get<double>());
    case J::value_t::string: return Value(j.get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : j) items.push_back(from_nlohmann(e));
      return Value::list(std::move(items));
    }
    case J::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [k, e] : j.items()) items.emplace_back(Value(k), from_nlohmann(e));
      return Value::dict(std::move(items));
    }
    default: throw Error("unsupported JSON value");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  dump(v, opt, 0, out);
  check_size(out.size(), "the JSON text");
  return out;
}

Value from_json(std::string_view text) {
  // Nesting beyond the interpreter's own limit is refused before parsing.
  if (const std::string problem =
          json_limit_problem(text, {.max_depth = kMaxNesting, .max_bytes = kJsonLimits.max_bytes});
      !problem.empty())
    throw Error("invalid JSON: " + problem);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what());
  }
  return from_nlohmann(j);
}

}  // namespace moelsp::jinja
