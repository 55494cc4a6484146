// Where the embedded default model (models/moelsp-default.gguf, trained by
// tools/train-default-model) is found when no model is configured.
#pragma once

#include <string>

namespace moelsp {

// The first that exists of: $MOELSP_MODEL; the source tree's
// models/moelsp-default.gguf (a build run from its checkout); the installed
// <prefix>/share/moelsp/moelsp-default.gguf. Empty when none exists.
std::string default_model_path();

}  // namespace moelsp
