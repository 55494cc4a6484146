// Sizes as moelsp prints them to people: the plan's reasons, the model guide.
#pragma once

#include <cstdint>
#include <string>

namespace moelsp {

// "1.5 GiB" or "300 MiB" (binary units; below a GiB, whole MiB).
std::string size_text(uint64_t bytes);

}  // namespace moelsp
