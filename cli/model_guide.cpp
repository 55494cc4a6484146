// moelsp models --suggest: which of the MoE coding models fit this machine,
// before anything is downloaded. For each suggested file the hub lists its
// size and serves its GGUF header (range requests); the plan's own
// arithmetic (make_plan on the header's footprint and this machine's
// profile: RAM, cgroup limit, GPU, measured bandwidth) says whether it fits,
// where the weights would live and the context it would get, and decode
// speed is estimated as the measured bandwidth over the bytes a token reads.
#include <cstdio>

#include <fmt/format.h>

#include "assist/backend.h"
#include "assist/hub.h"
#include "commands.h"
#include "engine/gguf.h"
#include "engine/plan.h"
#include "engine/profile.h"

namespace moelsp::cli {

namespace {

struct Suggestion {
  const char* repo;
  std::vector<const char*> quants;
  const char* use;
};

// The models the README recommends, in the quantizations worth having.
const std::vector<Suggestion>& suggestions() {
  static const std::vector<Suggestion> s = {
      {"unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF", {"Q4_K_M", "Q5_K_M", "Q8_0"}, "completions, agents"},
      {"unsloth/GLM-4.7-Flash-GGUF", {"Q4_K_M", "Q8_0"}, "agents, chat"},
      {"ggml-org/gpt-oss-20b-GGUF", {"MXFP4"}, "agents, chat (reasoning)"},
      {"bartowski/DeepSeek-Coder-V2-Lite-Instruct-GGUF", {"Q4_K_M", "Q8_0"}, "completions, chat"},
  };
  return s;
}

std::string gib(uint64_t b) {
  if (b < (1ull << 30)) return fmt::format("{:.0f} MiB", double(b) / double(1ull << 20));
  return fmt::format("{:.1f} GiB", double(b) / double(1ull << 30));
}

// One row: the plan for the file on this machine, or why there is none.
std::string row(const assist::ModelRef& ref, const HwProfile& hw, assist::Ticket& ticket) {
  const assist::RemoteModel r = assist::inspect_remote(ref, {}, ticket);
  ModelFootprint fp = footprint_of_header(*r.header);
  fp.file_bytes = r.bytes;
  const Plan p = make_plan(hw, fp, {});
  const std::string name = ref.repo_id() + ":" + ref.quant;
  if (!p.ok) return fmt::format("{:<58} {:>9}  does not fit: {}", name, gib(r.bytes), p.error);
  std::string where = p.backend == "cuda"
                          ? fmt::format("GPU ({} of {} experts/layer)", p.gpu_experts_per_layer, fp.n_expert)
                      : p.weights == WeightPlacement::Ram ? "RAM"
                                                          : "streamed from disk";
  // Decode reads the active weights once per token: bandwidth / bytes (RAM only;
  // streamed weights are bound by the disk, a GPU by its own memory).
  std::string speed = "-";
  if (p.backend != "cuda" && p.weights == WeightPlacement::Ram && hw.mem_bw_gbs > 0 && fp.active_bytes() > 0)
    speed = fmt::format("~{:.0f} t/s", hw.mem_bw_gbs * 1e9 / double(fp.active_bytes()));
  return fmt::format("{:<58} {:>9}  fits: {}, context {}, {} planned  {}", name, gib(r.bytes), where, p.n_ctx,
                     gib(p.ram_bytes + p.vram_bytes), speed);
}

}  // namespace

int models_suggest() {
  moelsp::ProfileOptions po;
  const HwProfile hw = hardware_profile(po);
  std::printf("this machine: %s RAM available to moelsp%s, %s, memory bandwidth %.0f GB/s (measured)\n",
              gib(hw.mem.usable()).c_str(), hw.mem.cgroup_limit ? " (cgroup limit)" : "",
              hw.gpus.empty() ? "no GPU" : fmt::format("{} GPU(s)", hw.gpus.size()).c_str(), hw.mem_bw_gbs);
  std::printf("%-58s %9s  %s\n", "moelsp pull REF", "size", "plan on this machine (from the file's header)");
  assist::Ticket ticket;
  int rows = 0;
  for (const Suggestion& s : suggestions()) {
    for (const char* q : s.quants) {
      assist::ModelRef ref = assist::parse_model_ref(std::string(s.repo) + ":" + q);
      try {
        std::printf("%s\n", row(ref, hw, ticket).c_str());
        ++rows;
      } catch (const std::exception& e) {
        const std::string what = e.what();
        std::printf("%-58s %9s  %s\n", (ref.repo_id() + ":" + q).c_str(), "?", what.c_str());
        if (rows == 0 && what.find("cannot") != std::string::npos) {  // no network: every row would say so
          std::fprintf(stderr,
                       "moelsp models: the guide reads each file's size and header from the hub (HF_ENDPOINT, "
                       "HTTPS_PROXY): %s\n",
                       what.c_str());
          return 1;
        }
      }
    }
  }
  std::printf(
      "Decode speed: measured memory bandwidth / bytes a token reads (weights in RAM). Uses: Qwen3-Coder and "
      "GLM-4.7-Flash for agents (tool calls), the smaller files for completions.\n");
  return 0;
}

}  // namespace moelsp::cli
