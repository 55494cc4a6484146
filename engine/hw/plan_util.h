// What plan.cpp and plan_steps.cpp share (not part of the engine's API).
#pragma once

#include <cstdint>
#include <string>

#include "engine/plan.h"
#include "util/size_text.h"  // size_text: "1.5 GiB" or "300 MiB", as the plan's reasons print sizes

namespace moelsp {

constexpr uint64_t kMiB = uint64_t(1) << 20, kGiB = uint64_t(1) << 30;

// KV cache bytes per token of all layers with rows of type t.
uint64_t kv_bytes_per_token(const ModelFootprint& m, KvType t);

}  // namespace moelsp
