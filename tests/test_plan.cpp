// The automatic plan on synthetic machines (this one is none of them): the
// essential choices per machine, and that no plan exceeds the memory it was
// given. Also the detection of this machine, config files and overrides.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/profile.h"
#include "test_data.h"

using namespace moelsp;

namespace {

constexpr uint64_t MiB = uint64_t(1) << 20, GiB = uint64_t(1) << 30;

HwProfile cpu_box(int cores, uint64_t ram) {
  HwProfile h;
  h.cpu.vendor = "AuthenticAMD";
  h.cpu.model = "synthetic";
  h.cpu.physical = cores;
  h.cpu.logical = cores * 2;
  h.mem.total = ram;
  h.mem.available = ram - ram / 16;
  h.mem_bw_gbs = 40;
  h.disk.device = "nvme0n1";
  h.disk.read_gbs = 3;
  h.cuda_build = true;
  return h;
}

HwProfile with_gpu(HwProfile h, const char* name, uint64_t vram, int cc) {
  h.gpus.push_back({0, name, cc / 10, cc % 10, vram, vram - vram / 32, 100, 384, 25});
  return h;
}

// Qwen3-30B-A3B Q4_K_M as its file has it: 48 layers, all MoE, 128 experts
// (8 used) of ~3 MiB, 18.6 GB in all.
ModelFootprint qwen3_30b_q4km() {
  ModelFootprint m;
  m.name = "Qwen3-30B-A3B";
  m.arch = "qwen3moe";
  m.n_layer = m.n_moe_layers = 48;
  m.n_expert = 128;
  m.n_expert_used = 8;
  m.embd_bytes = 175 * MiB;
  m.dense_bytes = 1050 * MiB;
  m.expert_bytes = 3 * MiB + 100 * 1024;
  m.file_bytes = m.dense_bytes + m.experts_total();
  m.n_ctx_train = 262144;
  m.kv_bytes_per_token_f16 = 48 * 4 * 128 * 2 * 2;
  m.kv_q8_ok = true;
  return m;
}

// A model of `total` bytes shaped like a DeepSeek-V2-Lite (MLA, 26 MoE layers of 64 experts).
ModelFootprint deepseek_like(uint64_t total) {
  ModelFootprint m;
  m.arch = "deepseek2";
  m.n_layer = 27;
  m.n_moe_layers = 26;
  m.n_expert = 64;
  m.n_expert_used = 6;
  m.dense_bytes = total / 12;
  m.embd_bytes = m.dense_bytes / 5;
  m.expert_bytes = (total - m.dense_bytes) / (26 * 64);
  m.file_bytes = m.dense_bytes + m.experts_total();
  m.n_ctx_train = 163840;
  m.kv_bytes_per_token_f16 = 27 * 576 * 2;
  return m;
}

const PlanRequest kGpu{.n_ctx = 0, .concurrency = 4, .gpu_forward = true, .gpu_why = {}, .over = {}};

void check_within_budget(const HwProfile& hw, const Plan& p) {
  INFO(p.to_text());
  CHECK(p.ram_budget <= hw.mem.usable());
  CHECK(p.ram_bytes <= p.ram_budget);
  if (p.gpu >= 0) {
    const GpuProfile& g = hw.gpus[size_t(p.gpu)];
    CHECK(p.vram_budget <= g.vram_free);
    CHECK(p.vram_bytes <= p.vram_budget);
  }
  // Every decision says why.
  for (const auto& r : p.reasons) CHECK_FALSE(r.why.empty());
}

const Plan::Reason* reason(const Plan& p, const std::string& key) {
  for (const auto& r : p.reasons)
    if (r.key == key) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("plan: 2 cores / 24 GB with a model that fits: all in RAM, no prefetch") {
  const HwProfile hw = cpu_box(2, 24 * GiB);
  const ModelFootprint m = deepseek_like(3 * GiB);
  const Plan p = make_plan(hw, m, {});
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.backend == "cpu");
  CHECK(p.threads == 2);  // physical cores, not hardware threads
  CHECK(p.weights == WeightPlacement::Ram);
  CHECK_FALSE(p.prefetch);
  CHECK(p.expert_cache_bytes == 0);
  CHECK(p.n_ctx == 4096);
  CHECK(p.kv_tokens == 4 * 4096);  // one context per expected stream
  CHECK(p.paged);
  CHECK(p.block_size == 16);
  CHECK(p.kv_type == KvType::F16);
  CHECK(reason(p, "backend")->why == "no GPU found");
  CHECK(p.warnings.empty());  // nothing fell back
}

// BF16 rows where the kernels read them with vdpbf16ps and the context is
// long (an agent's); f16 for an editor's context, below that level (a CPU
// without AVX512_BF16, or MOELSP_ISA capping it) and when a GPU runs the pass.
TEST_CASE("plan: a long context on a CPU with AVX512-BF16 kernels stores bf16 KV rows") {
  HwProfile hw = cpu_box(2, 24 * GiB);
  hw.cpu.avx512_bf16 = true;
  hw.cpu.kernel_isa = "avx512-bf16";
  const ModelFootprint m = qwen3_30b_q4km();
  PlanRequest agent;
  agent.n_ctx = 32768;
  const Plan p = make_plan(hw, m, agent);
  CHECK(p.kv_type == KvType::BF16);
  CHECK(reason(p, "kvCache.type")->why.find("vdpbf16ps") != std::string::npos);
  check_within_budget(hw, p);
  CHECK(make_plan(hw, m, {}).kv_type == KvType::F16);  // 4,096: an editor's context
  PlanRequest asked = agent;
  asked.over.kv_type = "f16";
  CHECK(make_plan(hw, m, asked).kv_type == KvType::F16);
  HwProfile capped = hw;  // MOELSP_ISA=avx512-vnni
  capped.cpu.kernel_isa = "avx512-vnni";
  CHECK(make_plan(capped, m, agent).kv_type == KvType::F16);
  hw.cpu.avx512_bf16 = false;
  CHECK(make_plan(hw, m, agent).kv_type == KvType::F16);
}

TEST_CASE("plan: 16 GB with a model 1.5x larger: experts stream, predicted and prefetched, hot ones cached") {
  const HwProfile hw = cpu_box(8, 16 * GiB);
  const ModelFootprint m = deepseek_like(24 * GiB);
  const Plan p = make_plan(hw, m, {});
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.weights == WeightPlacement::Stream);
  CHECK(p.prefetch);
  CHECK(p.prefetch_distance >= 1);
  CHECK(p.expert_cache_experts > 0);
  CHECK(p.expert_cache_bytes < m.experts_total());
  // The dense parts are resident: they are part of the planned use.
  CHECK(p.ram_bytes >= m.dense_bytes + p.kv_bytes);
  CHECK(reason(p, "weights")->why.find("exceed") != std::string::npos);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0].find("streamed") != std::string::npos);
}

