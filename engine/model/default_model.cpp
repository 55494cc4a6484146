#include "engine/default_model.h"

#include <cstdlib>
#include <filesystem>

namespace moelsp {

std::string default_model_path() {
  if (const char* env = std::getenv("MOELSP_MODEL"); env && *env)
    return env;  // as given: a bad path gets a clear load error
  return embedded_model_path();
}

std::string embedded_model_path() {
  std::error_code ec;
  for (const char* p : {MOELSP_SOURCE_MODEL, MOELSP_INSTALLED_MODEL})
    if (std::filesystem::is_regular_file(p, ec)) return p;
  return {};
}

}  // namespace moelsp
