// GGUF (v2, v3) reader over mmap and writer.
//
// The reader validates the whole header before anything else touches it:
// every count, length and offset is checked against the bytes that remain, so
// a truncated or hostile file yields a GgufError naming the file, the byte
// offset and the problem, never a crash or a huge allocation. Tensor data is
// not copied: tensor_data() points into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/types.h"

namespace moelsp::gguf {

using kernels::DType;

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// From File::from_header: the header goes on past the bytes given (read
// more of the file and try again).
class GgufHeaderIncomplete : public GgufError {
 public:
  using GgufError::GgufError;
};

// Metadata value types; the numbering is the file format's.
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem = ValueType::UINT8;
  std::vector<Value> items;
  bool operator==(const Array&) const = default;
};

// One metadata value. The variant's alternative index equals the ValueType
// number, so the exact on-disk type survives a read → write round trip.
struct Value {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array,
                               uint64_t, int64_t, double>;
  Storage v;

  Value() = default;
  template <class T,
            class = std::enable_if_t<std::is_constructible_v<Storage, T&&> && !std::is_same_v<std::decay_t<T>, Value>>>
  Value(T&& x) : v(std::forward<T>(x)) {}  // NOLINT: implicit on purpose
  Value(const char* s) : v(std::string(s)) {}

  ValueType type() const { return static_cast<ValueType>(v.index()); }
  bool operator==(const Value&) const = default;

  // Typed access with conversion between numeric types where the value fits;
  // nullopt on a type mismatch or out-of-range value.
  template <class T>
  std::optional<T> as() const;
  // A short human-readable rendering (arrays abbreviated after `max_items`).
  std::string to_string(size_t max_items = 8) const;
};

// Array helpers for the common homogeneous cases.
template <class T>
Value make_array(const std::vector<T>& xs);

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section (of its part's file)
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint32_t part = 0;  // a split model's: which file holds it (0: the first)
};

class File {
 public:
  // Maps and validates `path`. Throws GgufError. A split model (llama.cpp's
  // gguf-split: `split.count` > 1, named …-00001-of-0000N.gguf) is opened
  // from its first part: the other parts are mapped too and their tensors
  // join the list (the metadata is the first part's).
  static File open(const std::string& path);
  // Parses an in-memory image (copied); `name` is used in error messages.
  static File from_bytes(std::vector<uint8_t> bytes, std::string name = "<memory>");
  // The header only, from the first bytes of a file of `file_size` bytes
  // (a download not made yet): metadata and tensor infos, checked against
  // file_size; tensor_data() throws. GgufHeaderIncomplete when the header
  // runs past `head`.
  static File from_header(std::vector<uint8_t> head, uint64_t file_size, std::string name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;  // absolute offset of the tensor data section
  uint64_t file_size() const;    // every part's, for a split model

  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. get() throws GgufError when the key is missing or has
  // an incompatible type; get_opt() returns nullopt when missing and throws on a
  // wrong type; get_or() substitutes a default when missing.
  template <class T>
  T get(std::string_view key) const;
  template <class T>
  std::optional<T> get_opt(std::string_view key) const;
  template <class T>
  T get_or(std::string_view key, T fallback) const {
    auto v = get_opt<T>(key);
    return v ? *v : fallback;
  }
  // Homogeneous arrays (numeric conversions as in Value::as).
  template <class T>
  std::vector<T> get_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_data(const TensorInfo& t) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Writer {
 public:
  explicit Writer(uint32_t version = 3, uint32_t alignment = 32);

  // Sets a key (replacing an existing one in place, keeping first-set order).
  void set(const std::string& key, Value value);
  // Adds a tensor; data is copied. `shape` in ggml order. Throws on a shape whose
  // row length is not a multiple of the type's block size or a size mismatch.
  void add_tensor(const std::string& name, DType type, std::vector<uint64_t> shape, std::span<const uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws std::runtime_error on I/O failure

 private:
  std::vector<uint8_t> header_bytes() const;
  uint64_t align(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }
  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<PendingTensor> tensors_;
};

// ---- template implementations ---------------------------------------------

template <class T>
std::optional<T> Value::as() const {
  if constexpr (std::is_same_v<T, std::string>) {
    if (auto* s = std::get_if<std::string>(&v)) return *s;
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto* b = std::get_if<bool>(&v)) return *b;
    return std::nullopt;
  } else if constexpr (std::is_arithmetic_v<T>) {
    return std::visit(
        [](const auto& x) -> std::optional<T> {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, bool> || !std::is_arithmetic_v<X>) {
            return std::nullopt;
          } else if constexpr (std::is_floating_point_v<T>) {
            return static_cast<T>(x);
          } else if constexpr (std::is_floating_point_v<X>) {
            return std::nullopt;  // no silent float → int truncation
          } else {
            if (std::in_range<T>(x)) return static_cast<T>(x);
            return std::nullopt;
          }
        },
        v);
  } else {
    static_assert(sizeof(T) == 0, "unsupported type for Value::as");
  }
}

template <class T>
Value make_array(const std::vector<T>& xs) {
  Array a;
  a.elem = Value(T{}).type();
  a.items.reserve(xs.size());
  for (const auto& x : xs) a.items.emplace_back(x);
  return Value(std::move(a));
}

[[noreturn]] void throw_key_error(const std::string& file, std::string_view key, const char* problem, const Value* v);

template <class T>
std::optional<T> File::get_opt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto r = v->as<T>();
  if (!r) throw_key_error(path(), key, "has an incompatible type or value", v);
  return r;
}

template <class T>
T File::get(std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw_key_error(path(), key, "is missing", nullptr);
  auto r = v->as<T>();
  if (!r) throw_key_error(path(), key, "has an incompatible type or value", v);
  return *r;
}

template <class T>
std::vector<T> File::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw_key_error(path(), key, "is missing", nullptr);
  const auto* a = std::get_if<Array>(&v->v);
  if (!a) throw_key_error(path(), key, "is not an array", v);
  std::vector<T> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    auto r = item.as<T>();
    if (!r) throw_key_error(path(), key, "has an element of an incompatible type", v);
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace moelsp::gguf