TEST_CASE("plan: 80 GB H100 with Qwen3-30B-A3B Q4_K_M: everything on the GPU") {
  const HwProfile hw = with_gpu(cpu_box(32, 256 * GiB), "NVIDIA H100 80GB HBM3", 80 * GiB, 90);
  const ModelFootprint m = qwen3_30b_q4km();
  const Plan p = make_plan(hw, m, kGpu);
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.backend == "cuda");
  CHECK(p.gpu == 0);
  CHECK(p.gpu_experts_per_layer == 128);
  CHECK(p.weights == WeightPlacement::Ram);  // what stays on the host (embeddings) is small
  CHECK(p.ram_bytes < 2 * GiB);
  CHECK(p.max_batch > 8);
}

TEST_CASE("plan: 24 GB RTX 4090 with Qwen3-30B-A3B Q4_K_M") {
  const HwProfile hw = with_gpu(cpu_box(16, 64 * GiB), "NVIDIA GeForce RTX 4090", 24 * GiB, 89);
  const ModelFootprint m = qwen3_30b_q4km();
  SECTION("4k context: the whole model fits in VRAM") {
    const Plan p = make_plan(hw, m, kGpu);
    check_within_budget(hw, p);
    CHECK(p.backend == "cuda");
    CHECK(p.gpu_experts_per_layer == 128);
  }
  SECTION("32k context x 4 streams: KV first, then as many experts as fit; the rest on the CPU, in RAM") {
    const Plan p = make_plan(hw, m, {.n_ctx = 32768, .concurrency = 4, .gpu_forward = true, .gpu_why = {}, .over = {}});
    check_within_budget(hw, p);
    CHECK(p.backend == "cuda");
    CHECK(p.kv_tokens >= 32768);
    CHECK(p.gpu_experts_per_layer > 64);
    CHECK(p.gpu_experts_per_layer < 128);
    CHECK(p.weights == WeightPlacement::Ram);
  }
}

