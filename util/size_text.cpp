#include "util/size_text.h"

#include <fmt/format.h>

namespace moelsp {

std::string size_text(uint64_t b) {
  constexpr uint64_t kMiB = uint64_t(1) << 20, kGiB = uint64_t(1) << 30;
  if (b >= kGiB) return fmt::format("{:.1f} GiB", double(b) / double(kGiB));
  return fmt::format("{} MiB", (b + kMiB / 2) / kMiB);
}

}  // namespace moelsp
