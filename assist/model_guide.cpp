#include "assist/model_guide.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "engine/gguf.h"
#include "engine/plan.h"
#include "engine/profile.h"
#include "util/size_text.h"

namespace moelsp::assist {

nlohmann::json to_json(const GuideRow& r) {
  return {{"ref", r.ref},
          {"use", r.use},
          {"bytes", r.bytes},
          {"fits", r.fits},
          {"estimate", r.estimate},
          {"where", r.where},
          {"context", r.n_ctx},
          {"plannedBytes", r.planned_bytes},
          {"decodeTokensPerSecond", r.decode_tps},
          {"error", r.error}};
}

GuideRow plan_candidate(const Candidate& c, const HwProfile& hw) {
  GuideRow row{.ref = c.ref, .use = c.use, .bytes = c.fp.file_bytes, .estimate = c.estimate, .error = c.error};
  if (c.fp.file_bytes == 0) return row;
  const ModelFootprint& fp = c.fp;
  PlanRequest req;
  req.gpu_why = device_unsupported_arch(fp.arch);
  req.gpu_forward = req.gpu_why.empty();
  const Plan p = make_plan(hw, fp, req);
  if (!p.ok) {
    row.error = p.error;
    return row;
  }
  row.fits = true;
  row.n_ctx = p.n_ctx;
  row.planned_bytes = p.ram_bytes + p.vram_bytes;
  const std::string cpu_side = p.weights == WeightPlacement::Ram ? "RAM" : "streamed from disk";
  row.where = p.backend != "cuda" ? cpu_side
                                  : fmt::format("GPU ({} of {} experts/layer){}", p.gpu_experts_per_layer, fp.n_expert,
                                                p.gpu_experts_per_layer < fp.n_expert ? " + " + cpu_side : "");
  // Decode reads the active weights once per token.
  if (p.backend != "cuda" && p.weights == WeightPlacement::Ram && hw.mem_bw_gbs > 0 && fp.active_bytes() > 0)
    row.decode_tps = hw.mem_bw_gbs * 1e9 / double(fp.active_bytes());
  return row;
}

std::vector<Candidate> candidates_from_hub(const PullOptions& opt, Ticket& ticket) {
  std::vector<Candidate> out;
  bool reached = false;
  for (const CatalogueEntry& e : model_catalogue()) {
    for (const QuantFile& q : e.files) {
      Candidate c{.ref = e.repo + ":" + q.quant, .use = e.use};
      try {
        const RemoteModel r = inspect_remote(parse_model_ref(c.ref), opt, ticket);
        c.fp = footprint_of_header(*r.header);
        c.fp.file_bytes = r.bytes;
        reached = true;
      } catch (const HubUnreachable&) {
        if (!reached) throw;  // nothing came back: the hub is not there
        c.error = "the hub stopped answering";
      } catch (const std::exception& x) {
        reached = true;
        c.error = x.what();
      }
      out.push_back(std::move(c));
      if (ticket.cancelled()) return out;
    }
  }
  return out;
}

std::vector<Candidate> candidates_from_cards() {
  std::vector<Candidate> out;
  for (const CatalogueEntry& e : model_catalogue())
    for (const QuantFile& q : e.files)
      out.push_back({.ref = e.repo + ":" + q.quant, .use = e.use, .fp = footprint_of_card(e, q), .estimate = true});
  return out;
}

std::vector<GuideRow> suggest_models(const HwProfile& hw, const PullOptions& opt, Ticket& ticket) {
  std::vector<GuideRow> rows;
  for (const Candidate& c : candidates_from_hub(opt, ticket)) rows.push_back(plan_candidate(c, hw));
  return rows;
}

std::string guide_markdown(const std::vector<Candidate>& cands, const std::vector<MachineSpec>& machines) {
  std::string out = "| `moelsp pull` | size | memory |";
  std::string rule = "|---|---|---|";
  for (const MachineSpec& m : machines) {
    out += " " + m.label + " |";
    rule += "---|";
  }
  out += "\n" + rule + "\n";
  std::vector<HwProfile> hws;
  for (const MachineSpec& m : machines) hws.push_back(described_machine(m));
  // The memory column: the plan on a machine where everything fits in RAM.
  const HwProfile roomy = described_machine({.ram_bytes = 1ull << 40, .vram_bytes = 0, .label = "1 TB RAM"});
  for (const Candidate& c : cands) {
    const GuideRow all = plan_candidate(c, roomy);
    out += fmt::format("| `{}` | {} | {} |", c.ref, c.fp.file_bytes ? size_text(c.fp.file_bytes) : "?",
                       all.fits ? size_text(all.planned_bytes) : "?");
    for (const HwProfile& hw : hws) {
      const GuideRow r = plan_candidate(c, hw);
      const std::string cell = !r.fits            ? "no"
                               : r.decode_tps > 0 ? fmt::format("{}, ~{:.0f} t/s", r.where, r.decode_tps)
                                                  : r.where;
      out += " " + cell + " |";
    }
    out += "\n";
  }
  return out;
}

}  // namespace moelsp::assist
