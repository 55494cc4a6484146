#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "engine/gguf.h"

namespace moelsp::gguf {

namespace {

// resize + memcpy rather than insert(): GCC 12 reports a false stringop-overflow
// for vector<uint8_t>::insert of a few bytes at -O3.
void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <class T>
void put(std::vector<uint8_t>& out, T x) {
  put_bytes(out, &x, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void put_value(std::vector<uint8_t>& out, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          put_string(out, x);
        } else if constexpr (std::is_same_v<X, Array>) {
          put<uint32_t>(out, uint32_t(x.elem));
          put<uint64_t>(out, x.items.size());
          for (const auto& item : x.items) {
            if (item.type() != x.elem)
              throw std::invalid_argument(fmt::format("GGUF array of {} holds a {} element", value_type_name(x.elem),
                                                      value_type_name(item.type())));
            put_value(out, item);
          }
        } else if constexpr (std::is_same_v<X, bool>) {
          put<uint8_t>(out, x ? 1 : 0);
        } else {
          put<X>(out, x);
        }
      },
      v.v);
}

}  // namespace

Writer::Writer(uint32_t version, uint32_t alignment) : version_(version), alignment_(alignment) {
  if (version != 2 && version != 3) throw std::invalid_argument("GGUF writer: version must be 2 or 3");
  if (alignment == 0 || (alignment & (alignment - 1)))
    throw std::invalid_argument("GGUF writer: alignment must be a power of two");
  if (alignment != 32) set("general.alignment", alignment);
}

void Writer::set(const std::string& key, Value value) {
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<uint64_t> shape,
                        std::span<const uint8_t> data) {
  if (shape.empty() || shape.size() > 4)
    throw std::invalid_argument(fmt::format("tensor '{}': 1 to 4 dimensions required", name));
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  const auto row = kernels::row_bytes(type, shape[0]);
  if (!row)
    throw std::invalid_argument(fmt::format("tensor '{}': row length {} not a multiple of {}'s block size", name,
                                            shape[0], kernels::dtype_name(type)));
  const uint64_t bytes = n / kernels::traits(type).block_size * kernels::traits(type).type_size;
  if (bytes != data.size())
    throw std::invalid_argument(fmt::format("tensor '{}': shape needs {} bytes, got {}", name, bytes, data.size()));
  for (const auto& t : tensors_)
    if (t.name == name) throw std::invalid_argument(fmt::format("duplicate tensor '{}'", name));
  tensors_.push_back({name, type, std::move(shape), {data.begin(), data.end()}});
}

// The header and tensor table (padded to the alignment); the data follows.
std::vector<uint8_t> Writer::header_bytes() const {
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [k, v] : kv_) {
    put_string(out, k);
    put<uint32_t>(out, uint32_t(v.type()));
    put_value(out, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.shape.size()));
    for (auto d : t.shape) put<uint64_t>(out, d);
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, offset);
    offset = align(offset + t.data.size());
  }
  out.resize(align(out.size()), 0);
  return out;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  for (const auto& t : tensors_) {
    put_bytes(out, t.data.data(), t.data.size());
    out.resize(align(out.size()), 0);
  }
  return out;
}

// Streams tensor by tensor: a multi-GB model is not copied into one buffer first.
void Writer::write(const std::string& path) const {
  // Written beside the target under a temporary name and renamed over it at
  // the end: a failed or interrupted write (a full disk) leaves the target as
  // it was and no partial file under its name, and a reader that has the old
  // file mapped keeps its pages.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing", tmp));
      const auto head = header_bytes();
      f.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
      const std::vector<char> zeros(alignment_, 0);
      for (const auto& t : tensors_) {
        f.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size()));
        f.write(zeros.data(), std::streamsize(align(t.data.size()) - t.data.size()));
      }
      f.flush();
      if (!f) throw std::runtime_error(fmt::format("{}: write failed (disk full?)", path));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw std::runtime_error(fmt::format("{}: cannot replace it: {}", path, ec.message()));
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace moelsp::gguf