TEST_CASE("plan: 8 GB laptop GPU with 16 GB RAM and Qwen3-30B-A3B Q4_K_M") {
  const HwProfile hw = with_gpu(cpu_box(8, 16 * GiB), "NVIDIA GeForce RTX 4060 Laptop GPU", 8 * GiB, 89);
  const ModelFootprint m = qwen3_30b_q4km();
  const Plan p = make_plan(hw, m, kGpu);
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.backend == "cuda");
  CHECK(p.gpu_experts_per_layer > 0);
  CHECK(p.gpu_experts_per_layer < 64);
  // The other experts (~12 GB) are computed on the CPU: in RAM when they fit its budget, else streamed.
  const uint64_t cpu_experts = uint64_t(128 - p.gpu_experts_per_layer) * 48 * m.expert_bytes;
  if (cpu_experts + m.embd_bytes + 256 * MiB <= p.ram_budget) CHECK(p.weights == WeightPlacement::Ram);
  else CHECK(p.weights == WeightPlacement::Stream);
}

TEST_CASE("plan: too little memory for the dense part is an error naming the sizes") {
  const HwProfile hw = cpu_box(4, 3 * GiB);
  const ModelFootprint m = deepseek_like(60 * GiB);  // 5 GB dense
  const Plan p = make_plan(hw, m, {});
  CHECK_FALSE(p.ok);
  CHECK(p.error.find("out of memory") != std::string::npos);
  CHECK(p.error.find("dense weights") != std::string::npos);
}

TEST_CASE("plan: streaming with little memory halves the context before failing") {
  HwProfile hw = cpu_box(4, 8 * GiB);
  ModelFootprint m = deepseek_like(40 * GiB);
  m.kv_bytes_per_token_f16 = 400 * 1024;  // a model with a large KV row
  const Plan p = make_plan(hw, m, {.n_ctx = 16384, .concurrency = 4, .over = {}});
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.n_ctx < 16384);
  CHECK(std::any_of(p.warnings.begin(), p.warnings.end(),
                    [](const std::string& w) { return w.find("halved") != std::string::npos; }));
}

TEST_CASE("plan: streaming, q8_0 KV rows are tried before the context is halved, and count as q8_0") {
  // 8 GiB box (6.8 GiB budget), 40 GiB model (3.3 GiB dense), 400 KiB of f16
  // KV per token: 12,288 tokens of f16 rows (4.7 GiB) do not fit beside the
  // dense weights, q8_0 rows (2.5 GiB) do.
  HwProfile hw = cpu_box(4, 8 * GiB);
  ModelFootprint m = deepseek_like(40 * GiB);
  m.kv_bytes_per_token_f16 = 400 * 1024;
  m.kv_q8_ok = true;
  const Plan p = make_plan(hw, m, {.n_ctx = 12288, .concurrency = 1, .over = {}});
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.kv_type == KvType::Q8_0);
  CHECK(p.n_ctx == 12288);
  CHECK(p.kv_bytes == uint64_t(p.kv_tokens) * (400 * 1024) * 34 / 64);
}

