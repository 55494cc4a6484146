#include "lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "jinja/value.h"
#include "pystr.h"

namespace moelsp::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Jinja reads the source with universal newlines and, without
// keep_trailing_newline, without its last "\n".
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A string literal's body decoded as Python's "unicode-escape" codec does
// (what Jinja applies): known escapes are replaced, unknown ones kept.
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    // \x, \u, \U: exactly n hex digits follow.
    const auto hex = [&](size_t n) {
      if (i + n >= body.size()) return false;
      char32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = body[i + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
        v = v * 16 + char32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      py::append_utf8(out, v);
      i += n;
      return true;
    };
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
        if (!hex(2)) throw Error("invalid \\x escape in a string literal");
        break;
      case 'u':
        if (!hex(4)) throw Error("invalid \\u escape in a string literal");
        break;
      case 'U':
        if (!hex(8)) throw Error("invalid \\U escape in a string literal");
        break;
      default:
        if (c >= '0' && c <= '7') {  // up to three octal digits
          char32_t v = char32_t(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + char32_t(body[++i] - '0');
          py::append_utf8(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const size_t tag = next_tag(pos_);
      std::string text = s_.substr(pos_, tag - pos_);
      if (tag == s_.size()) {
        emit_text(std::move(text), tag);
        break;
      }
      const char kind = s_[tag + 1];
      const char mod = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      strip_before_tag(text, kind, mod);
      emit_text(std::move(text), tag);
      advance_to(tag + 2 + (mod == '-' || mod == '+' ? 1 : 0));
      if (kind == '#') comment();
      else if (kind == '%' && raw_block()) continue;
      else tag_body(kind == '%');
    }
    push(Tok::Eof, "");
    return std::move(out_);
  }

 private:
  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the text being read starts a line
  std::vector<Token> out_;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(msg, line_); }

  void push(Tok t, std::string text) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.line = line_;
    out_.push_back(std::move(tok));
  }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_)
      if (s_[pos_] == '\n') ++line_;
  }

  // The next "{{", "{%" or "{#" at or after `from`, or the end.
  size_t next_tag(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1))
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    return s_.size();
  }

  // Pushes `text` (the source up to `end`, perhaps stripped) and moves to `end`.
  void emit_text(std::string text, size_t end) {
    if (!text.empty()) push(Tok::Text, std::move(text));
    advance_to(end);
  }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks drops
  // the indentation before a block or comment tag that starts its line.
  void strip_before_tag(std::string& text, char kind, char mod) const {
    if (mod == '-') {
      size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      text.resize(e);
      return;
    }
    if (mod == '+' || kind == '{') return;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text.size()) return;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (!is_ws(text[i])) return;
    text.resize(l_pos);
  }

  // After a tag's end: `-` eats all following whitespace, `+` nothing, a
  // plain block/comment end (trim_blocks) one newline.
  void after_tag_end(char mod, bool trim_newline) {
    if (mod == '-') {
      size_t p = pos_;
      while (p < s_.size() && is_ws(s_[p])) ++p;
      line_starting_ = p > pos_ && s_[p - 1] == '\n';
      advance_to(p);
      return;
    }
    line_starting_ = false;
    if (mod != '+' && trim_newline && pos_ < s_.size() && s_[pos_] == '\n') {
      advance_to(pos_ + 1);
      line_starting_ = true;
    }
  }

  void comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail("a comment ({# ... #}) is not closed");
    const char mod = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : '\0';
    advance_to(end + 2);
    after_tag_end(mod, true);
  }

  // {% raw %}…{% endraw %}: the body is text, untouched.
  bool raw_block() {
    size_t p = pos_;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && is_name_char(s_[p + 3]))) return false;
    p += 3;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    const char end_mod = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : '\0';
    if (end_mod) ++p;
    if (s_.compare(p, 2, "%}") != 0) fail("expected '%}' after 'raw'");
    advance_to(p + 2);
    line_starting_ = false;
    if (end_mod == '-') after_tag_end('-', false);
    for (size_t q = s_.find("{%", pos_); q != std::string::npos; q = s_.find("{%", q + 2)) {
      size_t r = q + 2;
      const char mod = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : '\0';
      if (mod) ++r;
      while (r < s_.size() && is_ws(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_ws(s_[r])) ++r;
      const char close_mod = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : '\0';
      if (close_mod) ++r;
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string body = s_.substr(pos_, q - pos_);
      strip_before_tag(body, '%', mod);
      emit_text(std::move(body), q);
      advance_to(r + 2);
      after_tag_end(close_mod, true);
      return true;
    }
    fail("{% raw %} without {% endraw %}");
  }

  // The tokens inside {% … %} or {{ … }} up to the closing delimiter.
  void tag_body(bool block) {
    push(block ? Tok::BlockBegin : Tok::VarBegin, "");
    std::string brackets;  // open ( [ { — inside them '}}' and '%}' are operators
    while (true) {
      while (pos_ < s_.size() && is_ws(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) fail(block ? "a block tag ({% ... %}) is not closed" : "{{ ... }} is not closed");
      if (brackets.empty() && closes_tag(block)) return;
      const char c = s_[pos_];
      if (is_name_start(c)) name();
      else if (is_digit(c)) number();
      else if (c == '\'' || c == '"') string_literal(c);
      else op(brackets);
    }
  }

  bool closes_tag(bool block) {
    const char* close = block ? "%}" : "}}";
    char mod = '\0';
    size_t p = pos_;
    if (s_[p] == '-' || (block && s_[p] == '+')) mod = s_[p++];
    if (s_.compare(p, 2, close) != 0) return false;
    advance_to(p + 2);
    push(block ? Tok::BlockEnd : Tok::VarEnd, "");
    after_tag_end(mod, block);
    return true;
  }

  void name() {
    size_t e = pos_;
    while (e < s_.size() && is_name_char(s_[e])) ++e;
    push(Tok::Name, s_.substr(pos_, e - pos_));
    pos_ = e;
  }

  // Digits with optional '_' separators between them.
  size_t digits(size_t p) const {
    while (p < s_.size() && (is_digit(s_[p]) || (s_[p] == '_' && p + 1 < s_.size() && is_digit(s_[p + 1])))) ++p;
    return p;
  }

  void number() {
    size_t e = digits(pos_);
    bool is_float = false;
    const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';  // `x.0.1` is item 0 then 1
    if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t p = e + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        e = digits(p);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (s_[i] != '_') text += s_[i];
    push(is_float ? Tok::Float : Tok::Int, text);
    errno = 0;
    if (is_float) out_.back().float_value = std::strtod(text.c_str(), nullptr);
    else out_.back().int_value = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail("the number " + text + " is too large");
    pos_ = e;
  }

  void string_literal(char quote) {
    size_t p = pos_ + 1;
    while (p < s_.size() && s_[p] != quote) p += s_[p] == '\\' ? 2 : 1;
    if (p >= s_.size()) fail("a string literal is not closed");
    const int start_line = line_;
    std::string value = unescape(std::string_view(s_).substr(pos_ + 1, p - pos_ - 1));
    push(Tok::String, std::move(value));
    out_.back().line = start_line;
    advance_to(p + 1);
  }

  void op(std::string& brackets) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* two : kTwo)
      if (s_.compare(pos_, 2, two) == 0) {
        push(Tok::Op, two);
        pos_ += 2;
        return;
      }
    const char c = s_[pos_];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
      fail(std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open) fail(std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    push(Tok::Op, std::string(1, c));
    ++pos_;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize(source)).run(); }

}  // namespace moelsp::jinja
