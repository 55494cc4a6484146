// GGUF parsing. Layout (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv × (string key | u32 type | value)
//   n_tensors × (string name | u32 n_dims | n_dims × u64 | u32 type | u64 offset)
//   padding to general.alignment | tensor data
// A string is u64 length + bytes; an array is u32 elem type + u64 count + items.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "engine/gguf.h"

namespace moelsp::gguf {

namespace {

constexpr uint32_t kMaxDims = 4;        // ggml's GGML_MAX_DIMS
constexpr uint32_t kMaxArrayDepth = 8;  // nested arrays deeper than this are refused
constexpr uint64_t kMaxStringLen = 1ull << 30;

// Smallest encoding of one item of each type, used to reject counts that
// cannot possibly fit in the bytes that remain (before allocating anything).
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL: return 1;
    case ValueType::UINT16:
    case ValueType::INT16: return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32: return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

class Cursor {
 public:
  // `logical_size`: the whole file's, when `data` holds only its head (from_header).
  Cursor(const uint8_t* data, uint64_t size, const std::string& name, uint64_t logical_size)
      : data_(data), size_(size), logical_(logical_size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return logical_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& problem) const {
    throw GgufError(fmt::format("{}: offset {}: {}", name_, at, problem));
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail(pos_, fmt::format("truncated file: {} needs {} bytes, only {} remain", what, n, remaining()));
    if (n > size_ - pos_)
      throw GgufHeaderIncomplete(fmt::format("{}: the header goes on past the first {} bytes", name_, size_));
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  std::string read_string(const char* what) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(what);
    if (len > kMaxStringLen) fail(at, fmt::format("{} has absurd length {}", what, len));
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_, logical_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

Value read_value(Cursor& c, ValueType t, uint32_t depth, const std::string& key) {
  switch (t) {
    case ValueType::UINT8: return c.read<uint8_t>("uint8 value");
    case ValueType::INT8: return c.read<int8_t>("int8 value");
    case ValueType::UINT16: return c.read<uint16_t>("uint16 value");
    case ValueType::INT16: return c.read<int16_t>("int16 value");
    case ValueType::UINT32: return c.read<uint32_t>("uint32 value");
    case ValueType::INT32: return c.read<int32_t>("int32 value");
    case ValueType::FLOAT32: return c.read<float>("float32 value");
    case ValueType::UINT64: return c.read<uint64_t>("uint64 value");
    case ValueType::INT64: return c.read<int64_t>("int64 value");
    case ValueType::FLOAT64: return c.read<double>("float64 value");
    case ValueType::BOOL: {
      const uint64_t at = c.pos();
      const auto b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail(at, fmt::format("key '{}': bool value {} is neither 0 nor 1", key, b));
      return b != 0;
    }
    case ValueType::STRING: return c.read_string("string value");
    case ValueType::ARRAY: {
      const uint64_t at = c.pos();
      if (depth >= kMaxArrayDepth)
        c.fail(at, fmt::format("key '{}': arrays nested deeper than {}", key, kMaxArrayDepth));
      const auto et = c.read<uint32_t>("array element type");
      if (et > uint32_t(ValueType::FLOAT64))
        c.fail(at, fmt::format("key '{}': unknown array element type {}", key, et));
      const uint64_t count_at = c.pos();
      const auto n = c.read<uint64_t>("array length");
      const auto elem = static_cast<ValueType>(et);
      if (n > c.remaining() / min_encoded_size(elem))
        c.fail(count_at, fmt::format("key '{}': array of {} {} elements cannot fit in the {} bytes "
                                     "that remain (truncated or corrupt)",
                                     key, n, value_type_name(elem), c.remaining()));
      Array a;
      a.elem = elem;
      a.items.reserve(std::min<uint64_t>(n, 1 << 16));  // grow with what is actually read
      for (uint64_t i = 0; i < n; ++i) a.items.push_back(read_value(c, elem, depth + 1, key));
      return Value(std::move(a));
    }
  }
  c.fail(c.pos(), fmt::format("key '{}': unknown value type {}", key, uint32_t(t)));
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  static constexpr std::string_view names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                               "bool",  "string", "array",  "uint64", "int64",  "float64"};
  auto i = uint32_t(t);
  return i < std::size(names) ? names[i] : "unknown";
}

void throw_key_error(const std::string& file, std::string_view key, const char* problem, const Value* v) {
  if (v)
    throw GgufError(fmt::format("{}: metadata key '{}' {} (it is {} {})", file, key, problem,
                                value_type_name(v->type()), v->to_string(4)));
  throw GgufError(fmt::format("{}: metadata key '{}' {}", file, key, problem));
}

struct File::Impl {
  std::string path;
  // Either an mmap'd region or an owned buffer (from_bytes).
  const uint8_t* data = nullptr;
  uint64_t size = 0;  // the file's (from_header: more than `data` holds)
  uint64_t held = 0;  // bytes at `data`
  void* map = nullptr;
  std::vector<uint8_t> owned;

  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kv;
  std::unordered_map<std::string_view, size_t> kv_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> tensor_index;

