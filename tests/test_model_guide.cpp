// The model guide without the hub: the catalogue's cards, described
// machines, and the README's table of typical machines.
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "assist/model_guide.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

constexpr uint64_t MiB = 1ull << 20;

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const CatalogueEntry& entry(const std::string& repo_part) {
  for (const CatalogueEntry& e : model_catalogue())
    if (e.repo.find(repo_part) != std::string::npos) return e;
  FAIL("no catalogue entry " << repo_part);
  throw;
}

GuideRow plan(const std::string& repo_part, const std::string& quant, const std::string& machine) {
  const CatalogueEntry& e = entry(repo_part);
  for (const QuantFile& q : e.files)
    if (q.quant == quant)
      return plan_candidate(
          {.ref = e.repo + ":" + quant, .use = e.use, .fp = footprint_of_card(e, q), .estimate = true},
          described_machine(parse_machine(machine)));
  FAIL("no " << quant << " in " << e.repo);
  throw;
}

// The machines the README's table describes, in its column order.
const std::vector<std::string> kTypical = {"16G", "32G", "64G", "32G,8G", "64G,24G"};

}  // namespace

TEST_CASE("model guide: every card's footprint adds up to its published size") {
  for (const CatalogueEntry& e : model_catalogue()) {
    for (const QuantFile& q : e.files) {
      INFO(e.repo << ":" << q.quant);
      const ModelFootprint f = footprint_of_card(e, q);
      CHECK(f.file_bytes == q.bytes);
      CHECK(f.dense_bytes + f.experts_total() == q.bytes);
      // The rest (attention, embeddings, shared experts) at 4 to 17 bits per
      // weight: between Q4_K and F16, as llama-quantize leaves it.
      const ModelCard& c = e.card;
      const double dense = double(c.n_vocab) * double(c.n_embd) * 2 + double(c.n_layer) * double(c.attn_params) +
                           double(c.n_dense_lead) * 3 * double(c.n_embd) * double(c.n_ff_dense) +
                           double(f.n_moe_layers) * double(c.n_shared) * 3 * double(c.n_embd) * double(c.n_ff_expert);
      CHECK(double(f.dense_bytes) * 8 / dense > 4);
      CHECK(double(f.dense_bytes) * 8 / dense < 17);
      CHECK(f.embd_bytes < f.dense_bytes / 2);
      CHECK(f.active_bytes() < f.file_bytes / 4);  // MoE: a token reads a small part
      CHECK(f.n_expert_used < f.n_expert);
    }
  }
}

TEST_CASE("model guide: the cards' KV rows are the sizes llama.cpp reports") {
  // llama.cpp: "KV self size = 3072.00 MiB" for Qwen3-30B-A3B at 32,768 tokens, f16.
  const CatalogueEntry& qwen = entry("Qwen3-Coder");
  CHECK(footprint_of_card(qwen, qwen.files[0]).kv_bytes_per_token_f16 * 32768 == 3072 * MiB);
  // MLA caches the 512 latent and the 64 rope key per layer.
  const CatalogueEntry& lite = entry("DeepSeek-Coder-V2-Lite");
  CHECK(footprint_of_card(lite, lite.files[0]).kv_bytes_per_token_f16 == 27 * 576 * 2);
  const CatalogueEntry& glm = entry("GLM-4.7-Flash");
  CHECK(footprint_of_card(glm, glm.files[0]).kv_bytes_per_token_f16 == 47 * 576 * 2);
}

TEST_CASE("model guide: a described machine is read from RAM[,VRAM] in GB") {
  const MachineSpec a = parse_machine("32G");
  CHECK(a.ram_bytes == 32ull << 30);
  CHECK(a.vram_bytes == 0);
  CHECK(a.label == "32 GB RAM");
  const MachineSpec b = parse_machine("64GB,24GiB");
  CHECK(b.ram_bytes == 64ull << 30);
  CHECK(b.vram_bytes == 24ull << 30);
  CHECK(b.label == "64 GB RAM + 24 GB GPU");
  CHECK(parse_machine("12.5").ram_bytes == uint64_t(12.5 * double(1ull << 30)));
  for (const char* bad : {"", "G", "abc", "0G", "-8G", "32G,", "32G,x", "32GB RAM"})
    CHECK_THROWS_WITH(parse_machine(bad), Catch::Contains("machine '" + std::string(bad) + "'") &&
                                              Catch::Contains("expected RAM[,VRAM] in GB"));
  const HwProfile h = described_machine(b);
  CHECK(h.mem.usable() == (64ull << 30) / 4 * 3);
  REQUIRE(h.gpus.size() == 1);
  CHECK(h.gpus[0].vram_total == 24ull << 30);
  CHECK(h.cuda_build);
}

TEST_CASE("model guide: Qwen3-Coder Q4_K_M planned for typical machines") {
  // 17.3 GiB: streamed from disk on 16 GB (12 GiB available), in RAM on 32 GB.
  GuideRow r = plan("Qwen3-Coder", "Q4_K_M", "16G");
  CHECK(r.fits);
  CHECK(r.where == "streamed from disk");
  CHECK(r.decode_tps == 0);
  r = plan("Qwen3-Coder", "Q4_K_M", "32G");
  CHECK(r.where == "RAM");
  CHECK(r.n_ctx == 4096);
  // ~1.5 GB read per token (the dense part and 8 of 128 experts per layer) at 60 GB/s.
  CHECK(r.decode_tps > 30);
  CHECK(r.decode_tps < 60);
  // 24 GB of VRAM holds every expert; 8 GB a part of each layer's.
  r = plan("Qwen3-Coder", "Q4_K_M", "64G,24G");
  CHECK(r.where == "GPU (128 of 128 experts/layer)");
  r = plan("Qwen3-Coder", "Q4_K_M", "32G,8G");
  CHECK_THAT(r.where, Catch::StartsWith("GPU (") && Catch::EndsWith(" of 128 experts/layer) + RAM"));
  CHECK_FALSE(r.where.starts_with("GPU (0 of"));
  // Q8_0 on 32 GB + 8 GB: the experts the GPU cannot take do not fit the RAM either.
  CHECK_THAT(plan("Qwen3-Coder", "Q8_0", "32G,8G").where, Catch::EndsWith("experts/layer) + streamed from disk"));
  // Q8_0 (30.3 GiB) does not fit 32 GB's RAM, but fits 64 GB's.
  CHECK(plan("Qwen3-Coder", "Q8_0", "32G").where == "streamed from disk");
  CHECK(plan("Qwen3-Coder", "Q8_0", "64G").where == "RAM");
}

TEST_CASE("model guide: the README's table for typical machines is the one the guide computes") {
  std::vector<MachineSpec> specs;
  for (const std::string& m : kTypical) specs.push_back(parse_machine(m));
  const std::string readme = read(MOELSP_SOURCE_DIR "/README.md");
  const std::string begin =
      "<!-- model table: generated by `moelsp models --suggest --offline --markdown --machine 16G --machine 32G "
      "--machine 64G --machine 32G,8G --machine 64G,24G` -->\n";
  const std::string end = "<!-- end of model table -->";
  const size_t a = readme.find(begin), b = readme.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(readme.substr(a + begin.size(), b - a - begin.size()) == guide_markdown(candidates_from_cards(), specs));
}
