// The values a Jinja template computes with, modelled on the Python objects
// Jinja2 hands around: none, bool, int, float, str (optionally marked safe,
// markupsafe's Markup), list and tuple, dict (insertion-ordered), Jinja's
// namespace, and callables/objects (macros, loop, bound methods). Lists and
// dicts are shared by reference as in Python. Undefined carries the message
// Jinja would raise when it is used in a way that needs a value. Filters
// like map/select return Python generators and dict.items() a view; they
// are sequences of another kind (ListData::Kind) because templates can tell
// them apart: a generator is always true, has no len(), prints oddly, is
// not JSON and is used up by one pass.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace moelsp::jinja {

// A template error; `line` 0 means "not known yet": the interpreter fills in
// the line of the node being evaluated as the error passes through it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int line = 0) : std::runtime_error(what), line(line) {}
  int line;
};

enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Object };

class Value;
class Interpreter;

// What one value may grow to. A template can ask for any size with a number
// ('x' * n, center(n), '%*s', range, indent); these limits refuse the
// allocation before it is made, with an error naming the limit, where Python
// would raise MemoryError or try.
constexpr size_t kMaxValueBytes = 256u << 20;  // a string or list built by one operation (as the output limit)
constexpr int kMaxNesting = 512;               // how deep repr, ==, <, tojson and from_json follow nested values

// Throws unless `bytes` (what `what` would build) fits within kMaxValueBytes.
void check_size(uint64_t bytes, std::string_view what);
// Python's int arithmetic on 64 bits: a result that does not fit throws.
[[noreturn]] void overflow();
int64_t checked_add(int64_t a, int64_t b);
int64_t checked_sub(int64_t a, int64_t b);
int64_t checked_mul(int64_t a, int64_t b);
// `v` as an integer argument `what` takes: an int or bool, else the error
// Python raises (an undefined value raises its own error).
int64_t int_value(const Value& v, std::string_view what);
struct ListData;
struct DictData;
class Object;

// Arguments of a call: positional then keyword, as written.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // Argument `i` (or keyword `name`), else `fallback`; consumed arguments
  // are not tracked, callers check counts where Python would.
  const Value* find(size_t i, std::string_view name) const;
  Value get(size_t i, std::string_view name, const Value& fallback) const;
};

class Value {
 public:
  Value();  // undefined, without a name
  Value(bool b);
  Value(int v);
  Value(int64_t v);
  Value(double v);
  Value(std::string s);
  Value(const char* s);

  static Value undefined(std::string message);  // message: what using it raises
  static Value none();
  static Value markup(std::string s);  // a str marked safe
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  // `label` is the Python type name: "generator", "dict_items", …
  static Value generator(std::vector<Value> items, std::string label = "generator");
  static Value view(std::vector<Value> items, std::string label);
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value ns(std::vector<std::pair<Value, Value>> items);
  static Value object(std::shared_ptr<Object> o);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_string() const { return type_ == Type::String; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float || type_ == Type::Bool; }
  bool is_list() const;                                     // a Python list or tuple (not a generator or view)
  bool is_sequence() const { return type_ == Type::List; }  // any of ListData's kinds
  bool is_mapping() const { return type_ == Type::Dict; }
  bool is_markup() const { return markup_; }

  // The accessors check the type: a value of another type raises a template
  // Error (a TypeError-like message, or an undefined value's own error),
  // never std::bad_variant_access.
  bool as_bool() const;
  int64_t as_int() const;   // Int or Bool
  double as_float() const;  // any number
  const std::string& str() const;
  const ListData& list() const;
  DictData& dict() const;  // Dict or Namespace
  Object& obj() const;
  std::shared_ptr<DictData> dict_ref() const;
  const std::string& undefined_message() const { return std::get<std::string>(data_); }
  // Identity, for `is sameas` and comparing objects.
  const void* identity() const;

 private:
  using Data = std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
                            std::shared_ptr<DictData>, std::shared_ptr<Object>>;
  Value(Type t, Data d) : type_(t), data_(std::move(d)) {}
  Type type_;
  bool markup_ = false;
  Data data_;
};

struct ListData {
  enum class Kind : uint8_t { List, Tuple, Generator, View };
  std::vector<Value> items;
  Kind kind = Kind::List;
  std::string label;              // Generator/View: the Python type name
  mutable bool consumed = false;  // Generator: iterated once already

  bool tuple() const { return kind == Kind::Tuple; }
  ~ListData();
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python's dict
  const Value* find(const Value& key) const;
  const Value* find_str(std::string_view key) const;  // a str key
  void set(const Value& key, Value v);
  ~DictData();
};

// Destroys values without recursing: a list holding a list holding … (a
// template can build millions of levels) would otherwise overflow the stack
// as each destructor runs the next. The destructors of containers hand their
// items to one of these; the outermost one destroys them in a loop.
class DeferredRelease {
 public:
  DeferredRelease();
  DeferredRelease(const DeferredRelease&) = delete;
  DeferredRelease& operator=(const DeferredRelease&) = delete;
  ~DeferredRelease();
  void add(Value& v);  // takes `v` (leaving it empty) if it holds a container or object

 private:
  bool outermost_;
};

// Macros, builtins, bound methods, `loop`.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const { return "<" + type_name() + " object>"; }
  virtual Value attr(std::string_view name) const;  // undefined unless overridden
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, Args& args);  // throws unless overridden
};

// Python's type names, as error messages cite them.
std::string type_name(const Value& v);
// Raises the error an undefined value stands for.
[[noreturn]] void fail_undefined(const Value& v);

bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// a < b as Python orders them; throws TypeError-like Error for unorderable.
bool less(const Value& a, const Value& b);
// str(v) and repr(v) as Python prints them (undefined prints as "").
std::string to_str(const Value& v);
std::string repr(const Value& v);
// len(v); throws for values without a length.
int64_t length(const Value& v);
// The items iterating `v` yields: a list's items, a dict's keys, a string's
// characters; undefined yields nothing.
std::vector<Value> iterate(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // newline + this per level when `pretty`
  bool pretty = false;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v) with the given options.
std::string to_json(const Value& v, const JsonOptions& opt);
// Parses JSON text into values (objects keep their key order); throws Error.
Value from_json(std::string_view text);

}  // namespace moelsp::jinja
