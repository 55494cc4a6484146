// The KV cache's row types, on their own so that headers which only name a
// type (the planner's) need not pull in the cache.
#pragma once

#include <string>

namespace moelsp {

enum class KvType { F32, F16, BF16, Q8_0 };
const char* to_string(KvType t);
KvType kv_type_from_name(const std::string& name);  // "f32", "f16", "bf16", "q8_0"; throws std::invalid_argument

}  // namespace moelsp
