// The nesting scan of json_limits.h: brackets outside strings, a string's
// escapes skipped, so `"[[["` or `"\"["` count nothing.
#include "util/json_limits.h"

#include <fmt/format.h>

namespace moelsp {

std::string json_limit_problem(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return fmt::format("the JSON text is {} bytes, more than the limit of {}", text.size(), limits.max_bytes);
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > limits.max_depth)
          return fmt::format("the JSON nests deeper than {} levels (at byte {})", limits.max_depth, i);
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return {};
}

void check_json_limits(std::string_view text, const char* what, const JsonLimits& limits) {
  std::string problem = json_limit_problem(text, limits);
  if (!problem.empty()) throw JsonLimitError(std::string(what) + ": " + problem);
}

}  // namespace moelsp