  ~Impl() {
    if (map) munmap(map, size);
  }

  std::vector<std::unique_ptr<Impl>> parts;  // a split model's other files

  // Maps `path` (parse() not yet called).
  static std::unique_ptr<Impl> map_file(const std::string& path);
  // A split model: maps and parses the other parts, adds their tensors.
  void attach_parts();
  uint64_t total_size() const {
    uint64_t n = size;
    for (const auto& p : parts) n += p->size;
    return n;
  }

  // Each part checks what it reads and fails naming the byte offset.
  void parse();
  void read_header(Cursor& c, uint64_t& n_tensors, uint64_t& n_kv);
  void read_metadata(Cursor& c, uint64_t n_kv);
  void read_alignment(Cursor& c);
  void read_tensor_infos(Cursor& c, uint64_t n_tensors);
  void check_data_section(Cursor& c);  // every tensor inside the file, no two overlapping
};

void File::Impl::parse() {
  Cursor c(data, held, path, size);
  uint64_t n_tensors = 0, n_kv = 0;
  read_header(c, n_tensors, n_kv);
  read_metadata(c, n_kv);
  read_alignment(c);
  read_tensor_infos(c, n_tensors);
  check_data_section(c);
}

// Magic, version, and the two counts (checked against the file's size).
void File::Impl::read_header(Cursor& c, uint64_t& n_tensors, uint64_t& n_kv) {
  if (size == 0) c.fail(0, "empty file (not a GGUF file)");
  if (held < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    std::string got;
    for (uint64_t i = 0; i < std::min<uint64_t>(held, 4); ++i) got += fmt::format("{:02x}", data[i]);
    c.fail(0, fmt::format("bad magic 0x{} (expected \"GGUF\" = 0x47475546): not a GGUF file", got));
  }
  c.read<uint32_t>("magic");
  const uint64_t version_at = c.pos();
  version = c.read<uint32_t>("version");
  if (version == 1) c.fail(version_at, "GGUF version 1 is not supported (re-convert the model; versions 2 and 3 are)");
  if (version != 2 && version != 3) {
    if ((version & 0xffff) == 0 && version != 0)
      c.fail(version_at,
             fmt::format("GGUF version {} looks byte-swapped: big-endian files are not supported", version));
    c.fail(version_at, fmt::format("unsupported GGUF version {} (supported: 2, 3)", version));
  }
  const uint64_t nt_at = c.pos();
  n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t nkv_at = c.pos();
  n_kv = c.read<uint64_t>("metadata count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8+4+8+4+8.
  if (n_kv > c.remaining() / 13)
    c.fail(nkv_at, fmt::format("absurd metadata count {}: cannot fit in a {}-byte file", n_kv, size));
  if (n_tensors > c.remaining() / 32)
    c.fail(nt_at, fmt::format("absurd tensor count {}: cannot fit in a {}-byte file", n_tensors, size));
}

void File::Impl::read_metadata(Cursor& c, uint64_t n_kv) {
  kv.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.read_string("metadata key");
    if (key.empty()) c.fail(at, fmt::format("metadata entry {} has an empty key", i));
    const uint64_t type_at = c.pos();
    const auto t = c.read<uint32_t>("metadata value type");
    if (t > uint32_t(ValueType::FLOAT64)) c.fail(type_at, fmt::format("key '{}': unknown value type {}", key, t));
    Value v = read_value(c, static_cast<ValueType>(t), 0, key);
    kv.emplace_back(std::move(key), std::move(v));
    if (!kv_index.emplace(kv.back().first, kv.size() - 1).second) {
      // kv_index keys view into kv's strings; reserve() above keeps them stable.
      c.fail(at, fmt::format("duplicate metadata key '{}'", kv.back().first));
    }
  }
}

void File::Impl::read_alignment(Cursor& c) {
  if (auto it = kv_index.find("general.alignment"); it != kv_index.end()) {
    const Value& v = kv[it->second].second;
    const auto* a = std::get_if<uint32_t>(&v.v);
    if (!a) c.fail(0, fmt::format("general.alignment must be uint32, found {}", value_type_name(v.type())));
    if (*a == 0 || (*a & (*a - 1)) != 0) c.fail(0, fmt::format("general.alignment {} is not a power of two", *a));
    alignment = *a;
  }
}

void File::Impl::read_tensor_infos(Cursor& c, uint64_t n_tensors) {
  tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    TensorInfo t;
    t.name = c.read_string("tensor name");
    if (t.name.empty()) c.fail(at, fmt::format("tensor {} has an empty name", i));
    const uint64_t dims_at = c.pos();
    const auto n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.fail(dims_at, fmt::format("tensor '{}': {} dimensions (1 to {} allowed)", t.name, n_dims, kMaxDims));
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = c.pos();
      const auto ne = c.read<uint64_t>("tensor dimension");
      if (ne > uint64_t(INT64_MAX))
        c.fail(dim_at, fmt::format("tensor '{}': dimension {} is negative or absurd ({})", t.name, d, ne));
      if (ne != 0 && t.n_elements > uint64_t(INT64_MAX) / ne)
        c.fail(dim_at, fmt::format("tensor '{}': element count overflows", t.name));
      t.n_elements *= ne;
      t.shape.push_back(ne);
    }
    const uint64_t type_at = c.pos();
    const auto type_id = c.read<uint32_t>("tensor type");
    const auto tr = kernels::dtype_traits(type_id);
    if (!tr) c.fail(type_at, fmt::format("tensor '{}': unknown tensor type {}", t.name, type_id));
    t.type = static_cast<DType>(type_id);
    if (t.shape[0] % tr->block_size)
      c.fail(type_at, fmt::format("tensor '{}': row length {} is not a multiple of {}'s block size {}", t.name,
                                  t.shape[0], tr->name, tr->block_size));
    const uint64_t n_blocks = t.n_elements / tr->block_size;
    if (n_blocks > UINT64_MAX / tr->type_size) c.fail(type_at, fmt::format("tensor '{}': byte size overflows", t.name));
    t.n_bytes = n_blocks * tr->type_size;
    const uint64_t off_at = c.pos();
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % alignment)
      c.fail(off_at, fmt::format("tensor '{}': data offset {} is not a multiple of the alignment {}", t.name, t.offset,
                                 alignment));
    tensors.push_back(std::move(t));
    if (!tensor_index.emplace(tensors.back().name, tensors.size() - 1).second)
      c.fail(at, fmt::format("duplicate tensor name '{}'", tensors.back().name));
  }
}

