// Attribute and item access as Jinja's ImmutableSandboxedEnvironment does
// it, the Python methods of str, dict and list that templates call, and the
// global functions.
#include <algorithm>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "interpreter.h"
#include "pystr.h"

namespace moelsp::jinja {

namespace {

// Methods that would change a list or dict: the immutable sandbox refuses
// them, so a template that calls them fails under HuggingFace too.
bool mutates(const Value& obj, std::string_view name) {
  static const std::string_view kList[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const std::string_view kDict[] = {"pop", "popitem", "update", "setdefault", "clear"};
  const auto in = [&](const auto& list) {
    for (std::string_view n : list)
      if (n == name) return true;
    return false;
  };
  return obj.is_list() ? in(kList) : obj.is_mapping() && in(kDict);
}

bool has_method(const Value& obj, std::string_view name) {
  static const std::string_view kStr[] = {
      "strip",   "lstrip",    "rstrip",     "split",        "rsplit",      "splitlines", "startswith", "endswith",
      "upper",   "lower",     "title",      "capitalize",   "swapcase",    "replace",    "find",       "rfind",
      "index",   "rindex",    "count",      "join",         "format",      "isdigit",    "isalpha",    "isalnum",
      "isspace", "isupper",   "islower",    "isnumeric",    "isdecimal",   "center",     "ljust",      "rjust",
      "zfill",   "partition", "rpartition", "removeprefix", "removesuffix"};
  static const std::string_view kDict[] = {"get", "items", "keys", "values", "copy"};
  static const std::string_view kList[] = {"index", "count", "copy"};
  const auto in = [&](const auto& list) {
    for (std::string_view n : list)
      if (n == name) return true;
    return false;
  };
  if (obj.is_string()) return in(kStr);
  if (obj.is_mapping()) return in(kDict);
  if (obj.is_list()) return in(kList);
  return false;
}

Value call_method(const Value& self, const std::string& name, Args& a);

Value bound_method(const Value& self, std::string_view name) {
  if (mutates(self, name))
    return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(self) +
                            "' object is unsafe (the sandbox HuggingFace runs chat templates in makes lists "
                            "and dicts immutable)");
  if (!has_method(self, name)) return Value();
  std::string n(name);
  return Value::object(
      std::make_shared<Function>(n, [self, n](Interpreter&, Args& a) { return call_method(self, n, a); }));
}

Value no_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

std::optional<std::string> opt_str(const Args& a, size_t i, std::string_view name) {
  const Value* v = a.find(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw Error(std::string(name) + " must be a string, not " + type_name(*v));
  return v->str();
}

int64_t opt_int(const Args& a, size_t i, std::string_view name, int64_t fallback) {
  const Value* v = a.find(i, name);
  if (!v || v->is_none()) return fallback;
  if (v->type() != Type::Int && v->type() != Type::Bool)
    throw Error(std::string(name) + " must be an integer, not " + type_name(*v));
  return v->as_int();
}

const std::string& str_arg(const Args& a, size_t i, std::string_view name) {
  const Value* v = a.find(i, name);
  if (!v) throw Error("missing argument '" + std::string(name) + "'");
  if (!v->is_string()) throw Error(std::string(name) + " must be a string, not " + type_name(*v));
  return v->str();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

// startswith/endswith take a string or a tuple of strings.
bool affix_match(const std::string& s, const Value& affix, bool at_start) {
  if (affix.is_list()) {
    for (const Value& v : affix.list().items)
      if (affix_match(s, v, at_start)) return true;
    return false;
  }
  if (!affix.is_string()) throw Error("startswith/endswith take a string or a tuple of strings");
  const std::string& x = affix.str();
  if (x.size() > s.size()) return false;
  return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
}

bool all_chars(const std::string& s, bool (*pred)(char)) {
  if (s.empty()) return false;
  for (char c : s)
    if (!pred(c)) return false;
  return true;
}

// str.format with {} / {0} / {name} fields and {{ }} escapes.
Value str_format(const std::string& fmt, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') throw Error("single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw Error("single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      throw Error("str.format: only plain {} fields are supported, not {" + field + "}");
    const Value* v = nullptr;
    if (field.empty()) v = a.find(auto_index++, "");
    else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      if (field.size() > 9 ||
          !std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit((unsigned char)d); }))
        throw Error("str.format: no argument for {" + field + "}");
      v = a.find(std::stoul(field), "");
    } else v = a.find(SIZE_MAX, field);
    if (!v) throw Error("str.format: no argument for {" + field + "}");
    out += to_str(*v);
    check_size(out.size(), "the formatted string");
    i = close;
  }
  return Value(std::move(out));
}