TEST_CASE("plan: a GPU driver error is reported and the plan is for the CPU") {
  HwProfile hw = cpu_box(4, 32 * GiB);
  hw.gpu_error = "cudaGetDeviceCount: unknown error";
  const Plan p = make_plan(hw, deepseek_like(3 * GiB), {});
  CHECK(p.ok);
  CHECK(p.backend == "cpu");
  CHECK(reason(p, "backend")->why.find("unknown error") != std::string::npos);
}

TEST_CASE("plan: a GPU in a build without CUDA is not used") {
  HwProfile hw = with_gpu(cpu_box(8, 32 * GiB), "NVIDIA GeForce RTX 4090", 24 * GiB, 89);
  hw.cuda_build = false;
  const Plan p = make_plan(hw, qwen3_30b_q4km(), kGpu);
  CHECK(p.backend == "cpu");
  CHECK(reason(p, "backend")->why.find("no CUDA") != std::string::npos);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0].find("RTX 4090") != std::string::npos);
}

TEST_CASE("plan: a model the GPU forward pass cannot run is planned for the CPU, and the plan says why") {
  const HwProfile hw = with_gpu(cpu_box(8, 64 * GiB), "NVIDIA GeForce RTX 4090", 24 * GiB, 89);
  const std::string why = "glm-dsa's sparse attention (the lightning indexer) is not on the device yet";
  const Plan p = make_plan(hw, qwen3_30b_q4km(), {.gpu_forward = false, .gpu_why = why, .over = {}});
  CHECK(p.backend == "cpu");
  CHECK(p.weights == WeightPlacement::Ram);  // 19 GB fit 64 GB of RAM
  CHECK(reason(p, "backend")->why.find("RTX 4090") != std::string::npos);
  CHECK(reason(p, "backend")->why.find(why) != std::string::npos);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0].find("unused") != std::string::npos);
  // A q8_0 KV cache set by the user keeps it on the CPU too (the GPU's rows are f16, bf16 or f32).
  PlanRequest q8 = kGpu;
  q8.over.kv_type = "q8_0";
  const Plan p8 = make_plan(hw, qwen3_30b_q4km(), q8);
  CHECK(p8.backend == "cpu");
  CHECK(reason(p8, "backend")->why.find("q8_0") != std::string::npos);
}

TEST_CASE("plan fallbacks are logged as warnings when a model loads") {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  PlanRequest req;
  req.over.n_ctx = 1 << 20;  // beyond the model's training context
  const std::string path = test::data_path("reference/qwen3moe-ref.gguf");
  ProfileOptions po;
  po.calibrate = false;
  const PlannedModel r = load_planned(path, req, po);
  spdlog::set_default_logger(previous);
  REQUIRE(r.plan.warnings.size() == 1);
  const std::vector<std::string> lines = sink->last_formatted();
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("[warning]") && Catch::Contains(path) &&
                           Catch::Contains("context 1048576 asked for, but the model was trained for"));
}

TEST_CASE("plan: overrides replace choices and say so") {
  const HwProfile hw = with_gpu(cpu_box(8, 64 * GiB), "NVIDIA GeForce RTX 4090", 24 * GiB, 89);
  PlanRequest req = kGpu;
  req.over.threads = 3;
  req.over.weights = "stream";
  req.over.kv_type = "q8_0";
  req.over.paged = false;
  req.over.gpu = -1;
  req.over.prefetch_distance = 2;
  req.over.max_batch = 2;
  const Plan p = make_plan(hw, qwen3_30b_q4km(), req);
  check_within_budget(hw, p);
  CHECK(p.threads == 3);
  CHECK(p.backend == "cpu");
  CHECK(p.weights == WeightPlacement::Stream);
  CHECK(p.kv_type == KvType::Q8_0);
  CHECK_FALSE(p.paged);
  CHECK(p.block_size == p.n_ctx);
  CHECK(p.prefetch_distance == 2);
  CHECK(p.max_batch == 2);
  for (const char* k : {"threads", "weights", "kvCache.type", "kvCache.paged", "batch.max", "backend"})
    CHECK(reason(p, k)->why == "set by the user");
  const EngineOptions eo = p.engine_options();
  CHECK(eo.block_size == p.n_ctx);
  CHECK(eo.max_batch == 2);
}

