// Open documents and LSP positions. LSP counts characters in UTF-16 code
// units (a character outside the BMP is two) and lines end at \n, \r\n or \r;
// we store UTF-8 and convert at the edges.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moelsp::lsp {

struct Position {
  int line = 0;
  int character = 0;  // UTF-16 code units
};

struct Range {
  Position start, end;
};

// Byte offset of `pos` in `text`; a character past the end of its line clamps
// to the line end, a line past the end clamps to the end of the text.
size_t offset_of(const std::string& text, Position pos);
// The position of byte offset `off` (clamped to the text).
Position position_of(const std::string& text, size_t off);

// A document as get() saw it. `text` is a snapshot shared with the store:
// getting it copies nothing, and a later edit does not change it (the store
// copies the text only when an edit arrives while a snapshot is held —
// copy-on-write —, so a 20 MB file costs one copy per overlapping
// completion at most, not one per keystroke or per request).
struct Document {
  std::string uri, language;
  std::shared_ptr<const std::string> text;
  int version = 0;
};

class DocumentStore {
 public:
  void open(const std::string& uri, const std::string& language, int version, std::string text);
  // A full replacement (no range) or an edit of `range`. False if the document is not open.
  bool change(const std::string& uri, int version, const std::optional<Range>& range, const std::string& text);
  // The size of the text closed (0 if it was not open).
  size_t close(const std::string& uri);
  std::optional<Document> get(const std::string& uri) const;

 private:
  struct Entry {
    std::string language;
    std::shared_ptr<std::string> text;  // never null
    int version = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> docs_;
};

}  // namespace moelsp::lsp
