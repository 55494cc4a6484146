#include "util/install_path.h"

#include <unistd.h>

#include <array>
#include <filesystem>

namespace moelsp {

std::string beside_executable(std::string_view relative) {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  const std::filesystem::path exe(std::string(buf.data(), size_t(n)));
  return (exe.parent_path() / ".." / std::filesystem::path(relative)).lexically_normal().string();
}

}  // namespace moelsp
