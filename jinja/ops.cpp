// Python's arithmetic, `in` and slicing on template values, with Python's
// error messages where a template could trip over them.
#include <cctype>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "interpreter.h"
#include "pystr.h"
#include "util/markup.h"

namespace moelsp::jinja {

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw Error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool is_float(const Value& a, const Value& b) { return a.type() == Type::Float || b.type() == Type::Float; }

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_float(a, b)) return Value(a.as_float() + b.as_float());
    return Value(checked_add(a.as_int(), b.as_int()));
  }
  if (a.is_string() && b.is_string()) {
    // markupsafe: adding to a Markup escapes the plain side.
    if (a.is_markup() || b.is_markup()) {
      const std::string l = a.is_markup() ? a.str() : markup_escape(a.str());
      const std::string r = b.is_markup() ? b.str() : markup_escape(b.str());
      return Value::markup(l + r);
    }
    check_size(uint64_t(a.str().size()) + b.str().size(), "the string");
    return Value(a.str() + b.str());
  }
  if (a.is_list() && b.is_list() && a.list().tuple() == b.list().tuple()) {
    check_size((uint64_t(a.list().items.size()) + b.list().items.size()) * sizeof(Value), "the list");
    std::vector<Value> items = a.list().items;
    items.insert(items.end(), b.list().items.begin(), b.list().items.end());
    return a.list().tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (a.is_string() || a.is_list())
    throw Error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  unsupported("+", a, b);
}

// The bytes a list's items take (its strings' text included): what repeating
// it copies.
uint64_t list_bytes(const std::vector<Value>& items) {
  uint64_t n = 0;
  for (const Value& v : items) n += sizeof(Value) + (v.is_string() ? v.str().size() : 0);
  return n;
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  const uint64_t unit = seq.is_string() ? seq.str().size() : list_bytes(seq.list().items);
  // unit and n are both far below 2^64 / kMaxValueBytes when the product fits.
  if (unit != 0 && uint64_t(n) > kMaxValueBytes / unit)
    check_size(kMaxValueBytes + 1, "the repeated " + type_name(seq));
  if (seq.is_string()) {
    std::string out;
    const size_t total = size_t(unit * uint64_t(n));
    out.reserve(total);
    if (n > 0) out = seq.str();
    while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));  // doubling
    return Value(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  return seq.list().tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

bool is_int(const Value& v) { return v.type() == Type::Int || v.type() == Type::Bool; }

Value multiply(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_float(a, b)) return Value(a.as_float() * b.as_float());
    return Value(checked_mul(a.as_int(), b.as_int()));
  }
  if ((a.is_string() || a.is_list()) && is_int(b)) return repeat(a, b.as_int());
  if ((b.is_string() || b.is_list()) && is_int(a)) return repeat(b, a.as_int());
  unsupported("*", a, b);
}

void check_divisor(const Value& b) {
  if (b.as_float() == 0.0) throw Error(b.type() == Type::Float ? "float division by zero" : "division by zero");
}

Value floor_divide(const Value& a, const Value& b) {
  check_divisor(b);
  if (is_float(a, b)) return Value(std::floor(a.as_float() / b.as_float()));
  const int64_t x = a.as_int(), y = b.as_int();
  if (x == INT64_MIN && y == -1) overflow();
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return Value(q);
}

