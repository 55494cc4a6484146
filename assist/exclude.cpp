#include "exclude.h"

#include <fnmatch.h>

namespace moelsp::assist {

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string path_of_uri(std::string_view uri) {
  if (uri.substr(0, 7) != "file://") return std::string(uri);
  uri.remove_prefix(7);
  if (const size_t slash = uri.find('/'); slash != std::string_view::npos) uri.remove_prefix(slash);  // file://host/p
  std::string out;
  for (size_t i = 0; i < uri.size(); ++i) {
    if (uri[i] == '%' && i + 2 < uri.size() && hex(uri[i + 1]) >= 0 && hex(uri[i + 2]) >= 0) {
      out += char(hex(uri[i + 1]) * 16 + hex(uri[i + 2]));
      i += 2;
    } else {
      out += uri[i];
    }
  }
  return out;
}

ExcludeList::ExcludeList(std::string_view globs) {
  while (!globs.empty()) {
    const size_t comma = globs.find(',');
    const std::string_view g = trim(globs.substr(0, comma));
    if (!g.empty()) globs_.emplace_back(g);
    if (comma == std::string_view::npos) break;
    globs.remove_prefix(comma + 1);
  }
}

bool ExcludeList::excluded(std::string_view uri_or_path) const {
  const std::string path = path_of_uri(uri_or_path);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  for (const std::string& g : globs_) {
    const bool whole = g.find('/') != std::string::npos;
    if (fnmatch(g.c_str(), whole ? path.c_str() : name.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace moelsp::assist
