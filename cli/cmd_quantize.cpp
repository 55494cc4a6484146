// moelsp quantize IN.gguf OUT.gguf TYPE: rewrite a model's weights in another
// type. Recipes (as llama.cpp's): matrices named *.weight take TYPE; other
// tensors (norms, biases — expert biases are 2-D —, selection bias, sinks) and
// the MoE router stay F32, since they are tiny and precision-critical (a
// router error changes the experts).
//
// The K mixes (llama.cpp's llama_tensor_get_type for these ftypes), base type
// Q3_K, Q4_K, Q5_K or Q6_K for Q3_K_M, Q4_K_M, Q5_K_M, Q6_K:
// - the output matrix (or the tied embeddings): Q6_K;
// - in models with exactly 8 experts, attn_k and attn_v: Q8_0;
// - attn_v: Q3_K_M Q5_K in the first two layers, else Q4_K; Q4_K_M and Q5_K_M
//   Q6_K in the layers use_more_bits picks (the first and last eighths and
//   every third between);
// - ffn_down (dense, experts, shared): Q3_K_M Q5_K in the first sixteenth of
//   the layers, else Q4_K; Q4_K_M and Q5_K_M Q6_K where use_more_bits;
// - attn_output: Q5_K in 8-expert models for Q3_K_M and Q4_K_M; Q4_K for
//   Q3_K_M otherwise;
// - everything else the base type.
// A row that is not a whole number of 256-value blocks falls back as
// llama.cpp's tensor_type_fallback: Q2_K, Q3_K → Q4_0; Q4_K → Q5_0; Q5_K →
// Q5_1; Q6_K → Q8_0. MXFP4_MOE (llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE,
// gpt-oss's format): MXFP4 for the 3-D expert tensors (ffn_{gate,up,down}_exps:
// more than one matrix along the third dimension), Q8_0 for every other
// matrix, the output matrix and the embeddings included. A row that is not a
// whole number of 32-value blocks becomes F16 (llama.cpp refuses such a
// tensor for MXFP4_MOE: it defines no fallback for Q8_0 or MXFP4).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "engine/gguf.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "options.h"
#include "progress.h"