TEST_CASE("profile: this machine is detected, and measurements are cached by hardware key") {
  const std::string dir = "test_plan_cache";
  std::filesystem::remove_all(dir);
  ProfileOptions po;
  po.calibrate = false;
  const HwProfile fast = hardware_profile(po);
  CHECK(fast.cpu.physical >= 1);
  CHECK(fast.cpu.logical >= fast.cpu.physical);
  CHECK(fast.mem.total > 0);
  CHECK(fast.mem.usable() <= fast.mem.total);
  CHECK_FALSE(fast.cpu.kernel_isa.empty());
  CHECK_FALSE(fast.calibrated);

  po.calibrate = true;
  po.cache_path = dir + "/profile.json";
  po.model_path = test::data_path("reference/qwen3moe-ref.gguf");
  const HwProfile first = hardware_profile(po);
  CHECK(first.calibrated);
  CHECK_FALSE(first.from_cache);
  CHECK(first.mem_bw_gbs > 0);
  const HwProfile second = hardware_profile(po);
  CHECK(second.from_cache);
  CHECK(second.mem_bw_gbs == first.mem_bw_gbs);
  CHECK(second.disk.read_gbs == first.disk.read_gbs);
  // Another machine's cache is not used.
  { std::ofstream(po.cache_path) << R"({"key": "another machine", "memBwGBs": 1.0})"; }
  const HwProfile third = hardware_profile(po);
  CHECK_FALSE(third.from_cache);
  CHECK(third.mem_bw_gbs != 1.0);
  po.recalibrate = true;
  CHECK_FALSE(hardware_profile(po).from_cache);
  std::filesystem::remove_all(dir);
}

TEST_CASE("plan: for a real model file on this machine") {
  auto m = Model::load(test::data_path("reference/deepseek2-lite-ref.gguf"), {.threads = 1});
  const ModelFootprint f = footprint(*m);
  CHECK(f.n_expert == m->config().n_expert);
  CHECK(f.expert_bytes > 0);
  CHECK(f.dense_bytes + f.experts_total() <= f.file_bytes);
  CHECK(f.kv_bytes_per_token_f16 == m->kv_layout(KvType::F16).bytes_per_token());
  ProfileOptions po;
  po.calibrate = false;
  const HwProfile hw = hardware_profile(po);
  const Plan p = make_plan(hw, f, {});
  check_within_budget(hw, p);
  CHECK(p.ok);
  CHECK(p.n_ctx <= m->config().n_ctx_train);
}

TEST_CASE("threads beyond the machine's logical CPUs are refused, naming the setting and the range") {
  HwProfile hw;
  hw.cpu.physical = 2;
  hw.cpu.logical = 4;
  PlanOverrides over;
  over.threads = 4;
  CHECK(plan_threads(hw, over) == 4);
  over.threads = 1000;
  CHECK_THROWS_WITH(plan_threads(hw, over),
                    Catch::Contains("setting threads") && Catch::Contains("1000") && Catch::Contains("1..4"));
  over.threads.reset();
  CHECK(plan_threads(hw, over) == 2);  // automatic: the physical cores
}

