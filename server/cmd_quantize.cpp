// moelsp quantize IN.gguf OUT.gguf TYPE: rewrite a model's weights in another
// type. Recipe (as llama.cpp's for these types): matrices take TYPE; 1-D
// tensors (norms, biases, selection bias) and the MoE router stay F32, since
// they are tiny and precision-critical (a router error changes the experts).
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "commands.h"
#include "engine/gguf.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace moelsp::cli {

namespace {
// llama.cpp's general.file_type values (LLAMA_FTYPE_*) for the types we write.
uint32_t file_type(kernels::DType t) {
  switch (t) {
    case kernels::DType::F32: return 0;
    case kernels::DType::F16: return 1;
    case kernels::DType::Q4_0: return 2;
    case kernels::DType::Q8_0: return 7;
    case kernels::DType::Q5_0: return 8;
    case kernels::DType::BF16: return 32;
    default: return 0;
  }
}
}  // namespace

int quantize(const QuantizeOptions& o) {
  try {
    const auto target = kernels::dtype_from_name(o.type);
    if (!target || !kernels::quantize_supports(*target))
      throw std::runtime_error(fmt::format("cannot quantize to '{}' (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0)", o.type));
    const auto in = gguf::File::open(o.input);
    gguf::Writer w(3, uint32_t(in.alignment()));
    for (const auto& [k, v] : in.metadata())
      if (k != "general.alignment") w.set(k, v);
    w.set("general.file_type", file_type(*target));
    if (traits(*target).block_size > 1) w.set("general.quantization_version", uint32_t(2));

    std::map<std::string, int> counts;
    uint64_t bytes_in = 0, bytes_out = 0;
    std::vector<float> row;
    for (const auto& t : in.tensors()) {
      const bool matrix = t.shape.size() >= 2;
      const bool router = t.name.find("ffn_gate_inp") != std::string::npos;
      kernels::DType to = matrix && !router ? *target : kernels::DType::F32;
      if (!kernels::row_bytes(to, t.shape[0])) to = kernels::DType::F16;  // row not a whole number of blocks
      if (to == t.type) {
        const auto d = in.tensor_data(t);
        w.add_tensor(t.name, to, t.shape, d);
      } else {
        if (!kernels::matmul_supports(t.type))
          throw std::runtime_error(fmt::format("tensor '{}' is {}, which moelsp cannot read yet", t.name,
                                               kernels::dtype_name(t.type)));
        const int64_t cols = int64_t(t.shape[0]), rows = int64_t(t.n_elements) / std::max<int64_t>(1, cols);
        const size_t src_row = *kernels::row_bytes(t.type, t.shape[0]), dst_row = *kernels::row_bytes(to, t.shape[0]);
        std::vector<uint8_t> out(size_t(rows) * dst_row);
        row.resize(size_t(cols));
        const uint8_t* src = in.tensor_data(t).data();
        for (int64_t r = 0; r < rows; ++r) {
          kernels::dequantize_row(t.type, src + size_t(r) * src_row, row.data(), cols);
          kernels::quantize_row(to, row.data(), out.data() + size_t(r) * dst_row, cols);
        }
        w.add_tensor(t.name, to, t.shape, out);
      }
      ++counts[std::string(kernels::dtype_name(to))];
      bytes_in += t.n_bytes;
      bytes_out += *kernels::row_bytes(to, t.shape[0]) * (t.n_elements / t.shape[0]);
    }
    w.write(o.output);
    std::string summary;
    for (const auto& [type, n] : counts) summary += fmt::format(" {}×{}", type, n);
    std::fprintf(stderr, "%s: tensors%s; %.2f MiB -> %.2f MiB\n", o.output.c_str(), summary.c_str(),
                 double(bytes_in) / (1 << 20), double(bytes_out) / (1 << 20));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp quantize: %s\n", e.what());
    return 1;
  }
}

}  // namespace moelsp::cli