Value modulo(const Value& a, const Value& b) {
  check_divisor(b);
  if (is_float(a, b)) {
    const double x = a.as_float(), y = b.as_float();
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  const int64_t x = a.as_int(), y = b.as_int();
  if (y == -1) return Value(int64_t(0));
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value(m);
}

Value power(const Value& a, const Value& b) {
  if (!is_float(a, b) && b.as_int() >= 0) {
    int64_t r = 1, base = a.as_int();
    for (int64_t e = b.as_int(); e > 0; e >>= 1) {
      if (e & 1) r = checked_mul(r, base);
      if (e > 1) base = checked_mul(base, base);
    }
    return Value(r);
  }
  if (a.as_float() == 0.0 && b.as_float() < 0) throw Error("0.0 cannot be raised to a negative power");
  return Value(std::pow(a.as_float(), b.as_float()));
}

// printf's text for one numeric conversion: `spec` ends in the conversion.
template <class T>
std::string c_format(const std::string& spec, T x) {
  const int n = std::snprintf(nullptr, 0, spec.c_str(), x);
  if (n < 0) throw Error("cannot format " + spec);
  std::string out(size_t(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), x);
  out.resize(size_t(n));
  return out;
}

// %d of a float: Python's int(x), which must fit.
long long float_to_int(double d) {
  if (std::isnan(d)) throw Error("cannot convert float NaN to integer");
  if (std::isinf(d)) throw Error("cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t < -9223372036854775808.0 || t >= 9223372036854775808.0) overflow();
  return (long long)t;
}

// One %-conversion of Python's printf-style formatting. `width` and
// `precision` are at most kMaxValueBytes (the parser checks).
std::string format_one(char conv, const std::string& flags, int64_t width, int64_t precision, const Value& v) {
  std::string body;
  if (conv == 's') body = to_str(v);
  else if (conv == 'r' || conv == 'a') body = repr(v);
  else {
    if (!v.is_number())
      throw Error(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
    std::string spec = "%" + flags;
    if (width > 0) spec += std::to_string(width);
    if (precision >= 0) spec += "." + std::to_string(precision);
    if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      const long long n = v.type() == Type::Float ? float_to_int(v.as_float()) : (long long)v.as_int();
      return c_format(spec + "ll" + (conv == 'i' ? 'd' : conv), n);
    }
    return c_format(spec + conv, v.as_float());  // printf applied the width and flags
  }
  if (precision >= 0) {  // '%.3s': at most that many code points
    const std::u32string u = py::decode(body);
    if (u.size() > uint64_t(precision)) body = py::encode(std::u32string_view(u).substr(0, size_t(precision)));
  }
  const bool left = flags.find('-') != std::string::npos;
  const size_t len = py::length(body);
  if (width > 0 && len < size_t(width)) {
    check_size(body.size() + uint64_t(width), "the formatted string");
    const std::string pad(size_t(width) - len, ' ');
    body = left ? body + pad : pad + body;
  }
  return body;
}

Value percent_format(const std::string& fmt, const Value& args) {
  const bool is_tuple = args.is_list() && args.list().tuple();
  const std::vector<Value> items = is_tuple ? args.list().items : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    check_size(out.size(), "the formatted string");
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw Error("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {  // %(key)s takes the value from a mapping
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos || !args.is_mapping()) throw Error("format requires a mapping");
      arg = args.dict().find_str(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!arg) throw Error("format key '" + fmt.substr(i + 1, close - i - 1) + "' is missing");
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    // A number in the format: Python's "width too big" past its int limit;
    // here past what one value may hold.
    const auto number = [&](const char* what) {
      int64_t n = 0;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        n = n * 10 + (fmt[i++] - '0');
        if (n > int64_t(kMaxValueBytes))
          throw Error(std::string(what) + " too big (the limit on one value in a template is 256 MiB)");
      }
      return n;
    };
    const int64_t width = number("width");
    int64_t precision = -1;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = number("precision");
    }
    if (i >= fmt.size()) throw Error("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (std::string_view("srdiaxXofFeEgG").find(conv) == std::string_view::npos)
      throw Error(std::string("unsupported format character '") + conv + "'");
    if (!arg) {
      if (next >= items.size()) throw Error("not enough arguments for format string");
      arg = &items[next++];
    }
    out += format_one(conv, flags, width, precision, *arg);
  }
  if (!args.is_mapping() && next < items.size()) throw Error("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l = to_str(a), r = to_str(b);
    check_size(uint64_t(l.size()) + r.size(), "the string");
    return Value(l + r);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "+") return add(a, b);
  if (op == "*") return multiply(a, b);
  if (op == "%" && a.is_string()) return percent_format(a.str(), b);
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  if (op == "-") {
    if (is_float(a, b)) return Value(a.as_float() - b.as_float());
    return Value(checked_sub(a.as_int(), b.as_int()));
  }
  if (op == "/") {
    check_divisor(b);
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") return floor_divide(a, b);
  if (op == "%") return modulo(a, b);
  if (op == "**") return power(a, b);
  throw Error("unknown operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::Undefined: return false;
    case Type::String:
      if (!item.is_string()) throw Error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Type::List:
      for (const Value& v : iterate(container))
        if (equal(v, item)) return true;
      return false;
    case Type::Dict: return container.dict().find(item) != nullptr;
    default: throw Error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

namespace {
// Python's PySlice_AdjustIndices: the positions a slice visits.
std::vector<int64_t> slice_positions(int64_t len, const Value& start, const Value& stop, const Value& step) {
  const auto as_index = [](const Value& v, const char* what) {
    if (!is_int(v)) throw Error(std::string("slice ") + what + " must be an integer or none, not " + type_name(v));
    return v.as_int();
  };
  const auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  const int64_t st = given(step) ? as_index(step, "step") : 1;
  if (st == 0) throw Error("slice step cannot be zero");
  const auto adjust = [&](const Value& v, int64_t fallback, const char* what) {
    if (!given(v)) return fallback;
    int64_t i = as_index(v, what);
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  const int64_t b = adjust(start, st < 0 ? len - 1 : 0, "start");
  const int64_t e = adjust(stop, st < 0 ? -1 : len, "stop");
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    out.push_back(i);
    // The next position may lie past int64's range: stop before computing it.
    if (st > 0 ? e - i <= st : i - e + st <= 0) break;
  }
  return out;
}
}  // namespace

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_string()) {
    const std::u32string u = py::decode(v.str());
    std::u32string out;
    for (int64_t i : slice_positions(int64_t(u.size()), start, stop, step)) out += u[size_t(i)];
    return Value(py::encode(out));
  }
  if (v.is_list()) {
    const auto& items = v.list().items;
    std::vector<Value> out;
    for (int64_t i : slice_positions(int64_t(items.size()), start, stop, step)) out.push_back(items[size_t(i)]);
    return v.list().tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined(fmt::format("'{} object' cannot be sliced", type_name(v)));
}

}  // namespace moelsp::jinja