Value pad(const std::string& s, const Args& a, char how) {
  const int64_t width = opt_int(a, 0, "width", 0);
  const std::string fill = opt_str(a, 1, "fillchar").value_or(" ");
  if (py::length(fill) != 1) throw Error("The fill character must be exactly one character long");
  const int64_t len = int64_t(py::length(s));
  if (width <= len) return Value(s);
  const int64_t total = width - len;
  check_size(uint64_t(total) * fill.size() + s.size(), "the padded string");
  int64_t left = how == 'l' ? 0 : how == 'r' ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value(std::move(out));
}

Value partition(const std::string& s, const std::string& sep, bool from_right) {
  const size_t at = from_right ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos)
    return from_right ? Value::tuple({Value(""), Value(""), Value(s)}) : Value::tuple({Value(s), Value(""), Value("")});
  return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
}

// str.join(iterable), the result's size checked before it is built.
Value str_join(const std::string& s, const Args& a) {
  const Value* seq = a.find(0, "iterable");
  if (!seq) throw Error("join() takes exactly one argument");
  const std::vector<Value> items = iterate(*seq);
  uint64_t total = 0;
  for (const Value& v : items) {
    if (!v.is_string()) throw Error("sequence item: expected str instance, " + type_name(v) + " found");
    total += s.size() + v.str().size();
    check_size(total, "the joined string");
  }
  std::string out;
  out.reserve(size_t(total));
  bool first = true;
  for (const Value& v : items) {
    if (!first) out += s;
    out += v.str();
    first = false;
  }
  return Value(std::move(out));
}

// str.isupper() / islower(): some cased character, and none of the other case.
bool all_cased(const std::string& s, bool up) {
  bool cased = false;
  for (char c : s) {
    if (std::isupper((unsigned char)c) || std::islower((unsigned char)c)) cased = true;
    if (up ? std::islower((unsigned char)c) : std::isupper((unsigned char)c)) return false;
  }
  return cased;
}

// str.zfill(width): zeros after the sign up to `width` code points.
Value zfill(const std::string& s, int64_t width) {
  const int64_t len = int64_t(py::length(s));
  if (width <= len) return Value(s);
  check_size(uint64_t(width - len) + s.size(), "the zero-filled string");
  const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return Value(s.substr(0, sign) + std::string(size_t(width - len), '0') + s.substr(sign));
}

