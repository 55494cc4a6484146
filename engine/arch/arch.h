// The architectures: each file under engine/arch/ defines one Model subclass
// and its factory. model.cpp picks one by general.architecture.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "../cpu/thread_pool.h"
#include "../layers/layers.h"
#include "../model/expert_layer.h"
#include "../model/weights.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "facts.h"

namespace moelsp::arch {

// Fills the architecture-independent fields ({arch}.block_count, embedding
// length, heads, context, rms eps, rope base/type/scaling, vocabulary size).
void read_common_config(const gguf::File& f, ModelConfig& c);

// MLA's hyperparameters (deepseek2, glm-dsa): q/kv lora ranks, the MLA head
// sizes, the rope/nope split, and YaRN's correction moved into the scale.
void read_mla_config(const gguf::File& f, ModelConfig& c);

// The routed-expert hyperparameters of the DeepSeek-style MoE (deepseek2,
// glm4moe, glm-dsa): expert FFN width, shared experts, dense lead layers,
// gating function (`when_unset` where expert_gating_func is absent or 0, as
// llama.cpp: softmax for deepseek2, sigmoid for the GLMs), weight norm and
// scale, expert groups.
void read_moe_config(const gguf::File& f, ModelConfig& c, Gating when_unset = Gating::Softmax);

// Helpers for reading "{arch}.key" with a clear error when required.
template <class T>
T req(const gguf::File& f, const std::string& arch, const std::string& key) {
  try {
    return f.get<T>(arch + "." + key);
  } catch (const gguf::GgufError& e) {
    throw ModelError(e.what());
  }
}
template <class T>
T opt(const gguf::File& f, const std::string& arch, const std::string& key, T fallback) {
  try {
    return f.get_or<T>(arch + "." + key, fallback);
  } catch (const gguf::GgufError& e) {
    throw ModelError(e.what());
  }
}

// Shared model plumbing for the architectures: token embedding, final norm,
// lm_head (output.weight, or the tied token_embd.weight).
struct Embeddings {
  Weight token_embd;  // {n_embd, n_vocab}
  std::vector<float> output_norm;
  Weight output;  // {n_embd, n_vocab}

  void load(const WeightLoader& wl, const ModelConfig& c);
  void embed(std::span<const TokenId> tokens, int n_embd, float* x) const;  // x [n][n_embd]
  // Final norm + lm_head for the rows the batch wants; logits [rows][n_vocab]. Clobbers x.
  void logits(ThreadPool& pool, const ModelConfig& c, float* x, const Batch& batch, float* out) const;
};

std::unique_ptr<Model> make_llama(std::unique_ptr<gguf::File> f, const LoadOptions& opt);
std::unique_ptr<Model> make_qwen3moe(std::unique_ptr<gguf::File> f, const LoadOptions& opt);
std::unique_ptr<Model> make_deepseek2(std::unique_ptr<gguf::File> f, const LoadOptions& opt);
std::unique_ptr<Model> make_glm4moe(std::unique_ptr<gguf::File> f, const LoadOptions& opt);
std::unique_ptr<Model> make_glm_dsa(std::unique_ptr<gguf::File> f, const LoadOptions& opt);
std::unique_ptr<Model> make_gpt_oss(std::unique_ptr<gguf::File> f, const LoadOptions& opt);

// The one list of architectures: general.architecture → factory and facts
// (facts.h). Model::load, supported_architectures(), `moelsp inspect`, the
// device pass and every "supported: …" message read it.
struct ArchEntry {
  std::string_view name;
  std::unique_ptr<Model> (*make)(std::unique_ptr<gguf::File>, const LoadOptions&);
  const ArchFacts* facts;
};
inline constexpr ArchEntry kArchitectures[] = {
    {"deepseek2", make_deepseek2, &kDeepseek2Facts},
    {"qwen3moe", make_qwen3moe, &kQwen3moeFacts},
    {"llama", make_llama, &kLlamaFacts},
    {"glm4moe", make_glm4moe, &kGlm4moeFacts},
    {"glm-dsa", make_glm_dsa, &kGlmDsaFacts},
    {"gpt-oss", make_gpt_oss, &kGptOssFacts},
};
const ArchEntry* find_architecture(std::string_view name);  // nullptr when unsupported
std::string architecture_names();                           // "deepseek2, qwen3moe, llama"

}  // namespace moelsp::arch
