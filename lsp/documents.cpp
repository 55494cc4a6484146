#include "documents.h"

namespace moelsp::lsp {

namespace {
// UTF-16 units of the UTF-8 sequence starting with byte c (4-byte sequences are surrogate pairs).
int utf16_units(unsigned char c) { return (c & 0xf8) == 0xf0 ? 2 : 1; }
size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
}
}  // namespace

size_t offset_of(const std::string& text, Position pos) {
  size_t i = 0;
  for (int line = 0; line < pos.line; ++line) {
    while (i < text.size() && text[i] != '\n' && text[i] != '\r') ++i;
    if (i >= text.size()) return text.size();
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    ++i;
  }
  int units = 0;
  while (i < text.size() && text[i] != '\n' && text[i] != '\r' && units < pos.character) {
    const auto c = static_cast<unsigned char>(text[i]);
    units += utf16_units(c);
    i = std::min(text.size(), i + utf8_len(c));
  }
  return i;
}

Position position_of(const std::string& text, size_t off) {
  off = std::min(off, text.size());
  Position p;
  size_t i = 0;
  while (i < off) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
        if (i + 1 == off) break;  // between \r and \n: still on this line
        ++i;
      }
      ++i;
      ++p.line;
      p.character = 0;
      continue;
    }
    p.character += utf16_units(c);
    i += utf8_len(c);
  }
  return p;
}

void DocumentStore::open(const std::string& uri, const std::string& language, int version, std::string text) {
  std::lock_guard lock(mu_);
  docs_[uri] = Entry{language, std::make_shared<std::string>(std::move(text)), version};
}

bool DocumentStore::change(const std::string& uri, int version, const std::optional<Range>& range,
                           const std::string& text) {
  std::lock_guard lock(mu_);
  auto it = docs_.find(uri);
  if (it == docs_.end()) return false;
  Entry& d = it->second;
  if (!range) {
    d.text = std::make_shared<std::string>(text);
  } else {
    // Snapshots are handed out only under mu_, so a count of 1 here means
    // no one else holds this text (a holder letting go meanwhile only makes
    // the copy unnecessary).
    if (d.text.use_count() > 1) d.text = std::make_shared<std::string>(*d.text);
    const size_t a = offset_of(*d.text, range->start), b = offset_of(*d.text, range->end);
    d.text->replace(std::min(a, b), (a < b ? b - a : 0), text);
  }
  d.version = version;
  return true;
}

size_t DocumentStore::close(const std::string& uri) {
  std::lock_guard lock(mu_);
  auto it = docs_.find(uri);
  if (it == docs_.end()) return 0;
  const size_t bytes = it->second.text->size();
  docs_.erase(it);
  return bytes;
}

std::optional<Document> DocumentStore::get(const std::string& uri) const {
  std::lock_guard lock(mu_);
  auto it = docs_.find(uri);
  if (it == docs_.end()) return std::nullopt;
  const Entry& e = it->second;
  return Document{uri, e.language, e.text, e.version};
}

}  // namespace moelsp::lsp
