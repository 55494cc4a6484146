// libFuzzer target: the document store's incremental edits with UTF-16
// positions (surrogate pairs, CRLF, lone CR, positions past the end). The
// input is a text, then edits: each is 4 bytes of positions and a short text.
#include <cstdint>
#include <string>

#include "lsp/documents.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moelsp::lsp;
  if (size < 2) return 0;
  const size_t text_len = std::min<size_t>(data[0] * 4u, size - 1);
  std::string text(reinterpret_cast<const char*>(data + 1), text_len);
  DocumentStore docs;
  docs.open("file:///f", "text", 1, text);
  size_t i = 1 + text_len;
  int version = 2;
  while (i + 5 <= size) {
    const Range r{{data[i] % 8, data[i + 1] % 64}, {data[i + 2] % 8, data[i + 3] % 64}};
    const size_t n = std::min<size_t>(data[i + 4] % 8, size - (i + 5));
    const std::string insert(reinterpret_cast<const char*>(data + i + 5), n);
    const bool ordered =
        r.end.line > r.start.line || (r.end.line == r.start.line && r.end.character >= r.start.character);
    if (ordered) (void)docs.change("file:///f", version++, r, insert);
    i += 5 + n;
    const auto d = docs.get("file:///f");
    if (d) (void)position_of(*d->text, offset_of(*d->text, r.start));
  }
  return 0;
}
