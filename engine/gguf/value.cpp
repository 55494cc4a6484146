#include <fmt/format.h>

#include "engine/gguf.h"

namespace moelsp::gguf {

std::string Value::to_string(size_t max_items) const {
  return std::visit(
      [&](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          std::string s = x.size() > 80 ? x.substr(0, 77) + "..." : x;
          std::string out = "\"";
          for (unsigned char ch : s) {
            if (ch == '\n') out += "\\n";
            else if (ch == '"') out += "\\\"";
            else if (ch < 0x20) out += fmt::format("\\x{:02x}", ch);
            else out += char(ch);
          }
          return out + "\"";
        } else if constexpr (std::is_same_v<X, Array>) {
          std::string out = fmt::format("[{} × {}: ", x.items.size(), value_type_name(x.elem));
          for (size_t i = 0; i < x.items.size() && i < max_items; ++i)
            out += (i ? ", " : "") + x.items[i].to_string(max_items);
          if (x.items.size() > max_items) out += ", ...";
          return out + "]";
        } else if constexpr (std::is_same_v<X, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<X, uint8_t> || std::is_same_v<X, int8_t>) {
          return std::to_string(int(x));
        } else {
          return fmt::format("{}", x);
        }
      },
      v);
}

}  // namespace moelsp::gguf
