// Where the embedded default model (models/moelsp-default.gguf, trained by
// tools/train-default-model) is found when no model is configured.
#pragma once

#include <string>

namespace moelsp {

// The first that exists of: $MOELSP_MODEL; <the executable's
// dir>/../share/moelsp/moelsp-default.gguf (installed: a package, any prefix);
// the source tree's models/moelsp-default.gguf (a build run from its
// checkout); the configured <prefix>/share/moelsp/. Empty when none exists.
std::string default_model_path();
// The same without $MOELSP_MODEL: the embedded model's file itself (what
// serves while a model named by a hub reference is pulled).
std::string embedded_model_path();

}  // namespace moelsp