namespace moelsp::cli {

namespace {
// llama.cpp's general.file_type values (LLAMA_FTYPE_*) for the types we write.
uint32_t file_type(kernels::DType t) {
  switch (t) {
    case kernels::DType::F32: return 0;
    case kernels::DType::F16: return 1;
    case kernels::DType::Q4_0: return 2;
    case kernels::DType::Q4_1: return 3;
    case kernels::DType::Q8_0: return 7;
    case kernels::DType::Q5_0: return 8;
    case kernels::DType::Q5_1: return 9;
    case kernels::DType::Q2_K: return 10;
    case kernels::DType::Q3_K: return 11;  // "mostly Q3_K_S"
    case kernels::DType::Q4_K: return 14;  // "mostly Q4_K_S"
    case kernels::DType::Q5_K: return 16;  // "mostly Q5_K_S"
    case kernels::DType::Q6_K: return 18;
    case kernels::DType::BF16: return 32;
    case kernels::DType::MXFP4: return 38;  // "MXFP4 MoE" (every matrix MXFP4: llama-quantize --pure)
    default: return 0;
  }
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

// The mixes: a base type with per-tensor choices, as llama.cpp's llama-quant.cpp makes them.
enum class Mix { None, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE };

struct MixInfo {
  const char* name;
  Mix mix;
  kernels::DType base;
  uint32_t file_type;  // LLAMA_FTYPE_MOSTLY_*
};
constexpr MixInfo kMixes[] = {
    {"Q3_K_M", Mix::Q3_K_M, kernels::DType::Q3_K, 12},        {"Q4_K_M", Mix::Q4_K_M, kernels::DType::Q4_K, 15},
    {"Q5_K_M", Mix::Q5_K_M, kernels::DType::Q5_K, 17},        {"Q6_K", Mix::Q6_K, kernels::DType::Q6_K, 18},
    {"MXFP4_MOE", Mix::MXFP4_MOE, kernels::DType::MXFP4, 38},
};

struct Recipe {
  kernels::DType base;
  Mix mix = Mix::None;
  int n_layer = 0, n_expert = 0;
  bool tied = false;  // no output.weight: token_embd is also the output matrix

  kernels::DType pick(const std::string& name, const std::vector<uint64_t>& shape) const {
    using kernels::DType;
    if (mix == Mix::None) return base;
    if (mix == Mix::MXFP4_MOE) {  // the output matrix (and tied embeddings) Q8_0, then by shape
      const bool experts = shape.size() >= 3 && shape[2] > 1;
      return experts && name != "output.weight" && !(tied && name == "token_embd.weight") ? DType::MXFP4 : DType::Q8_0;
    }
    const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if (name == "output.weight" || (tied && name == "token_embd.weight")) return DType::Q6_K;
    if ((has("attn_k.weight") || has("attn_v.weight")) && n_expert == 8) return DType::Q8_0;
    const int il = layer_of(name);
    const bool more = il >= 0 && use_more_bits(il, n_layer);
    if (has("attn_v.weight")) {
      if (mix == Mix::Q3_K_M) return il >= 0 && il < 2 ? DType::Q5_K : DType::Q4_K;
      if ((mix == Mix::Q4_K_M || mix == Mix::Q5_K_M) && more) return DType::Q6_K;
    }
    if (has("ffn_down")) {
      if (mix == Mix::Q3_K_M) return il >= 0 && il < n_layer / 16 ? DType::Q5_K : DType::Q4_K;
      if ((mix == Mix::Q4_K_M || mix == Mix::Q5_K_M) && more) return DType::Q6_K;
    }
    if (has("attn_output.weight")) {
      if ((mix == Mix::Q3_K_M || mix == Mix::Q4_K_M) && n_expert == 8) return DType::Q5_K;
      if (mix == Mix::Q3_K_M) return DType::Q4_K;
    }
    return base;
  }
};

kernels::DType fallback(kernels::DType t) {
  using kernels::DType;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: return DType::Q4_0;
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::F16;
  }
}

// Only matrices named *.weight are quantized (llama.cpp's tensor_allows_quantization);
// the MoE router (ffn_gate_inp) stays F32 too.
bool quantizable(const gguf::TensorInfo& t) {
  const std::string& n = t.name;
  const bool weight = n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0;
  return t.shape.size() >= 2 && weight && n.find("_norm.weight") == std::string::npos &&
         n.find("ffn_gate_inp") == std::string::npos;
}
// One of llama.cpp's mixes by name, as written or in lower case (null: none).
const MixInfo* mix_named(const std::string& type) {
  const auto is = [&](std::string name) {
    if (type == name) return true;
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    return type == name;
  };
  const MixInfo* found = nullptr;
  for (const MixInfo& m : kMixes)
    if (is(m.name)) found = &m;
  return found;
}

// The type weight matrices are written in: the mix's base, or the type named;
// an error listing what can be written otherwise.
kernels::DType target_type(const std::string& type, const MixInfo* mix) {
  const auto target = mix ? std::optional(mix->base) : kernels::dtype_from_name(type);
  if (target && kernels::quantize_supports(*target)) return *target;
  std::string names;
  for (kernels::DType t : kernels::matmul_types())
    if (kernels::quantize_supports(t) && t != kernels::DType::Q6_K) names += std::string(kernels::dtype_name(t)) + ", ";
  throw std::runtime_error(fmt::format(
      "cannot quantize to '{}' (supported: {}and llama.cpp's mixes Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE)", type,
      names));
}

// A tensor's rows read in its type and written in `to`, on every core: rows
// are independent, and the K-quants' scale searches are worth all cores on a
// multi-GB model.
std::vector<uint8_t> convert(const gguf::File& in, const gguf::TensorInfo& t, kernels::DType to) {
  if (!kernels::matmul_supports(t.type))
    throw std::runtime_error(
        fmt::format("tensor '{}' is {}, which moelsp cannot read yet", t.name, kernels::dtype_name(t.type)));
  const int64_t cols = int64_t(t.shape[0]), rows = int64_t(t.n_elements) / std::max<int64_t>(1, cols);
  const size_t src_row = *kernels::row_bytes(t.type, t.shape[0]), dst_row = *kernels::row_bytes(to, t.shape[0]);
  std::vector<uint8_t> out(size_t(rows) * dst_row);
  const uint8_t* src = in.tensor_data(t).data();
  const int64_t n_threads = std::min<int64_t>(rows, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (int64_t k = 0; k < n_threads; ++k)
    workers.emplace_back([&, k] {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = rows * k / n_threads; r < rows * (k + 1) / n_threads; ++r) {
        kernels::dequantize_row(t.type, src + size_t(r) * src_row, row.data(), cols);
        kernels::quantize_row(to, row.data(), out.data() + size_t(r) * dst_row, cols);
      }
    });
  for (auto& th : workers) th.join();
  return out;
}

}  // namespace

int quantize(const QuantizeOptions& o) {
  try {
    const MixInfo* mix_info = mix_named(o.type);
    const Mix mix = mix_info ? mix_info->mix : Mix::None;
    const auto target = target_type(o.type, mix_info);
    std::error_code ec;
    if (std::filesystem::exists(o.output, ec) && std::filesystem::equivalent(o.input, o.output, ec))
      throw std::runtime_error(
          fmt::format("{} is the input file: give another output name (the input is never overwritten)", o.output));
    const auto in = gguf::File::open(o.input);
    const std::string arch = in.get_or<std::string>("general.architecture", "");
    Recipe recipe{target, mix};
    recipe.n_layer = int(in.get_or<uint32_t>(arch + ".block_count", 0));
    recipe.n_expert = int(in.get_or<uint32_t>(arch + ".expert_count", 0));
    recipe.tied = !in.tensor("output.weight");
    gguf::Writer w(3, uint32_t(in.alignment()));
    for (const auto& [k, v] : in.metadata())
      if (k != "general.alignment") w.set(k, v);
    w.set("general.file_type", mix_info ? mix_info->file_type : file_type(target));
    if (traits(target).block_size > 1) w.set("general.quantization_version", uint32_t(2));

    std::map<std::string, int> counts;
    uint64_t bytes_in = 0, bytes_out = 0, total_in = 0;
    for (const auto& t : in.tensors()) total_in += t.n_bytes;
    Progress bar("quantize", double(total_in), ProgressUnit::Bytes, {.quiet = o.quiet});
    for (const auto& t : in.tensors()) {
      kernels::DType to = quantizable(t) ? recipe.pick(t.name, t.shape) : kernels::DType::F32;
      if (!kernels::row_bytes(to, t.shape[0])) to = fallback(to);  // row not a whole number of blocks
      if (!kernels::row_bytes(to, t.shape[0])) to = kernels::DType::F16;
      if (to == t.type) {
        const auto d = in.tensor_data(t);
        w.add_tensor(t.name, to, t.shape, d);
      } else {
        w.add_tensor(t.name, to, t.shape, convert(in, t, to));
      }
      ++counts[std::string(kernels::dtype_name(to))];
      bytes_in += t.n_bytes;
      bar.update(double(bytes_in), fmt::format("{} -> {}", t.name, kernels::dtype_name(to)));
      bytes_out += *kernels::row_bytes(to, t.shape[0]) * (t.n_elements / t.shape[0]);
    }
    bar.finish();
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

void add_quantize(CLI::App& app, std::vector<Command>& out) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* c = app.add_subcommand("quantize",
                               "Rewrite a model's weight matrices in another type (F16, BF16, Q8_0, Q4_0, Q4_1, "
                               "Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, MXFP4) or one of llama.cpp's mixes: Q3_K_M, "
                               "Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE (MXFP4 experts, Q8_0 for the other matrices)");
  c->add_option("input", o->input, "Input GGUF")->required();
  c->add_option("output", o->output, "Output GGUF")->required();
  c->add_option("type", o->type, "Target type for weight matrices, or a mix: Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE")
      ->required();
  c->add_flag("-q,--quiet", o->quiet, kQuietHelp);
  out.push_back({c, [o] { return quantize(*o); }});
}

}  // namespace moelsp::cli
