// Files whose text never reaches a model: the `exclude` setting's globs
// (secrets: `.env` files, keys, password stores). A completion inside such a
// file offers nothing, other files' context leaves it out, and chat refuses
// it as context, so neither the embedded engine nor a remote backend sees
// its bytes. A glob without `/` matches the file's name; one with `/` the
// whole path, where `*` also matches `/` (fnmatch(3) without FNM_PATHNAME).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

// The default: a secret's usual names. `id_*` (the suggestion) would
// also hide source files such as `id_map.py`; these are SSH's key names.
inline constexpr std::string_view kDefaultExclude =
    ".env*,*.pem,*.key,*.p12,*.pfx,id_rsa*,id_dsa*,id_ecdsa*,id_ed25519*,*.kdbx,secrets.*,.netrc,.pgpass";

class ExcludeList {
 public:
  // Comma-separated globs (blanks around them ignored; empty ones skipped).
  explicit ExcludeList(std::string_view globs);
  // A document's URI (file:///…, percent-encoded) or a path.
  bool excluded(std::string_view uri_or_path) const;
  const std::vector<std::string>& globs() const { return globs_; }

 private:
  std::vector<std::string> globs_;
};

// The `exclude` setting's list: its globs, or the defaults when it is unset.
inline ExcludeList exclude_list(const std::optional<std::string>& setting) {
  return ExcludeList(setting ? std::string_view(*setting) : kDefaultExclude);
}

// The path a file:// URI names (percent-decoding applied); other URIs as they are.
std::string path_of_uri(std::string_view uri);

}  // namespace moelsp::assist
