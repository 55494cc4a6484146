#include "engine/default_model.h"

#include <cstdlib>
#include <filesystem>

#include "util/install_path.h"

namespace moelsp {

std::string default_model_path() {
  if (const char* env = std::getenv("MOELSP_MODEL"); env && *env)
    return env;  // as given: a bad path gets a clear load error
  return embedded_model_path();
}

std::string embedded_model_path() {
  std::error_code ec;
  // Beside the executable first (an installed copy uses its own, even where
  // the sources it was built from are still there), then the source tree (a
  // build run in place), then the configured install prefix.
  for (const std::string& p : {beside_executable("share/moelsp/moelsp-default.gguf"), std::string(MOELSP_SOURCE_MODEL),
                               std::string(MOELSP_INSTALLED_MODEL)})
    if (!p.empty() && std::filesystem::is_regular_file(p, ec)) return p;
  return {};
}

}  // namespace moelsp