void File::Impl::check_data_section(Cursor& c) {
  const uint64_t header_end = c.pos();
  data_offset = (header_end + alignment - 1) / alignment * alignment;
  if (!tensors.empty() && data_offset > size)
    c.fail(header_end, fmt::format("truncated file: tensor data section starts at {} but the file has {} bytes",
                                   data_offset, size));
  const uint64_t data_size = size > data_offset ? size - data_offset : 0;

  // Every tensor lies inside the data section and no two overlap.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      c.fail(data_offset + std::min(t.offset, data_size),
             fmt::format("tensor '{}' ({} bytes at data offset {}) extends past the end of the file "
                         "(data section has {} bytes): truncated file?",
                         t.name, t.n_bytes, t.offset, data_size));
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* p = by_offset[i - 1];
    const auto* q = by_offset[i];
    if (p->offset + p->n_bytes > q->offset)
      c.fail(data_offset + q->offset,
             fmt::format("tensors '{}' and '{}' overlap in the data section", p->name, q->name));
  }
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

auto File::Impl::map_file(const std::string& path) -> std::unique_ptr<Impl> {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw GgufError(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(fmt::format("{}: not a regular file", path));
  }
  impl->size = impl->held = uint64_t(st.st_size);
  if (impl->size > 0) {
    void* m = mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw GgufError(fmt::format("{}: mmap failed: {}", path, std::strerror(e)));
    }
    impl->map = m;
    impl->data = static_cast<const uint8_t*>(m);
  }
  ::close(fd);  // the mapping keeps the file alive
  return impl;
}

