// The guide's catalogue and what it knows without the hub: each model's
// card (its published configuration) and each file's published size, and a
// machine described rather than detected.
//
// Why cards: the guide plans a file from its GGUF header, read off the hub.
// Offline, and for the README's table of typical machines, there is no
// header; the card gives the same footprint within a few per cent. Routed
// experts dominate these files (95 % of the bytes), so their size is
// computed from the shape and the quant's type mix, and everything else
// (embeddings, attention, shared experts, routers) is the rest of the
// published size. The sizes are the hub's listings (decimal GB, as it shows
// them); the totals they imply match the parameter counts at the quants'
// bits per weight (Q8_0: 8.5 bits; Qwen3-Coder 30.5 B parameters → 32.4 GB
// against 32.5 GB listed; DeepSeek-Coder-V2-Lite 15.7 B → 16.69 against 16.70).
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "assist/model_guide.h"

namespace moelsp::assist {

namespace {

constexpr uint64_t GB(double gb) { return uint64_t(gb * 1e9); }

// Mean bits per weight of gate, up and down at each quant, as llama-quantize
// mixes them: Q4_K_M gives gate and up Q4_K (4.5 bits) and down Q6_K in half
// the layers (6.5625), Q4_K in the others; Q5_K_M likewise with Q5_K (5.5).
// A row length not divisible by 256 (DeepSeek-Coder-V2-Lite's 1,408-wide
// down) cannot take K-quants: Q4_K falls back to Q5_0 (5.5), Q6_K to Q8_0 (8.5).
constexpr double kQ4KM = (4.5 + 4.5 + (6.5625 + 4.5) / 2) / 3;
constexpr double kQ5KM = (5.5 + 5.5 + (6.5625 + 5.5) / 2) / 3;
constexpr double kQ4KMFallback = (4.5 + 4.5 + (8.5 + 5.5) / 2) / 3;
constexpr double kQ8 = 8.5;
constexpr double kMxfp4 = 4.25;

// Qwen3-Coder-30B-A3B: 48 layers, 128 experts (8 used) of 768, GQA 32 q /
// 4 kv heads of 128: q and o 2048 × 4096, k and v 2048 × 512.
ModelCard qwen3_coder_30b() {
  return {.arch = "qwen3moe",
          .n_layer = 48,
          .n_dense_lead = 0,
          .n_expert = 128,
          .n_expert_used = 8,
          .n_shared = 0,
          .n_embd = 2048,
          .n_ff_expert = 768,
          .n_ff_dense = 0,
          .n_vocab = 151936,
          .tied_output = false,
          .attn_params = 2 * 2048 * 4096 + 2 * 2048 * 512,
          .kv_elems = 2 * 4 * 128,
          .n_ctx_train = 262144};
}

// GLM-4.7-Flash (converted as deepseek2): 47 layers, the first dense (10,240),
// 64 experts (4 used) of 1,536 and one shared; MLA with 20 heads: q_a 2048 ×
// 768, q_b 768 × 20·256, kv_a 2048 × (512 + 64), kv_b 512 × 20·(192 + 256),
// o 20·256 × 2048; the cache holds the 512 latent and the 64 rope key.
ModelCard glm47_flash() {
  return {.arch = "deepseek2",
          .n_layer = 47,
          .n_dense_lead = 1,
          .n_expert = 64,
          .n_expert_used = 4,
          .n_shared = 1,
          .n_embd = 2048,
          .n_ff_expert = 1536,
          .n_ff_dense = 10240,
          .n_vocab = 154880,
          .tied_output = false,
          .attn_params = 2048 * 768 + 768 * 20 * 256 + 2048 * 576 + 512 * 20 * 448 + 20 * 256 * 2048,
          .kv_elems = 512 + 64,
          .n_ctx_train = 202752};
}

// gpt-oss-20b: 24 layers, 32 experts (4 used) of 2,880, GQA 64 q / 8 kv
// heads of 64 (every other layer a 128-token window; sized as full here).
ModelCard gpt_oss_20b() {
  return {.arch = "gpt-oss",
          .n_layer = 24,
          .n_dense_lead = 0,
          .n_expert = 32,
          .n_expert_used = 4,
          .n_shared = 0,
          .n_embd = 2880,
          .n_ff_expert = 2880,
          .n_ff_dense = 0,
          .n_vocab = 201088,
          .tied_output = false,
          .attn_params = 2 * 2880 * 4096 + 2 * 2880 * 512,
          .kv_elems = 2 * 8 * 64,
          .n_ctx_train = 131072};
}

// DeepSeek-Coder-V2-Lite: 27 layers, the first dense (10,944), 64 experts (6
// used) of 1,408 and two shared; MLA with 16 heads, no q compression: q 2048 ×
// 16·192, kv_a 2048 × 576, kv_b 512 × 16·256, o 2048 × 2048.
ModelCard deepseek_coder_v2_lite() {
  return {.arch = "deepseek2",
          .n_layer = 27,
          .n_dense_lead = 1,
          .n_expert = 64,
          .n_expert_used = 6,
          .n_shared = 2,
          .n_embd = 2048,
          .n_ff_expert = 1408,
          .n_ff_dense = 10944,
          .n_vocab = 102400,
          .tied_output = false,
          .attn_params = 2048 * 3072 + 2048 * 576 + 512 * 4096 + 2048 * 2048,
          .kv_elems = 512 + 64,
          .n_ctx_train = 163840};
}

}  // namespace

const std::vector<CatalogueEntry>& model_catalogue() {
  static const std::vector<CatalogueEntry> c = {
      {"unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF",
       "completions, agents",
       qwen3_coder_30b(),
       {{"Q4_K_M", GB(18.6), kQ4KM}, {"Q5_K_M", GB(21.7), kQ5KM}, {"Q8_0", GB(32.5), kQ8}}},
      {"bartowski/zai-org_GLM-4.7-Flash-GGUF",
       "agents, chat",
       glm47_flash(),
       {{"Q4_K_M", GB(18.47), kQ4KM}, {"Q8_0", GB(31.84), kQ8}}},
      {"ggml-org/gpt-oss-20b-GGUF", "agents, chat (reasoning)", gpt_oss_20b(), {{"MXFP4", GB(12.1), kMxfp4}}},
      {"bartowski/DeepSeek-Coder-V2-Lite-Instruct-GGUF",
       "completions, chat",
       deepseek_coder_v2_lite(),
       {{"Q4_K_M", GB(10.36), kQ4KMFallback}, {"Q8_0", GB(16.70), kQ8}}},
  };
  return c;
}

ModelFootprint footprint_of_card(const CatalogueEntry& e, const QuantFile& q) {
  const ModelCard& c = e.card;
  ModelFootprint f;
  f.name = e.repo + ":" + q.quant;
  f.arch = c.arch;
  f.file_bytes = q.bytes;
  f.n_layer = c.n_layer;
  f.n_moe_layers = c.n_layer - c.n_dense_lead;
  f.n_expert = c.n_expert;
  f.n_expert_used = c.n_expert_used;
  f.n_ctx_train = c.n_ctx_train;
  f.expert_bytes = uint64_t(std::llround(3.0 * double(c.n_embd) * double(c.n_ff_expert) * q.expert_bpw / 8));
  const uint64_t experts = f.experts_total();
  f.dense_bytes = q.bytes > experts ? q.bytes - experts : 0;
  // The embedding table's share of the dense bytes, by parameter count.
  const double embd = double(c.n_vocab) * double(c.n_embd);
  const double dense = embd * (c.tied_output ? 1 : 2) + double(c.n_layer) * double(c.attn_params) +
                       double(c.n_dense_lead) * 3 * double(c.n_embd) * double(c.n_ff_dense) +
                       double(f.n_moe_layers) * (double(c.n_shared) * 3 * double(c.n_embd) * double(c.n_ff_expert) +
                                                 double(c.n_embd) * double(c.n_expert));
  f.embd_bytes = uint64_t(double(f.dense_bytes) * embd / dense);
  f.kv_bytes_per_token_f16 = uint64_t(c.n_layer) * uint64_t(c.kv_elems) * 2;
  f.kv_q8_ok = c.kv_elems % 32 == 0;  // every catalogue head size (64, 128, 512, 576) is a multiple of 32
  return f;
}

MachineSpec parse_machine(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(
        fmt::format("machine '{}': {} (expected RAM[,VRAM] in GB, like 32G or 64G,24G)", text, why));
  };
  const auto amount = [&](std::string s) {
    for (const char* unit : {"GiB", "GB", "G", "gib", "gb", "g"})
      if (s.size() > std::char_traits<char>::length(unit) && s.ends_with(unit)) {
        s.resize(s.size() - std::char_traits<char>::length(unit));
        break;
      }
    size_t used = 0;
    double gb = 0;
    try {
      gb = std::stod(s, &used);
    } catch (const std::exception&) {
      throw bad(fmt::format("'{}' is not a number of GB", s));
    }
    if (used != s.size() || !(gb > 0) || gb > 65536) throw bad(fmt::format("'{}' is not a number of GB", s));
    return gb;
  };
  const size_t comma = text.find(',');
  MachineSpec m;
  const double ram = amount(text.substr(0, comma));
  m.ram_bytes = uint64_t(ram * double(1ull << 30));  // memory sizes as sold are binary
  m.label = fmt::format("{:g} GB RAM", ram);
  if (comma != std::string::npos) {
    const double vram = amount(text.substr(comma + 1));
    m.vram_bytes = uint64_t(vram * double(1ull << 30));
    m.label += fmt::format(" + {:g} GB GPU", vram);
  }
  return m;
}

HwProfile described_machine(const MachineSpec& m) {
  HwProfile h;
  h.cpu.vendor = "described";
  h.cpu.model = m.label;
  h.cpu.physical = 8;
  h.cpu.logical = 16;
  h.cpu.avx2 = true;
  h.cpu.kernel_isa = "avx2";
  h.mem.total = m.ram_bytes;
  h.mem.available = m.ram_bytes / 4 * 3;
  h.mem_bw_gbs = m.bandwidth_gbs;
  h.calibrated = true;
  h.disk = {.path = "", .device = "nvme0n1", .rotational = false, .read_gbs = 3};
  h.cuda_build = true;
  if (m.vram_bytes)
    h.gpus.push_back({.index = 0,
                      .name = m.label,
                      .cc_major = 8,
                      .cc_minor = 9,
                      .vram_total = m.vram_bytes,
                      .vram_free = m.vram_bytes - m.vram_bytes / 32,  // the desktop's share
                      .sms = 0,
                      .bus_bits = 0,
                      .h2d_gbs = 25});
  return h;
}

}  // namespace moelsp::assist
