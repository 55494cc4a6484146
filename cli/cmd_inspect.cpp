#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine/gguf.h"
#include "engine/model_info.h"
#include "options.h"

namespace moelsp::cli {
namespace {

std::string human_count(uint64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f} K", n / 1e3);
  return std::to_string(n);
}

std::string human_bytes(uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", n / double(1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.2f} MiB", n / double(1ull << 20));
  if (n >= (1ull << 10)) return fmt::format("{:.1f} KiB", n / double(1ull << 10));
  return fmt::format("{} B", n);
}

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += " x ";
    out += std::to_string(s[i]);
  }
  return out;
}

nlohmann::json value_json(const gguf::Value& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, gguf::Array>) {
          auto a = nlohmann::json::array();
          for (const auto& item : x.items) a.push_back(value_json(item));
          return a;
        } else {  // strings with invalid UTF-8 are handled by dump(..., replace)
          return x;
        }
      },
      v.v);
}

int print_json(const gguf::File& f, const ModelSummary& m) {
  nlohmann::json j;
  j["path"] = m.path;
  j["gguf_version"] = m.gguf_version;
  j["file_size"] = m.file_size;
  j["architecture"] = m.arch;
  j["name"] = m.name;
  j["hyperparameters"] = nlohmann::json::object();
  const std::string prefix = m.arch + ".";
  for (const auto& [k, v] : f.metadata())
    if (!m.arch.empty() && k.starts_with(prefix)) j["hyperparameters"][k.substr(prefix.size())] = value_json(v);
  auto& t = j["tokenizer"];
  t["present"] = m.tokenizer.present;
  t["model"] = m.tokenizer.model;
  t["pre"] = m.tokenizer.pre;
  t["n_vocab"] = m.tokenizer.n_vocab;
  t["n_merges"] = m.tokenizer.n_merges;
  t["add_bos"] = m.tokenizer.add_bos;
  t["add_eos"] = m.tokenizer.add_eos;
  t["chat_template"] = m.tokenizer.has_chat_template;
  t["fim"] = m.tokenizer.has_fim;
  t["special"] = nlohmann::json::object();
  for (const auto& [role, s] : m.tokenizer.special) t["special"][role] = s;
  if (!m.tokenizer.error.empty()) t["error"] = m.tokenizer.error;
  j["parameters"] = {{"total", m.total_params}, {"active", m.active_params}, {"moe", m.is_moe}};
  j["tensor_bytes"] = m.tensor_bytes;
  j["tensor_types"] = nlohmann::json::object();
  for (const auto& [type, n] : m.type_counts) j["tensor_types"][type] = n;
  auto& ts = j["tensors"] = nlohmann::json::array();
  for (const auto& ti : f.tensors())
    ts.push_back({{"name", ti.name},
                  {"type", kernels::dtype_name(ti.type)},
                  {"shape", ti.shape},
                  {"bytes", ti.n_bytes},
                  {"offset", f.data_offset() + ti.offset}});
  j["supported"] = m.supported;
  j["problems"] = m.problems;
  std::puts(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

int print_text(const gguf::File& f, const ModelSummary& m, bool all_tensors) {
  fmt::print("file:          {} (GGUF v{}, {})\n", m.path, m.gguf_version, human_bytes(m.file_size));
  fmt::print("architecture:  {}{}\n", m.arch.empty() ? "(none)" : m.arch, m.name.empty() ? "" : "  name: " + m.name);
  if (!m.hparams.empty()) {
    fmt::print("hyperparameters:\n");
    for (const auto& [k, v] : m.hparams) fmt::print("  {:<40} {}\n", k, v);
  }
  const auto& t = m.tokenizer;
  if (t.present) {
    fmt::print("tokenizer:     {}{}, {} tokens, {} merges, add_bos={} add_eos={}, chat template: {}, FIM: {}\n",
               t.model, t.pre.empty() ? "" : " (pre: " + t.pre + ")", t.n_vocab, t.n_merges, t.add_bos, t.add_eos,
               t.has_chat_template ? "yes" : "no", t.has_fim ? "yes" : "no");
    for (const auto& [role, s] : t.special) fmt::print("  {:<14} {}\n", role, s);
  } else {
    fmt::print("tokenizer:     none\n");
  }
  fmt::print("parameters:    {} total", human_count(m.total_params));
  if (m.is_moe) fmt::print(", ~{} active per token (MoE)", human_count(m.active_params));
  fmt::print("; tensor data {}\n", human_bytes(m.tensor_bytes));
  if (!m.type_counts.empty()) {
    fmt::print("tensor types: ");
    for (const auto& [type, n] : m.type_counts) fmt::print(" {}×{}", type, n);
    fmt::print("\n");
  }
  const auto& tensors = f.tensors();
  if (!tensors.empty()) {
    fmt::print("tensors ({}):\n  {:<40} {:<8} {:<24} {:>12}\n", tensors.size(), "name", "type", "shape", "bytes");
    const size_t shown = all_tensors ? tensors.size() : std::min<size_t>(tensors.size(), 40);
    for (size_t i = 0; i < shown; ++i) {
      const auto& ti = tensors[i];
      fmt::print("  {:<40} {:<8} {:<24} {:>12}\n", ti.name, kernels::dtype_name(ti.type), shape_str(ti.shape),
                 ti.n_bytes);
    }
    if (shown < tensors.size()) fmt::print("  ... {} more (--all-tensors lists them)\n", tensors.size() - shown);
  }
  if (m.supported) {
    fmt::print("supported:     yes (architecture, tensors, weight types and tokenizer)\n");
  } else {
    fmt::print("supported:     no\n");
    for (const auto& p : m.problems) fmt::print("  - {}\n", p);
  }
  return 0;
}

}  // namespace

int inspect(const InspectOptions& o) {
  try {
    const auto f = gguf::File::open(o.path);
    const auto m = summarize(f);
    return o.json ? print_json(f, m) : print_text(f, m, o.all_tensors);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp inspect: %s\n", e.what());
    return 1;
  }
}

void add_inspect(CLI::App& app, std::vector<Command>& out) {
  auto o = std::make_shared<InspectOptions>();
  auto* c = app.add_subcommand("inspect", "Print a GGUF file's metadata, tensors and whether moelsp supports it");
  c->add_option("file", o->path, "GGUF file")->required();
  c->add_flag("--json", o->json, "Machine-readable output");
  c->add_flag("--all-tensors", o->all_tensors, "List every tensor (default: first 40 and a summary)");
  out.push_back({c, [o] { return inspect(*o); }});
}

}  // namespace moelsp::cli
