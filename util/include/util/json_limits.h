// Limits on JSON text the process reads from outside (HTTP bodies, LSP
// messages, config files, chat-template inputs, a remote backend's answers),
// checked on the text before any parser builds a value.
//
// Why before: nlohmann's parser is iterative, but copying, dumping and
// comparing a parsed value recurse once per level, and a connection
// thread's 8 MiB stack overflows near 50,000 levels — a 100 KB body of
// brackets would end the process. A scan of the raw text costs one pass of
// byte compares (~1 GB/s) and keeps every later recursion shallow.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moelsp {

struct JsonLimits {
  // Arrays and objects inside each other. Real requests nest ~15 deep (a
  // chat with tools and their JSON schemas); serde_json stops at 128 too.
  size_t max_depth = 128;
  size_t max_bytes = size_t(64) << 20;
};

inline constexpr JsonLimits kJsonLimits{};

class JsonLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Empty when `text` is within `limits`; otherwise what is exceeded, naming
// the limit ("the JSON nests deeper than 128 levels (at byte 4711)"). Only
// nesting and size are checked: malformed JSON is left to the parser.
std::string json_limit_problem(std::string_view text, const JsonLimits& limits = kJsonLimits);

// Throws JsonLimitError with json_limit_problem's text, prefixed by `what`.
void check_json_limits(std::string_view text, const char* what = "JSON", const JsonLimits& limits = kJsonLimits);

}  // namespace moelsp
