// moelsp profile: the hardware profile and the plan for a model on it.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine/model.h"
#include "engine/profile.h"

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

}  // namespace moelsp::cli
