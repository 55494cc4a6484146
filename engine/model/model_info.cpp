#include "engine/model_info.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// One layer's tensors against the architecture's facts: its own, the FFN's
// (routed experts in a MoE layer, a dense ffn_up elsewhere), and one
// spelling of each that has several.
void check_layer(const gguf::File& f, const arch::ArchFacts& facts, const std::string& blk, bool moe_layer,
                 std::vector<std::string>& problems) {
  const auto has = [&](std::string_view t) { return f.tensor(blk + std::string(t)) != nullptr; };
  for (const auto& t : facts.tensors)
    if (!has(t)) problems.push_back(fmt::format("missing tensor {}{}", blk, t));
  if (moe_layer) {
    for (const auto& t : arch::kMoeTensors)
      if (!has(t)) problems.push_back(fmt::format("missing tensor {}{}", blk, t));
  } else if (!has("ffn_up.weight")) {
    problems.push_back("missing tensor " + blk + "ffn_up.weight");
  }
  for (const auto& ways : facts.one_of) {
    const bool met = std::any_of(ways.begin(), ways.end(),
                                 [&](const auto& set) { return std::all_of(set.begin(), set.end(), has); });
    if (met) continue;
    // "attn_q.weight (or attn_q_a/attn_q_b)"
    std::string alt;
    for (size_t i = 1; i < ways.size(); ++i)
      for (size_t j = 0; j < ways[i].size(); ++j) {
        std::string_view t = ways[i][j];
        if (t.ends_with(".weight")) t.remove_suffix(7);
        alt += std::string(alt.empty() ? "" : (j == 0 ? ", or " : "/")) + std::string(t);
      }
    problems.push_back(
        fmt::format("missing tensor {}{}{}", blk, fmt::join(ways[0], "+"), alt.empty() ? "" : " (or " + alt + ")"));
  }
}

// Parameters. Routed-expert tensors (ffn_*_exps) hold expert_count experts
// of which expert_used_count run per token.
void count_parameters(const gguf::File& f, const std::string& prefix, ModelSummary& m) {
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
}

// Weight types the kernels lack.
void check_types(ModelSummary& m) {
  const auto& wt = supported_weight_types();
  for (const auto& [type, count] : m.type_counts)
    if (std::find(wt.begin(), wt.end(), type) == wt.end())
      m.problems.push_back(fmt::format("weight type {} ({} tensors) is not supported yet", type, count));
}

// What stops moelsp from running a file of a known architecture: missing
// hyperparameters and tensors (its facts), weight types the kernels lack.
void check_against(const gguf::File& f, const arch::ArchFacts& facts, const std::string& prefix, ModelSummary& m,
                   bool check_tensors) {
  for (const auto& k : facts.keys)
    if (!f.has(prefix + std::string(k))) m.problems.push_back(fmt::format("missing hyperparameter {}{}", prefix, k));
  if (!check_tensors) return check_types(m);
  if (f.tensors().empty()) return m.problems.push_back("the file holds no tensors (a vocabulary-only file?)");
  if (!f.tensor("token_embd.weight")) m.problems.push_back("missing tensor token_embd.weight");
  if (!f.tensor("output_norm.weight")) m.problems.push_back("missing tensor output_norm.weight");
  const auto n_layer = f.get_or<uint64_t>(prefix + "block_count", 0);
  const auto n_dense = f.get_or<uint64_t>(prefix + "leading_dense_block_count", 0);
  for (uint64_t l = 0; l < n_layer && l < 4096; ++l)
    check_layer(f, facts, fmt::format("blk.{}.", l), m.is_moe && l >= n_dense, m.problems);
  check_types(m);
}

}  // namespace

ModelSummary summarize(const gguf::File& f, bool check_tensors) {
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
  count_parameters(f, prefix, m);
  if (m.arch.empty()) m.problems.push_back("no general.architecture key");
  else if (const arch::ArchFacts* facts = arch::facts_of(m.arch)) check_against(f, *facts, prefix, m, check_tensors);
  else
    m.problems.push_back(
        fmt::format("architecture '{}' is not supported (supported: {})", m.arch, arch::architecture_names()));
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
