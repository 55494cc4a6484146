// Typed views of a model's tensors (into the mapped file) with shape checks,
// so that a wrong or missing tensor is a ModelError at load, never a crash in
// the forward pass.
#pragma once

#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model.h"
#include "kernels/matmul.h"

namespace moelsp {

struct Weight {
  kernels::MatView m;  // rows × cols (for 3-D tensors: rows × cols of one slice)
  int64_t slices = 1;  // third dimension (experts, heads)
  bool present() const { return m.data != nullptr; }
  // Slice s (expert / head) of a 3-D tensor as a matrix.
  kernels::MatView slice(int64_t s) const {
    kernels::MatView v = m;
    v.data = m.row(0) + size_t(s) * size_t(m.rows) * m.row_bytes;
    return v;
  }
};

class WeightLoader {
 public:
  explicit WeightLoader(const gguf::File& f) : f_(f) {}

  // A matrix/3-D tensor with the given ggml shape {cols, rows[, slices]}.
  Weight get(const std::string& name, std::vector<int64_t> shape) const;
  Weight maybe(const std::string& name, std::vector<int64_t> shape) const;  // absent → empty Weight
  // A 1-D tensor of n elements, dequantized to f32 (norm weights, biases).
  std::vector<float> vec(const std::string& name, int64_t n) const;
  std::vector<float> maybe_vec(const std::string& name, int64_t n) const;
  bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }

 private:
  const gguf::File& f_;
};

}  // namespace moelsp
