// moelsp profile: the hardware profile and the plan for a model on it.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine/model.h"
#include "engine/profile.h"
#include "options.h"

namespace moelsp::cli {

int profile(const ProfileOptions& o) {
  try {
    assist::Settings settings = assist::read_config_files(o.config);
    assist::Settings flags;  // the command line's, over the files
    flags.plan = o.over;
    settings.merge_from(flags);
    const PlanOverrides over = settings.plan;
    moelsp::ProfileOptions po;
    po.model_path = o.model;
    po.recalibrate = o.recalibrate;
    po.calibrate = !o.no_calibrate;
    const HwProfile hw = hardware_profile(po);
    auto model = Model::load(o.model, {.threads = plan_threads(hw, over)});
    const ModelFootprint ms = footprint(*model);
    const PlanRequest req = with_device(
        {.n_ctx = o.ctx, .concurrency = o.concurrency, .gpu_forward = false, .gpu_why = {}, .over = over}, *model);
    const Plan plan = make_plan(hw, ms, req);
    if (o.json) {
      nlohmann::json j = {{"hardware", nlohmann::json::parse(hw.to_json())},
                          {"model",
                           {{"path", o.model},
                            {"name", ms.name},
                            {"arch", ms.arch},
                            {"fileBytes", ms.file_bytes},
                            {"denseBytes", ms.dense_bytes},
                            {"expertBytes", ms.expert_bytes},
                            {"experts", ms.n_expert},
                            {"expertsUsed", ms.n_expert_used},
                            {"moeLayers", ms.n_moe_layers},
                            {"activeBytesPerToken", ms.active_bytes()},
                            {"kvBytesPerTokenF16", ms.kv_bytes_per_token_f16}}},
                          {"plan", nlohmann::json::parse(plan.to_json())}};
      for (const std::string& cfg : {assist::user_config_path(), o.config})
        if (!cfg.empty()) j["config"].push_back(cfg);  // the files read, later over earlier
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      std::printf("%s\n", hw.to_text().c_str());
      std::printf(
          "model   %s (%s): %.2f GiB, dense %.2f GiB, %d experts × %d MoE layers of %.2f MiB, %d used per token;\n"
          "        %.1f MiB read per token, KV %llu B/token (f16)\n\n",
          o.model.c_str(), ms.arch.c_str(), double(ms.file_bytes) / (1 << 30), double(ms.dense_bytes) / (1 << 30),
          ms.n_expert, ms.n_moe_layers, double(ms.expert_bytes) / (1 << 20), ms.n_expert_used,
          double(ms.active_bytes()) / (1 << 20), (unsigned long long)ms.kv_bytes_per_token_f16);
      for (const std::string& cfg : {assist::user_config_path(), o.config})
        if (!cfg.empty()) std::printf("config  %s\n\n", cfg.c_str());
      std::printf("plan\n%s", plan.to_text().c_str());
    }
    return plan.ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp profile: %s\n", e.what());
    return 1;
  }
}

void add_profile(CLI::App& app, std::vector<Command>& out) {
  auto o = std::make_shared<ProfileOptions>();
  auto* c = app.add_subcommand("profile",
                               "Detect the hardware, measure it (cached), and print the plan for a model with reasons");
  c->add_option("-m,--model", o->model, "GGUF model file (default: the embedded model)");
  c->add_option("-c,--ctx", o->ctx, "Context size (default: min(4096, training context))");
  c->add_option("--concurrency", o->concurrency, "Sequences expected at once")->capture_default_str();
  c->add_flag("--json", o->json, "Machine-readable output");
  c->add_flag("--recalibrate", o->recalibrate, "Measure again instead of reading ~/.cache/moelsp/profile.json");
  c->add_flag("--no-calibrate", o->no_calibrate, "Detection only, no measurements");
  c->add_option(
      "--config", o->config,
      "Config file (JSON, or TOML when it ends in .toml), read over ~/.config/moelsp/config.toml or config.json");
  auto flags = std::make_shared<SettingFlags>(c, assist::kProfileFlag);
  out.push_back({c, [o, c, flags] {
                   assist::Settings s;
                   if (!apply_flags(*flags, s) || !default_model(o->model, c)) return 2;
                   o->over = s.plan;
                   return profile(*o);
                 }});
}

}  // namespace moelsp::cli
