// Small helpers shared by the subcommands.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/tokenizer.h"

namespace moelsp::cli {

// Token ids from arguments that hold one or more space/comma-separated ids.
inline std::vector<TokenId> parse_ids(const std::vector<std::string>& args, size_t n_vocab) {
  std::vector<TokenId> ids;
  for (std::string arg : args) {
    for (char& c : arg)
      if (c == ',' || c == '[' || c == ']') c = ' ';
    std::istringstream ss(arg);
    for (std::string word; ss >> word;) {
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || v < 0 || v >= (long long)n_vocab)
        throw std::runtime_error(fmt::format("'{}' is not a token id (the vocabulary has {} tokens)", word, n_vocab));
      ids.push_back(TokenId(v));
    }
  }
  return ids;
}

// The whole file as bytes; throws naming the file when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Ids space-separated on one line (the format --tokens and detokenize read).
inline std::string join_ids(const std::vector<TokenId>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  return line;
}

}  // namespace moelsp::cli