Value string_method(const std::string& s, const std::string& name, const Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value(py::strip(s, opt_str(a, 0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit") {
    const std::optional<std::string> sep = opt_str(a, 0, "sep");
    if (sep && sep->empty()) throw Error("empty separator");
    const int64_t maxsplit = opt_int(a, 1, "maxsplit", -1);
    return str_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") return str_list(py::splitlines(s));
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.find(0, "prefix");
    if (!affix) throw Error(name + "() takes at least 1 argument");
    if (a.pos.size() > 1) {  // s.startswith(x, start, end) tests s[start:end]
      const Value part = slice(Value(s), a.pos[1], a.pos.size() > 2 ? a.pos[2] : Value::none(), Value::none());
      return Value(affix_match(part.str(), *affix, name == "startswith"));
    }
    return Value(affix_match(s, *affix, name == "startswith"));
  }
  if (name == "upper") return Value(py::upper(s));
  if (name == "lower") return Value(py::lower(s));
  if (name == "title") return Value(py::title(s));
  if (name == "capitalize") return Value(py::capitalize(s));
  if (name == "swapcase") return Value(py::swapcase(s));
  if (name == "replace")
    return Value(py::replace(s, str_arg(a, 0, "old"), str_arg(a, 1, "new"), opt_int(a, 2, "count", -1)));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const int64_t at = py::find(s, str_arg(a, 0, "sub"), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw Error("substring not found");
    return Value(at);
  }
  if (name == "count") return Value(py::count(s, str_arg(a, 0, "sub")));
  if (name == "join") return str_join(s, a);
  if (name == "format") return str_format(s, a);
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value(all_chars(s, [](char c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value(all_chars(s, [](char c) { return bool(std::isalpha((unsigned char)c)); }));
  if (name == "isalnum") return Value(all_chars(s, [](char c) { return bool(std::isalnum((unsigned char)c)); }));
  if (name == "isspace") return Value(all_chars(s, [](char c) { return py::is_space((unsigned char)c); }));
  if (name == "isupper" || name == "islower") return Value(all_cased(s, name == "isupper"));
  if (name == "center") return pad(s, a, 'c');
  if (name == "ljust") return pad(s, a, 'l');
  if (name == "rjust") return pad(s, a, 'r');
  if (name == "zfill") return zfill(s, opt_int(a, 0, "width", 0));
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = str_arg(a, 0, "sep");
    if (sep.empty()) throw Error("empty separator");
    return partition(s, sep, name[0] == 'r');
  }
  if (name == "removeprefix") {
    const std::string& p = str_arg(a, 0, "prefix");
    return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
  }
  if (name == "removesuffix") {
    const std::string& p = str_arg(a, 0, "suffix");
    const bool has = !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return Value(has ? s.substr(0, s.size() - p.size()) : s);
  }
  throw Error("str has no method '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, const Args& a) {
  const DictData& d = self.dict();
  if (name == "get") {
    const Value* key = a.find(0, "key");
    if (!key) throw Error("get expected at least 1 argument, got 0");
    const Value* v = d.find(*key);
    return v ? *v : a.get(1, "default", Value::none());
  }
  if (name == "copy") return Value::dict(d.items);
  std::vector<Value> out;
  for (const auto& [k, v] : d.items) {
    if (name == "items") out.push_back(Value::tuple({k, v}));
    else if (name == "keys") out.push_back(k);
    else out.push_back(v);
  }
  return Value::view(std::move(out), "dict_" + name);
}

Value list_method(const Value& self, const std::string& name, const Args& a) {
  const auto& items = self.list().items;
  if (name == "copy") return Value::list(items);
  const Value* x = a.find(0, "value");
  if (!x) throw Error(name + "() takes exactly one argument");
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equal(items[i], *x)) continue;
    if (name == "index") return Value(int64_t(i));
    ++n;
  }
  if (name == "index") throw Error(repr(*x) + " is not in list");
  return Value(n);
}

Value call_method(const Value& self, const std::string& name, Args& a) {
  if (self.is_string()) return string_method(self.str(), name, a);
  if (self.is_mapping()) return dict_method(self, name, a);
  return list_method(self, name, a);
}

// Python's list index: negative counts from the end; None when out of range.
std::optional<size_t> index_of(int64_t i, size_t size) {
  if (i < 0) i += int64_t(size);
  if (i < 0 || i >= int64_t(size)) return std::nullopt;
  return size_t(i);
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_')
    return Value::undefined("access to attribute '" + std::string(name) + "' is unsafe");
  switch (obj.type()) {
    case Type::Dict: {
      // Python's getattr first: `d.items` is the method even if 'items' is a key.
      if (has_method(obj, name) || mutates(obj, name)) return bound_method(obj, name);
      const Value* v = obj.dict().find_str(name);
      return v ? *v : no_attribute(obj, name);
    }
    case Type::Namespace: {
      const Value* v = obj.dict().find_str(name);
      return v ? *v : no_attribute(obj, name);
    }
    case Type::String:
    case Type::List: {
      Value m = bound_method(obj, name);
      return m.is_undefined() && m.undefined_message().empty() ? no_attribute(obj, name) : m;
    }
    case Type::Object: return obj.obj().attr(name);
    default: return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  const bool int_key = key.type() == Type::Int || key.type() == Type::Bool;
  switch (obj.type()) {
    case Type::Dict: {
      // Python's subscription first: `d['items']` is the key if there is one.
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Type::List:
      if (int_key && obj.is_list()) {  // generators and views are not subscriptable
        const auto& items = obj.list().items;
        const auto i = index_of(key.as_int(), items.size());
        return i ? items[*i]
                 : Value::undefined(type_name(obj) + " index " + std::to_string(key.as_int()) + " is out of range");
      }
      break;
    case Type::String:
      if (int_key) {
        const std::u32string u = py::decode(obj.str());
        const auto i = index_of(key.as_int(), u.size());
        if (!i) return Value::undefined("string index " + std::to_string(key.as_int()) + " is out of range");
        return Value(py::encode(u.substr(*i, 1)));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
}

Value call_value(Interpreter& in, const Value& callee, Args& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.type() != Type::Object || !callee.obj().callable())
    throw Error("'" + type_name(callee) + "' object is not callable");
  return callee.obj().call(in, args);
}

namespace {

Value range_fn(Interpreter& in, Args& a) {
  int64_t start = 0, stop = 0, step = 1;
  const auto num = [&](size_t i) {
    const Value& v = a.pos[i];
    if (v.type() != Type::Int && v.type() != Type::Bool) throw Error("range() takes integers, not " + type_name(v));
    return v.as_int();
  };
  if (a.pos.size() == 1) stop = num(0);
  else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = num(0);
    stop = num(1);
    if (a.pos.size() == 3) step = num(2);
  } else throw Error("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
  if (step == 0) throw Error("range() arg 3 must not be zero");
  // Python's range length, in unsigned arithmetic: no int64 overflow on the way.
  uint64_t n = 0;
  if (step > 0 && start < stop) n = (uint64_t(stop) - uint64_t(start) - 1) / uint64_t(step) + 1;
  else if (step < 0 && start > stop) n = (uint64_t(start) - uint64_t(stop) - 1) / (0 - uint64_t(step)) + 1;
  if (n > 100000) throw Error("range too big, the sandbox allows 100000 items");  // Jinja's MAX_RANGE
  std::vector<Value> out;
  out.reserve(size_t(n));
  for (uint64_t k = 0; k < n; ++k) out.emplace_back(int64_t(uint64_t(start) + k * uint64_t(step)));
  in.charge(int64_t(out.size()));
  return Value::list(std::move(out));
}

std::vector<std::pair<Value, Value>> kwargs_items(const Args& a, const char* fn) {
  std::vector<std::pair<Value, Value>> items;
  for (const Value& p : a.pos) {
    if (!p.is_mapping()) throw Error(std::string(fn) + "() takes a mapping or keyword arguments");
    for (const auto& kv : p.dict().items) items.push_back(kv);
  }
  for (const auto& [k, v] : a.kw) items.emplace_back(Value(k), v);
  return items;
}

Value strftime_now(Interpreter& in, Args& a) {
  const Value* fmt = a.find(0, "format");
  if (!fmt || !fmt->is_string()) throw Error("strftime_now takes a format string");
  std::tm tm{};
  if (in.clock().fixed_utc) {
    const std::time_t t = std::time_t(*in.clock().fixed_utc);
    gmtime_r(&t, &tm);
  } else {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &tm);
  }
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, fmt->str().c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

Value make_global(std::string_view name) {
  const auto fn = [&](Function::Fn f) { return Value::object(std::make_shared<Function>(std::string(name), f)); };
  if (name == "range") return fn(range_fn);
  if (name == "namespace")
    return fn([](Interpreter& in, Args& a) {
      Value ns = Value::ns(kwargs_items(a, "namespace"));
      in.track_namespace(ns);
      return ns;
    });
  if (name == "dict") return fn([](Interpreter&, Args& a) { return Value::dict(kwargs_items(a, "dict")); });
  if (name == "raise_exception")
    return fn([](Interpreter&, Args& a) -> Value {
      const Value* msg = a.find(0, "message");
      throw Error("the template raised an error: " + (msg ? to_str(*msg) : std::string()));
    });
  if (name == "strftime_now") return fn(strftime_now);
  if (name == "joiner")
    return fn([](Interpreter&, Args& a) {
      const std::string sep = a.pos.empty() ? ", " : to_str(a.pos[0]);
      auto used = std::make_shared<bool>(false);
      return Value::object(std::make_shared<Function>("joiner", [sep, used](Interpreter&, Args&) {
        if (!*used) {
          *used = true;
          return Value("");
        }
        return Value(sep);
      }));
    });
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

}  // namespace moelsp::jinja