TEST_CASE("plan: the server's full context is the training context while it fits, halved (not streamed) when not") {
  ModelFootprint m = qwen3_30b_q4km();
  m.n_ctx_train = 262144;
  PlanRequest req;
  req.full_context = true;
  // 64 GiB: the weights and a whole 262,144-token context of KV fit.
  Plan p = make_plan(cpu_box(8, 64 * GiB), m, req);
  CHECK(p.ok);
  CHECK(p.n_ctx == 262144);
  CHECK(reason(p, "context")->why.find("whole training context") != std::string::npos);
  // 24 GiB: halved until one context of KV fits beside the weights in RAM.
  const HwProfile small = cpu_box(2, 24 * GiB);
  p = make_plan(small, m, req);
  check_within_budget(small, p);
  CHECK(p.ok);
  CHECK(p.weights == WeightPlacement::Ram);
  CHECK(p.n_ctx < 262144);
  CHECK(p.n_ctx >= 4096);
  CHECK(reason(p, "context")->why.find("halved") != std::string::npos);
  // Asked for: as asked; and without full_context the editor's 4,096.
  req.n_ctx = 8192;
  CHECK(make_plan(small, m, req).n_ctx == 8192);
  CHECK(make_plan(small, m, {}).n_ctx == 4096);
}

TEST_CASE("plan: a footprint from the header alone agrees with the loaded model's, for every architecture") {
  // What `moelsp models --suggest` plans with before a download: the same
  // numbers a load gives (tensor bytes by role, the KV row).
  for (const char* name : {"qwen3moe-ref", "deepseek2-lite-ref", "deepseek2-v3-ref", "glm4moe-ref", "gpt-oss-ref",
                           "glm-dsa-ref", "mixtral-ref"}) {
    const std::string path = test::data_path(std::string("reference/") + name + ".gguf");
    INFO(name);
    const std::string bytes = test::read_file(path);
    const gguf::File head = gguf::File::from_header(
        std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(std::min<size_t>(bytes.size(), 4u << 20))),
        bytes.size(), name);
    const ModelFootprint h = footprint_of_header(head);
    auto m = Model::load(path, {.threads = 1});
    const ModelFootprint f = footprint(*m);
    CHECK(h.arch == f.arch);
    CHECK(h.file_bytes == f.file_bytes);
    CHECK(h.n_layer == f.n_layer);
    CHECK(h.n_moe_layers == f.n_moe_layers);
    CHECK(h.n_expert == f.n_expert);
    CHECK(h.n_expert_used == f.n_expert_used);
    CHECK(h.dense_bytes == f.dense_bytes);
    CHECK(h.expert_bytes == f.expert_bytes);
    CHECK(h.embd_bytes == f.embd_bytes);
    CHECK(h.active_bytes() == f.active_bytes());
    CHECK(h.kv_bytes_per_token_f16 == f.kv_bytes_per_token_f16);
    CHECK(h.kv_q8_ok == f.kv_q8_ok);
  }
}

// The language server's completion model is planned after its chat model:
// what the chat model holds is taken from RAM and from the GPU before the
// second plan starts (its mapped pages would otherwise still look available).
TEST_CASE("plan: memory another model of the process holds is planned as taken") {
  const HwProfile hw = with_gpu(cpu_box(16, 64 * GiB), "NVIDIA GeForce RTX 4090", 24 * GiB, 89);
  const ModelFootprint m = qwen3_30b_q4km();
  const Plan alone = make_plan(hw, m, kGpu);
  PlanRequest req = kGpu;
  req.reserved_ram_bytes = 40 * GiB;
  req.reserved_vram_bytes = 12 * GiB;
  const Plan beside = make_plan(hw, m, req);
  INFO(alone.to_text() << "\n---\n" << beside.to_text());
  REQUIRE(alone.ok);
  REQUIRE(beside.ok);
  CHECK(beside.ram_budget + 36 * GiB <= alone.ram_budget);  // 40 GiB taken, less the headroom's tenth of it
  CHECK(beside.vram_budget + 12 * GiB <= alone.vram_budget + GiB / 64);
  CHECK(beside.gpu_experts_per_layer < alone.gpu_experts_per_layer);
  req.reserved_ram_bytes = 63 * GiB;  // nearly all of it: a plan that says it does not fit, or streams
  req.reserved_vram_bytes = 24 * GiB;
  const Plan squeezed = make_plan(hw, m, req);
  CHECK((!squeezed.ok || squeezed.weights == WeightPlacement::Stream || squeezed.backend == "cpu"));
}
