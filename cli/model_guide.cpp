// moelsp models --suggest: the guide (assist/model_guide.h) as a table, or as
// JSON for scripts (the same rows the editors' model pickers show).
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "assist/model_guide.h"
#include "commands.h"
#include "engine/profile.h"
#include "util/size_text.h"

namespace moelsp::cli {

namespace {

std::string row_text(const assist::GuideRow& r) {
  if (r.bytes == 0) return fmt::format("{:<58} {:>9}  {}", r.ref, "?", r.error);
  if (!r.fits) return fmt::format("{:<58} {:>9}  does not fit: {}", r.ref, size_text(r.bytes), r.error);
  const std::string speed = r.decode_tps > 0 ? fmt::format("~{:.0f} t/s", r.decode_tps) : "-";
  return fmt::format("{:<58} {:>9}  fits: {}, context {}, {} planned  {}", r.ref, size_text(r.bytes), r.where, r.n_ctx,
                     size_text(r.planned_bytes), speed);
}

// The candidates from the hub, or from the cards when it cannot be reached
// (one message on stderr) or --offline.
std::vector<assist::Candidate> candidates(const SuggestOptions& o) {
  if (o.offline) return assist::candidates_from_cards();
  assist::Ticket ticket;
  try {
    return assist::candidates_from_hub({}, ticket);
  } catch (const assist::HubUnreachable& e) {
    std::fprintf(stderr,
                 "moelsp models: the hub cannot be reached (HF_ENDPOINT, HTTPS_PROXY): %s; showing estimates from "
                 "the models' published configurations\n",
                 e.what());
    return assist::candidates_from_cards();
  }
}

nlohmann::json rows_json(const std::vector<assist::GuideRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) out.push_back(assist::to_json(r));
  return out;
}

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

int print_machines(const SuggestOptions& o, const std::vector<assist::MachineSpec>& specs,
                   const std::vector<assist::Candidate>& cands) {
  if (o.markdown) {
    std::printf("%s", assist::guide_markdown(cands, specs).c_str());
    return 0;
  }
  nlohmann::json all = nlohmann::json::array();
  for (const assist::MachineSpec& m : specs) {
    const HwProfile hw = assist::described_machine(m);
    std::vector<assist::GuideRow> rows;
    for (const auto& c : cands) rows.push_back(assist::plan_candidate(c, hw));
    if (o.as_json) {
      all.push_back({{"machine", m.label}, {"bandwidthGBs", m.bandwidth_gbs}, {"rows", rows_json(rows)}});
      continue;
    }
    std::printf("%s (%.0f GB/s):\n", m.label.c_str(), m.bandwidth_gbs);
    for (const auto& r : rows) std::printf("%s\n", row_text(r).c_str());
  }
  if (o.as_json) print_json(all);
  return 0;
}

}  // namespace

int models_suggest(const SuggestOptions& o) {
  std::vector<assist::MachineSpec> specs;
  try {
    for (const std::string& t : o.machines) {
      specs.push_back(assist::parse_machine(t));
      specs.back().bandwidth_gbs = o.bandwidth_gbs;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp models: %s\n", e.what());
    return 2;
  }
  const std::vector<assist::Candidate> cands = candidates(o);
  const bool estimated = !cands.empty() && cands.front().estimate;
  if (!specs.empty()) return print_machines(o, specs, cands);
  const HwProfile hw = hardware_profile(moelsp::ProfileOptions{});
  std::vector<assist::GuideRow> rows;
  for (const auto& c : cands) rows.push_back(assist::plan_candidate(c, hw));
  if (o.as_json) {
    print_json(rows_json(rows));
    return 0;
  }
  std::printf("this machine: %s RAM available to moelsp%s, %s, memory bandwidth %.0f GB/s (measured)\n",
              size_text(hw.mem.usable()).c_str(), hw.mem.cgroup_limit ? " (cgroup limit)" : "",
              hw.gpus.empty() ? "no GPU" : fmt::format("{} GPU(s)", hw.gpus.size()).c_str(), hw.mem_bw_gbs);
  std::printf("%-58s %9s  %s\n", "moelsp pull REF", "size",
              estimated ? "plan on this machine (estimated from the model's configuration)"
                        : "plan on this machine (from the file's header)");
  for (const auto& r : rows) std::printf("%s\n", row_text(r).c_str());
  std::printf(
      "Decode speed: memory bandwidth / bytes a token reads (weights in RAM). Uses: Qwen3-Coder and "
      "GLM-4.7-Flash for agents (tool calls), the smaller files for completions.\n");
  return 0;
}

}  // namespace moelsp::cli