void File::Impl::attach_parts() {
  const auto it = kv_index.find("split.count");
  if (it == kv_index.end()) return;
  const std::optional<uint32_t> count = kv[it->second].second.as<uint32_t>();
  if (!count || *count <= 1) return;
  const size_t at = path.rfind(fmt::format("-00001-of-{:05d}", *count));
  if (at == std::string::npos)
    throw GgufError(fmt::format("{}: a split model of {} parts: open its first part, named …-00001-of-{:05d}.gguf",
                                path, *count, *count));
  for (uint32_t k = 2; k <= *count; ++k) {
    std::string p = path;
    p.replace(at + 1, 5, fmt::format("{:05d}", k));
    if (::access(p.c_str(), R_OK) != 0)
      throw GgufError(fmt::format("{}: part {} of {} is missing: {}", path, k, *count, p));
    auto part = map_file(p);
    part->parse();
    if (const auto no = part->kv_index.find("split.no");
        no != part->kv_index.end() && part->kv[no->second].second.as<uint32_t>() != k - 1)
      throw GgufError(fmt::format("{}: split.no is not {} (a part of another split?)", p, k - 1));
    for (TensorInfo& t : part->tensors) {
      t.part = k - 1;
      tensors.push_back(std::move(t));
    }
    part->tensors.clear();
    part->tensor_index.clear();
    parts.push_back(std::move(part));
  }
  tensor_index.clear();  // its keys viewed the moved names
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensor_index.emplace(tensors[i].name, i).second)
      throw GgufError(fmt::format("{}: tensor '{}' is in two parts", path, tensors[i].name));
  if (const auto n = kv_index.find("split.tensors.count"); n != kv_index.end()) {
    const auto want = kv[n->second].second.as<uint64_t>();
    if (want && *want != tensors.size())
      throw GgufError(
          fmt::format("{}: split.tensors.count is {}, the {} parts hold {}", path, *want, *count, tensors.size()));
  }
}

File File::open(const std::string& path) {
  auto impl = Impl::map_file(path);
  impl->parse();
  impl->attach_parts();
  return File(std::move(impl));
}

File File::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned = std::move(bytes);
  impl->data = impl->owned.data();
  impl->size = impl->held = impl->owned.size();
  impl->parse();
  return File(std::move(impl));
}

File File::from_header(std::vector<uint8_t> head, uint64_t file_size, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned = std::move(head);
  impl->data = impl->owned.data();
  impl->held = std::min<uint64_t>(impl->owned.size(), file_size);
  impl->size = file_size;
  impl->parse();
  return File(std::move(impl));
}

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->total_size(); }
const std::vector<std::pair<std::string, Value>>& File::metadata() const { return impl_->kv; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].second;
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const uint8_t> File::tensor_data(const TensorInfo& t) const {
  const Impl& src = t.part == 0 ? *impl_ : *impl_->parts.at(t.part - 1);
  if (src.held < src.size)
    throw GgufError(fmt::format("{}: tensor '{}': only the header was read (no tensor data)", src.path, t.name));
  return {src.data + src.data_offset + t.offset, t.n_bytes};
}

}  // namespace moelsp::gguf
