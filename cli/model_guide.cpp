// moelsp models --suggest: the guide (assist/model_guide.h) as a table, or as
// JSON for scripts (the same rows the editors' model pickers show).
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "assist/model_guide.h"
#include "commands.h"
#include "engine/profile.h"

namespace moelsp::cli {

namespace {

std::string row_text(const assist::GuideRow& r) {
  if (r.bytes == 0) return fmt::format("{:<58} {:>9}  {}", r.ref, "?", r.error);
  if (!r.fits) return fmt::format("{:<58} {:>9}  does not fit: {}", r.ref, assist::size_text(r.bytes), r.error);
  const std::string speed = r.decode_tps > 0 ? fmt::format("~{:.0f} t/s", r.decode_tps) : "-";
  return fmt::format("{:<58} {:>9}  fits: {}, context {}, {} planned  {}", r.ref, assist::size_text(r.bytes), r.where,
                     r.n_ctx, assist::size_text(r.planned_bytes), speed);
}

}  // namespace

int models_suggest(bool as_json) {
  const HwProfile hw = hardware_profile(moelsp::ProfileOptions{});
  assist::Ticket ticket;
  std::vector<assist::GuideRow> rows;
  try {
    rows = assist::suggest_models(hw, {}, ticket);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "moelsp models: the guide reads each file's size and header from the hub (HF_ENDPOINT, "
                 "HTTPS_PROXY): %s\n",
                 e.what());
    return 1;
  }
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) out.push_back(assist::to_json(r));
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("this machine: %s RAM available to moelsp%s, %s, memory bandwidth %.0f GB/s (measured)\n",
              assist::size_text(hw.mem.usable()).c_str(), hw.mem.cgroup_limit ? " (cgroup limit)" : "",
              hw.gpus.empty() ? "no GPU" : fmt::format("{} GPU(s)", hw.gpus.size()).c_str(), hw.mem_bw_gbs);
  std::printf("%-58s %9s  %s\n", "moelsp pull REF", "size", "plan on this machine (from the file's header)");
  for (const auto& r : rows) std::printf("%s\n", row_text(r).c_str());
  std::printf(
      "Decode speed: measured memory bandwidth / bytes a token reads (weights in RAM). Uses: Qwen3-Coder and "
      "GLM-4.7-Flash for agents (tool calls), the smaller files for completions.\n");
  return 0;
}

}  // namespace moelsp::cli
