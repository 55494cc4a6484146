#include "pystr.h"

#include "jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace moelsp::jinja::py {

namespace {
// A byte that does not start a valid UTF-8 sequence decodes to U+DC80+byte
// (Python's "surrogateescape"), so encode() gives the same byte back.
constexpr char32_t kEscapeBase = 0xDC00;

bool is_escaped_byte(char32_t c) { return c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF; }

// The length of the valid sequence starting at s[i], or 0.
size_t sequence_length(std::string_view s, size_t i, char32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  if ((b & 0xE0) == 0xC0) n = 2;
  else if ((b & 0xF0) == 0xE0) n = 3;
  else if ((b & 0xF8) == 0xF0) n = 4;
  else return 0;
  cp = b & (0x7F >> n);  // the lead byte's payload bits
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

char hex_digit(unsigned v) { return "0123456789abcdef"[v & 15]; }

void append_hex(std::string& out, const char* prefix, char32_t c, int digits) {
  out += prefix;
  for (int i = digits - 1; i >= 0; --i) out += hex_digit(unsigned(c >> (4 * i)));
}

// Python's str.isprintable(), close enough for repr(): control, format,
// separator (other than ' '), surrogate and private-use characters are not.
bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0x1680 || c == 0x180E) return false;
  if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;
  return true;
}

bool in_set(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

// Code points before byte offset `pos` (valid UTF-8 assumed: continuation
// bytes are not counted).
int64_t code_points_before(std::string_view s, size_t pos) {
  int64_t n = 0;
  for (size_t i = 0; i < pos; ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++n;
  return n;
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (is_escaped_byte(c)) {
    out += char(c - kEscapeBase);
    return;
  }
  if (c < 0x80) {
    out += char(c);
    return;
  }
  // Lead byte, then 6 payload bits per continuation byte.
  const int tail = c < 0x800 ? 1 : c < 0x10000 ? 2 : 3;
  static constexpr unsigned char kLead[] = {0, 0xC0, 0xE0, 0xF0};
  out += char(kLead[tail] | (c >> (6 * tail)));
  for (int k = tail - 1; k >= 0; --k) out += char(0x80 | ((c >> (6 * k)) & 0x3F));
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t n = sequence_length(s, i, cp);
    if (n == 0) {
      out += kEscapeBase + static_cast<unsigned char>(s[i]);
      ++i;
    } else {
      out += cp;
      i += n;
    }
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) { return is_ascii(s) ? s.size() : decode(s).size(); }

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == ' ' || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then CPython's layout rule ('r' format):
  // fixed notation while -4 < decimal point position <= 16.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  const std::string_view sci(buf, size_t(res.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits += c;
  const int exp10 = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int point = exp10 + 1;  // digits before the decimal point
  std::string out = std::signbit(d) ? "-" : "";
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0.";
      out.append(size_t(-point), '0');
      out += digits;
    } else if (size_t(point) >= digits.size()) {
      out += digits;
      out.append(size_t(point) - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, size_t(point));
      out += '.';
      out.append(digits, size_t(point));
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1);
  }
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + e;
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (is_escaped_byte(c)) append_hex(out, "\\udc", c & 0xFF, 2);
    else if (is_printable(c)) append_utf8(out, c);
    else if (c < 0x100) append_hex(out, "\\x", c, 2);
    else if (c < 0x10000) append_hex(out, "\\u", c, 4);
    else append_hex(out, "\\U", c, 8);
  }
  return out + quote;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) append_hex(out, "\\u", c, 4);
        else if (c < 0x80 || !ensure_ascii || is_escaped_byte(c)) append_utf8(out, c);
        else if (c < 0x10000) append_hex(out, "\\u", c, 4);
        else {
          const char32_t v = c - 0x10000;
          append_hex(out, "\\u", 0xD800 + (v >> 10), 4);
          append_hex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
        }
    }
  }
  return out + "\"";
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  const auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    for (size_t at; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (at = s.find(*sep, start)) != s.npos;) {
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::u32string u = decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      size_t e = u.size();
      while (e > i && is_space(u[e - 1])) --e;
      out.push_back(encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    const size_t b = i;
    while (i < u.size() && !is_space(u[i])) ++i;
    out.push_back(encode(std::u32string_view(u).substr(b, i - b)));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;  // built from the right, reversed at the end
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == s.npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string u = decode(s);
    size_t i = u.size();
    while (true) {
      while (i > 0 && is_space(u[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t b = 0;
        while (b < i && is_space(u[b])) ++b;
        out.push_back(encode(std::u32string_view(u).substr(b, i - b)));
        break;
      }
      const size_t e = i;
      while (i > 0 && !is_space(u[i - 1])) --i;
      out.push_back(encode(std::u32string_view(u).substr(i, e - i)));
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s) {
  const std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (!is_line_break(u[i])) continue;
    out.push_back(encode(std::u32string_view(u).substr(start, i - start)));
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::u32string u = decode(s);
    const uint64_t n = count < 0 ? u.size() + 1 : std::min<uint64_t>(uint64_t(count), u.size() + 1);
    if (!to.empty() && n > kMaxValueBytes / to.size()) check_size(kMaxValueBytes + 1, "the replaced string");
    check_size(s.size() + n * to.size(), "the replaced string");
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) out += to, ++done;
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  if (to.size() > from.size()) {  // the size it grows to, checked before building it
    uint64_t n = 0;
    for (size_t at = s.find(from); at != s.npos && (count < 0 || int64_t(n) < count);
         at = s.find(from, at + from.size()))
      ++n;
    if (n && to.size() - from.size() > kMaxValueBytes / n) check_size(kMaxValueBytes + 1, "the replaced string");
    check_size(s.size() + n * (to.size() - from.size()), "the replaced string");
  }
  size_t start = 0;
  int64_t done = 0;
  for (size_t at; (count < 0 || done < count) && (at = s.find(from, start)) != s.npos; ++done) {
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(s.substr(start));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  return at == s.npos ? -1 : code_points_before(s, at);
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != s.npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_upper(c);
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::string title(std::string_view s) {
  // A letter after a non-letter starts a word. Non-ASCII bytes count as
  // letters that have no case (ASCII-only case mapping).
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    const bool non_ascii = static_cast<unsigned char>(c) >= 0x80;
    if (ascii_alpha(c)) c = prev_cased ? ascii_lower(c) : ascii_upper(c);
    prev_cased = ascii_alpha(c) || non_ascii;
  }
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = c >= 'a' && c <= 'z' ? ascii_upper(c) : ascii_lower(c);
  return out;
}

}  // namespace moelsp::jinja::py
