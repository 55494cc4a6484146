#include "assist/model_guide.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "engine/gguf.h"
#include "engine/plan.h"
#include "engine/profile.h"

namespace moelsp::assist {

const std::vector<CatalogueEntry>& model_catalogue() {
  static const std::vector<CatalogueEntry> c = {
      {"unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF", {"Q4_K_M", "Q5_K_M", "Q8_0"}, "completions, agents"},
      {"unsloth/GLM-4.7-Flash-GGUF", {"Q4_K_M", "Q8_0"}, "agents, chat"},
      {"ggml-org/gpt-oss-20b-GGUF", {"MXFP4"}, "agents, chat (reasoning)"},
      {"bartowski/DeepSeek-Coder-V2-Lite-Instruct-GGUF", {"Q4_K_M", "Q8_0"}, "completions, chat"},
  };
  return c;
}

std::string size_text(uint64_t b) {
  if (b < (1ull << 30)) return fmt::format("{:.0f} MiB", double(b) / double(1ull << 20));
  return fmt::format("{:.1f} GiB", double(b) / double(1ull << 30));
}

nlohmann::json to_json(const GuideRow& r) {
  return {{"ref", r.ref},
          {"use", r.use},
          {"bytes", r.bytes},
          {"fits", r.fits},
          {"where", r.where},
          {"context", r.n_ctx},
          {"plannedBytes", r.planned_bytes},
          {"decodeTokensPerSecond", r.decode_tps},
          {"error", r.error}};
}

namespace {

// The plan for one file on this machine, from its header.
void plan_row(GuideRow& row, const RemoteModel& r, const HwProfile& hw) {
  ModelFootprint fp = footprint_of_header(*r.header);
  fp.file_bytes = r.bytes;
  row.bytes = r.bytes;
  const Plan p = make_plan(hw, fp, {});
  if (!p.ok) {
    row.error = p.error;
    return;
  }
  row.fits = true;
  row.n_ctx = p.n_ctx;
  row.planned_bytes = p.ram_bytes + p.vram_bytes;
  row.where = p.backend == "cuda" ? fmt::format("GPU ({} of {} experts/layer)", p.gpu_experts_per_layer, fp.n_expert)
              : p.weights == WeightPlacement::Ram ? "RAM"
                                                  : "streamed from disk";
  // Decode reads the active weights once per token.
  if (p.backend != "cuda" && p.weights == WeightPlacement::Ram && hw.mem_bw_gbs > 0 && fp.active_bytes() > 0)
    row.decode_tps = hw.mem_bw_gbs * 1e9 / double(fp.active_bytes());
}

}  // namespace

std::vector<GuideRow> suggest_models(const HwProfile& hw, const PullOptions& opt, Ticket& ticket) {
  std::vector<GuideRow> rows;
  bool reached = false;
  for (const CatalogueEntry& e : model_catalogue()) {
    for (const std::string& q : e.quants) {
      GuideRow row{.ref = e.repo + ":" + q, .use = e.use};
      try {
        plan_row(row, inspect_remote(parse_model_ref(row.ref), opt, ticket), hw);
        reached = true;
      } catch (const HubUnreachable&) {
        if (!reached) throw;  // nothing came back: the hub is not there
        row.error = "the hub stopped answering";
      } catch (const std::exception& x) {
        reached = true;
        row.error = x.what();
      }
      rows.push_back(std::move(row));
      if (ticket.cancelled()) return rows;
    }
  }
  return rows;
}

}  // namespace moelsp::assist
