// Which of the MoE coding models fit a machine, before anything is
// downloaded: `moelsp models --suggest` and the editors' model pickers
// (moelsp/models). For each suggested file the hub lists its size and serves
// its GGUF header (range requests); the plan's own arithmetic (make_plan on
// the header's footprint and the machine's profile: RAM, cgroup limit, GPU,
// measured bandwidth) says whether it fits, where the weights would live and
// the context it would get. Decode speed is estimated as the memory
// bandwidth over the bytes a token reads (weights in RAM only: streamed
// weights are bound by the disk, a GPU by its own memory).
//
// Without the hub (offline, or `--offline`) the footprint is estimated from
// each model's card (model_cards.cpp): its published configuration and the
// file's published size. The machine may be this one or a described one
// (`--machine 32G,8G`): the README's table for typical machines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "assist/hub.h"
#include "engine/plan.h"

namespace moelsp::assist {

// A model's shape as its published configuration gives it: enough to size
// its weights by role and its KV row without the file.
struct ModelCard {
  std::string arch;
  int n_layer = 0;       // blocks run per token (a NextN/MTP block is not)
  int n_dense_lead = 0;  // leading layers with a dense FFN
  int n_expert = 0, n_expert_used = 0, n_shared = 0;
  int64_t n_embd = 0, n_ff_expert = 0, n_ff_dense = 0, n_vocab = 0;
  bool tied_output = false;
  int64_t attn_params = 0;  // one layer's attention weights
  int64_t kv_elems = 0;     // one layer's cached K and V per token (MLA: the latent and the rope key)
  int n_ctx_train = 0;
};

// One file of a recommended model: its quantization, its size as the hub
// lists it, and the mean bits per weight of its routed experts (the mix of
// types llama-quantize gives gate, up and down at that quant).
struct QuantFile {
  std::string quant;
  uint64_t bytes = 0;
  double expert_bpw = 0;
};

// A model the guide recommends, in the quantizations worth having.
struct CatalogueEntry {
  std::string repo;  // owner/name on the hub
  std::string use;   // "completions, agents"…
  ModelCard card;
  std::vector<QuantFile> files;
};
const std::vector<CatalogueEntry>& model_catalogue();

// The footprint of one catalogue file estimated from its card: the routed
// experts at the file's expert bpw, the rest of its published size as the
// dense weights. Within a few per cent of the header's (tested).
ModelFootprint footprint_of_card(const CatalogueEntry& e, const QuantFile& q);

// A machine described rather than detected: total RAM and, optionally, one
// GPU's VRAM. Three quarters of the RAM is taken as available (an editor, a
// browser and the OS hold the rest); 8 cores, an NVMe disk (3 GB/s), a CUDA
// build, and `bandwidth_gbs` of memory bandwidth.
struct MachineSpec {
  uint64_t ram_bytes = 0, vram_bytes = 0;
  double bandwidth_gbs = 60;  // dual-channel DDR5, as measured rather than as sold
  std::string label;          // "32 GB RAM + 8 GB GPU"
};
// "32G", "64G,24G" (GB of RAM, then of VRAM; G, GB, GiB alike). Throws
// std::invalid_argument naming what is wrong.
MachineSpec parse_machine(const std::string& text);
HwProfile described_machine(const MachineSpec& m);

// A file to plan: its footprint from the hub's header, or from its card.
struct Candidate {
  std::string ref;  // owner/repo:QUANT, as `moelsp pull` takes it
  std::string use;
  ModelFootprint fp = {};  // file_bytes 0: unknown, see error
  bool estimate = false;   // from the card, not the header
  std::string error = {};  // what the hub said
};
// From the hub: throws HubUnreachable when the first file's request cannot
// connect (every row would say so); later failures go in the rows.
std::vector<Candidate> candidates_from_hub(const PullOptions& opt, Ticket& ticket);
std::vector<Candidate> candidates_from_cards();

struct GuideRow {
  std::string ref;
  std::string use;
  uint64_t bytes = 0;  // on disk, all parts (0: unknown, see error)
  bool fits = false;
  bool estimate = false;       // sized from the model's card, not its header
  std::string where = {};      // "RAM", "streamed from disk", "GPU (12 of 128 experts/layer) + RAM" (the rest's)
  int n_ctx = 0;               // the context the plan would give
  uint64_t planned_bytes = 0;  // RAM + VRAM the plan would use
  double decode_tps = 0;       // estimated tokens/s (0: no estimate)
  std::string error = {};      // does not fit: the plan's reason; or what the hub said
};
GuideRow plan_candidate(const Candidate& c, const HwProfile& hw);

// candidates_from_hub, each planned for `hw`.
std::vector<GuideRow> suggest_models(const HwProfile& hw, const PullOptions& opt, Ticket& ticket);

// The README's table: a row per candidate with its size and the memory its
// plan takes where RAM is plenty (weights, KV for four default contexts,
// buffers), then a column per described machine: where the weights would
// live and the decode estimate, or "no".
std::string guide_markdown(const std::vector<Candidate>& cands, const std::vector<MachineSpec>& machines);

// A row as JSON ({"ref", "use", "bytes", "fits", "estimate", "where",
// "context", "plannedBytes", "decodeTokensPerSecond", "error"}): `models
// --suggest --json` and the LSP's moelsp/models.
nlohmann::json to_json(const GuideRow& r);

}  // namespace moelsp::assist
