#include "engine/model_info.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "../arch/arch.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "kernels/types.h"

namespace moelsp {

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> a = [] {
    std::vector<std::string> v;
    for (const arch::ArchEntry& e : arch::kArchitectures) v.emplace_back(e.name);
    return v;
  }();
  return a;
}

// What the CPU kernels compute with (kernels/types.h's table).
const std::vector<std::string>& supported_weight_types() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> v;
    for (kernels::DType d : kernels::matmul_types()) v.emplace_back(kernels::dtype_name(d));
    return v;
  }();
  return t;
}

namespace {

struct ArchRequirements {
  std::vector<std::string> keys;     // without the "{arch}." prefix
  std::vector<std::string> tensors;  // per-layer names use "blk.%d." prefix, checked for layer 0..n-1
  std::vector<std::string> moe_tensors;
};

// Tensors every layer needs (beyond the alternatives handled below).
ArchRequirements requirements(const std::string& arch) {
  if (arch == "deepseek2")
    return {
        {"block_count", "embedding_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
         "attention.kv_lora_rank", "attention.key_length", "attention.value_length", "rope.dimension_count",
         "expert_count", "expert_used_count", "expert_feed_forward_length", "leading_dense_block_count",
         "feed_forward_length"},
        {"attn_norm.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight", "ffn_norm.weight"},
        {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  if (arch == "qwen3moe")
    return {{"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_feed_forward_length"},
            {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight"},
            {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  if (arch == "llama")
    return {{"block_count", "embedding_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
             "feed_forward_length"},
            {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "ffn_norm.weight"},
            {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  if (arch == "glm-dsa")
    return {
        {"block_count", "embedding_length", "attention.head_count", "attention.layer_norm_rms_epsilon",
         "attention.q_lora_rank", "attention.kv_lora_rank", "rope.dimension_count", "expert_count", "expert_used_count",
         "expert_feed_forward_length", "attention.indexer.head_count", "attention.indexer.key_length",
         "attention.indexer.top_k"},
        {"attn_norm.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight", "ffn_norm.weight"},
        {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  if (arch == "gpt-oss")
    return {{"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "attention.sliding_window", "expert_count", "expert_used_count",
             "expert_feed_forward_length"},
            {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "attn_sinks.weight", "post_attention_norm.weight"},
            {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  if (arch == "glm4moe")
    return {{"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.layer_norm_rms_epsilon", "rope.dimension_count", "expert_count", "expert_used_count",
             "expert_feed_forward_length", "leading_dense_block_count", "feed_forward_length"},
            {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "post_attention_norm.weight"},
            {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}};
  return {};
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c < 0x20) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  return out + "'";
}

void summarize_tokenizer(const gguf::File& f, ModelSummary& m) {
  TokenizerSummary& ts = m.tokenizer;
  ts.present = f.has("tokenizer.ggml.model");
  if (!ts.present) {
    m.problems.push_back("no tokenizer in the file (tokenizer.ggml.* keys missing)");
    return;
  }
  ts.has_chat_template = f.has("tokenizer.chat_template");
  if (const auto* v = f.find("tokenizer.ggml.merges"))
    if (const auto* a = std::get_if<gguf::Array>(&v->v)) ts.n_merges = a->items.size();
  try {
    auto tok = Tokenizer::from_gguf(f);
    ts.model = tok->model();
    ts.pre = tok->pre();
    ts.n_vocab = tok->n_vocab();
    const SpecialTokens& s = tok->special();
    ts.add_bos = s.add_bos;
    ts.add_eos = s.add_eos;
    const std::pair<const char*, TokenId> roles[] = {{"bos", s.bos},
                                                     {"eos", s.eos},
                                                     {"eot", s.eot},
                                                     {"eom", s.eom},
                                                     {"unk", s.unk},
                                                     {"pad", s.pad},
                                                     {"linefeed", s.linefeed},
                                                     {"fim_prefix", s.fim_pre},
                                                     {"fim_suffix", s.fim_suf},
                                                     {"fim_middle", s.fim_mid},
                                                     {"fim_pad", s.fim_pad},
                                                     {"fim_repo", s.fim_rep},
                                                     {"fim_file_sep", s.fim_sep}};
    for (const auto& [role, id] : roles)
      if (id != kNoToken) ts.special.emplace_back(role, fmt::format("{} {}", id, quoted(tok->token_text(id))));
    ts.has_fim = s.fim_pre != kNoToken && s.fim_suf != kNoToken && s.fim_mid != kNoToken;
    if (ts.has_fim) ts.special.emplace_back("fim_order", s.fim_spm ? "spm (suffix, prefix, middle)" : "psm");
  } catch (const std::exception& e) {
    ts.model = f.get_or<std::string>("tokenizer.ggml.model", "");
    ts.pre = f.get_or<std::string>("tokenizer.ggml.pre", "");
    ts.error = e.what();
    m.problems.push_back(fmt::format("tokenizer: {}", e.what()));
  }
}

}  // namespace

ModelSummary summarize(const gguf::File& f) {
  ModelSummary m;
  m.path = f.path();
  m.gguf_version = f.version();
  m.file_size = f.file_size();
  m.arch = f.get_or<std::string>("general.architecture", "");
  m.name = f.get_or<std::string>("general.name", "");
  const std::string prefix = m.arch + ".";
  if (!m.arch.empty())
    for (const auto& [k, v] : f.metadata())
      if (k.starts_with(prefix)) m.hparams.emplace_back(k.substr(prefix.size()), v.to_string(8));

  // Parameters. Routed-expert tensors (ffn_*_exps) hold expert_count experts of
  // which expert_used_count run per token.
  const auto n_expert = f.get_or<uint64_t>(prefix + "expert_count", 0);
  const auto n_used = f.get_or<uint64_t>(prefix + "expert_used_count", 0);
  m.is_moe = n_expert > 0;
  std::map<std::string, size_t> types;
  uint64_t routed = 0;
  for (const auto& t : f.tensors()) {
    m.total_params += t.n_elements;
    m.tensor_bytes += t.n_bytes;
    ++types[std::string(kernels::dtype_name(t.type))];
    if (t.name.find("_exps.") != std::string::npos) routed += t.n_elements;
  }
  m.active_params = m.total_params;
  if (m.is_moe && n_used <= n_expert) m.active_params = m.total_params - routed + routed / n_expert * n_used;
  m.type_counts.assign(types.begin(), types.end());

  // What stops us from running it.
  const auto& archs = supported_architectures();
  if (m.arch.empty()) {
    m.problems.push_back("no general.architecture key");
  } else if (std::find(archs.begin(), archs.end(), m.arch) == archs.end()) {
    m.problems.push_back(
        fmt::format("architecture '{}' is not supported (supported: {})", m.arch, arch::architecture_names()));
  } else {
    const ArchRequirements req = requirements(m.arch);
    for (const auto& k : req.keys)
      if (!f.has(prefix + k)) m.problems.push_back(fmt::format("missing hyperparameter {}{}", prefix, k));
    if (f.tensors().empty()) {
      m.problems.push_back("the file holds no tensors (a vocabulary-only file?)");
    } else {
      if (!f.tensor("token_embd.weight")) m.problems.push_back("missing tensor token_embd.weight");
      if (!f.tensor("output_norm.weight")) m.problems.push_back("missing tensor output_norm.weight");
      const auto n_layer = f.get_or<uint64_t>(prefix + "block_count", 0);
      const auto n_dense = f.get_or<uint64_t>(prefix + "leading_dense_block_count", 0);
      for (uint64_t l = 0; l < n_layer && l < 4096; ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        for (const auto& t : req.tensors)
          if (!f.tensor(blk + t)) m.problems.push_back("missing tensor " + blk + t);
        const bool moe_layer = m.is_moe && l >= n_dense;
        if (moe_layer) {
          for (const auto& t : req.moe_tensors)
            if (!f.tensor(blk + t)) m.problems.push_back("missing tensor " + blk + t);
        } else if (!f.tensor(blk + "ffn_up.weight")) {
          m.problems.push_back("missing tensor " + blk + "ffn_up.weight");
        }
        if (m.arch == "deepseek2" || m.arch == "glm-dsa") {
          const bool q_direct = f.tensor(blk + "attn_q.weight");
          const bool q_lora = f.tensor(blk + "attn_q_a.weight") && f.tensor(blk + "attn_q_b.weight");
          if (!q_direct && !q_lora)
            m.problems.push_back("missing tensor " + blk + "attn_q.weight (or attn_q_a/attn_q_b)");
          const bool kv_combined = f.tensor(blk + "attn_kv_b.weight");
          const bool kv_split = f.tensor(blk + "attn_k_b.weight") && f.tensor(blk + "attn_v_b.weight");
          if (!kv_combined && !kv_split)
            m.problems.push_back("missing tensor " + blk + "attn_kv_b.weight (or attn_k_b/attn_v_b)");
        }
      }
      const auto& wt = supported_weight_types();
      for (const auto& [type, count] : m.type_counts)
        if (std::find(wt.begin(), wt.end(), type) == wt.end())
          m.problems.push_back(fmt::format("weight type {} ({} tensors) is not supported yet", type, count));
    }
  }
  summarize_tokenizer(f, m);
  // A long list of missing per-layer tensors says one thing; keep the first few.
  if (m.problems.size() > 24) {
    const size_t more = m.problems.size() - 20;
    m.problems.resize(20);
    m.problems.push_back(fmt::format("... and {} more", more));
  }
  m.supported = m.problems.empty();
  return m;
}

}  // namespace moelsp
