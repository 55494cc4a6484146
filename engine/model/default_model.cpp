#include "engine/default_model.h"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>

namespace moelsp {

std::string default_model_path() {
  if (const char* env = std::getenv("MOELSP_MODEL"); env && *env)
    return env;  // as given: a bad path gets a clear load error
  return embedded_model_path();
}

namespace {

// <the executable's dir>/../share/moelsp/moelsp-default.gguf: where a package
// (or `cmake --install` to any prefix, or dpkg --root) put it beside the binary.
std::string beside_executable() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  const std::filesystem::path exe(std::string(buf.data(), size_t(n)));
  return (exe.parent_path() / ".." / "share" / "moelsp" / "moelsp-default.gguf").lexically_normal().string();
}

}  // namespace

std::string embedded_model_path() {
  std::error_code ec;
  // Beside the executable first (an installed copy uses its own, even where
  // the sources it was built from are still there), then the source tree (a
  // build run in place), then the configured install prefix.
  for (const std::string& p :
       {beside_executable(), std::string(MOELSP_SOURCE_MODEL), std::string(MOELSP_INSTALLED_MODEL)})
    if (!p.empty() && std::filesystem::is_regular_file(p, ec)) return p;
  return {};
}

}  // namespace moelsp
