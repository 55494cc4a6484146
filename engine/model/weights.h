// Typed views of a model's tensors (into the mapped file) with shape checks,
// so that a wrong or missing tensor is a ModelError at load, never a crash in
// the forward pass.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model.h"
#include "kernels/matmul.h"

namespace moelsp {

struct Weight {
  kernels::MatView m;                 // rows × cols (for 3-D tensors: rows × cols of one slice)
  int64_t slices = 1;                 // third dimension (experts, heads)
  std::shared_ptr<const void> store;  // owns m's bytes when they are not the file's (repack_dense)
  bool present() const { return m.data != nullptr; }
  // Slice s (expert / head) of a 3-D tensor as a matrix.
  kernels::MatView slice(int64_t s) const {
    kernels::MatView v = m;
    v.data = m.row(0) + size_t(s) * size_t(m.rows) * m.row_bytes;
    return v;
  }
};

// Repacks w in place for the few-input kernels (kernels/repack.h) where its
// type and shape, the CPU and the kernel setting allow, into memory w then
// owns, and hands the file's pages of it back to the kernel (release_file:
// nothing else reads them); otherwise leaves w as it is. Only for weights that
// nothing but matmul reads: the dense projections and the output head at
// load (layers::linear), the experts (each slice on whole groups) through
// Model::repack_experts. MOELSP_REPACK=off turns it off (to compare, or to
// rule it out).
void repack_dense(Weight& w, bool release_file = true);
size_t repacked_weight_bytes();  // repacked by this process so far (all models)

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
