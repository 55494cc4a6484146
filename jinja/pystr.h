// Python's string behaviour on UTF-8 text. Chat templates are Python
// programs in disguise: `len`, slicing and `strip(chars)` count code points,
// `str(1.0)` is "1.0", `repr` picks its quote, `json.dumps` escapes its own
// way. These helpers reproduce exactly what CPython does for the cases chat
// templates reach; case mapping is ASCII-only (documented in
// docs/chat-templates.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::jinja::py {

// Code points, decoded leniently: a byte that does not start a valid
// sequence stands for itself, so any input round-trips through encode().
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t length(std::string_view s);  // in code points

bool is_space(char32_t c);  // str.isspace()

// float.__repr__: the shortest text that reads back as `d`.
std::string float_repr(double d);
// repr(str): single quotes unless the text holds ' and no ".
std::string repr(std::string_view s);
// json.dumps(str) with the given ensure_ascii.
std::string json_quote(std::string_view s, bool ensure_ascii);

// str.strip/lstrip/rstrip; `chars` unset strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split/rsplit; `sep` unset splits on whitespace runs. maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s);
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// str.find/rfind/count over code-point positions; -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool from_right);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title
std::string swapcase(std::string_view s);

}  // namespace moelsp::jinja::py
