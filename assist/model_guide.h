// Which of the MoE coding models fit this machine, before anything is
// downloaded: `moelsp models --suggest` and the editors' model pickers
// (moelsp/models). For each suggested file the hub lists its size and serves
// its GGUF header (range requests); the plan's own arithmetic (make_plan on
// the header's footprint and this machine's profile: RAM, cgroup limit, GPU,
// measured bandwidth) says whether it fits, where the weights would live and
// the context it would get. Decode speed is estimated as the measured memory
// bandwidth over the bytes a token reads (weights in RAM only: streamed
// weights are bound by the disk, a GPU by its own memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "assist/hub.h"

namespace moelsp {
struct HwProfile;
}

namespace moelsp::assist {

// A model the guide recommends, in the quantizations worth having.
struct CatalogueEntry {
  std::string repo;  // owner/name on the hub
  std::vector<std::string> quants;
  std::string use;  // "completions, agents"…
};
const std::vector<CatalogueEntry>& model_catalogue();

struct GuideRow {
  std::string ref;  // owner/repo:QUANT, as `moelsp pull` takes it
  std::string use;
  uint64_t bytes = 0;  // on disk, all parts (0: unknown, see error)
  bool fits = false;
  std::string where = {};      // "RAM", "GPU (12 of 128 experts/layer)", "streamed from disk"
  int n_ctx = 0;               // the context the plan would give
  uint64_t planned_bytes = 0;  // RAM + VRAM the plan would use
  double decode_tps = 0;       // estimated tokens/s (0: no estimate)
  std::string error = {};      // does not fit: the plan's reason; or what the hub said
};

// One row per catalogue file. Throws std::runtime_error when the hub cannot
// be reached at all (the first file fails to connect): every row would say so.
std::vector<GuideRow> suggest_models(const HwProfile& hw, const PullOptions& opt, Ticket& ticket);

// A row as JSON ({"ref", "use", "bytes", "fits", "where", "context",
// "plannedBytes", "decodeTokensPerSecond", "error"}): `models --suggest
// --json` and the LSP's moelsp/models.
nlohmann::json to_json(const GuideRow& r);

// "512 MiB", "17.3 GiB".
std::string size_text(uint64_t bytes);

}  // namespace moelsp::assist
