// Subcommands of the moelsp executable. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace moelsp::cli {

struct InspectOptions {
  std::string path;
  bool json = false;
  bool all_tensors = false;
};
int inspect(const InspectOptions& o);

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids_only = false;
  bool add_special = false;
  bool no_parse_special = false;
};
int tokenize(const TokenizeOptions& o);

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
  bool render_special = false;
};
int detokenize(const DetokenizeOptions& o);

}  // namespace moelsp::cli
