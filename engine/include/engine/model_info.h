// What a GGUF file holds, in terms a user can act on: architecture,
// hyperparameters, tokenizer, tensors, parameter counts, and whether moelsp
// can run it (with each missing piece named). Used by `moelsp inspect`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moelsp {

namespace gguf {
class File;
}

struct TokenizerSummary {
  bool present = false;
  std::string model, pre;
  size_t n_vocab = 0;
  size_t n_merges = 0;
  std::vector<std::pair<std::string, std::string>> special;  // role → "id 'text'"
  bool add_bos = false, add_eos = false;
  bool has_chat_template = false;
  bool has_fim = false;
  std::string error;  // why the tokenizer could not be built, if it could not
};

struct ModelSummary {
  std::string path;
  uint32_t gguf_version = 0;
  uint64_t file_size = 0;
  std::string arch;                                          // general.architecture
  std::string name;                                          // general.name
  std::vector<std::pair<std::string, std::string>> hparams;  // "{arch}." keys with the prefix removed
  TokenizerSummary tokenizer;
  uint64_t total_params = 0;
  uint64_t active_params = 0;  // per token: routed experts count expert_used_count / expert_count
  uint64_t tensor_bytes = 0;
  bool is_moe = false;
  std::vector<std::pair<std::string, size_t>> type_counts;  // quant type → number of tensors
  bool supported = false;
  std::vector<std::string> problems;  // what stops moelsp from running the file
};

// check_tensors false: not which tensors are there (the first part of a
// split model, whose other parts hold the rest); hyperparameters, weight
// types and the tokenizer still count.
ModelSummary summarize(const gguf::File& f, bool check_tensors = true);

// The architectures and weight types moelsp targets.
const std::vector<std::string>& supported_architectures();
const std::vector<std::string>& supported_weight_types();

}  // namespace moelsp
