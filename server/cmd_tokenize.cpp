#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

namespace moelsp::cli {

int tokenize(const TokenizeOptions& o) {
  try {
    const auto f = gguf::File::open(o.model);
    const auto tok = Tokenizer::from_gguf(f);
    const std::string text = o.file.empty() ? o.prompt : read_text(o.file);
    const auto ids = tok->encode(text, {.add_special = o.add_special, .parse_special = !o.no_parse_special});
    if (o.ids_only) {
      std::puts(join_ids(ids).c_str());
    } else {
      for (TokenId id : ids) {
        // A byte-level token may hold part of a character: show such bytes as \xNN.
        const std::string raw = tok->piece(id, true);
        const bool whole = valid_utf8_prefix(raw) == raw.size();
        std::string piece;
        for (unsigned char c : raw) {
          if (c == '\n') piece += "\\n";
          else if (c == '\t') piece += "\\t";
          else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !whole)) piece += fmt::format("\\x{:02x}", c);
          else piece += char(c);
        }
        fmt::print("{:>7} -> '{}'\n", id, piece);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp tokenize: %s\n", e.what());
    return 1;
  }
}

int detokenize(const DetokenizeOptions& o) {
  try {
    const auto f = gguf::File::open(o.model);
    const auto tok = Tokenizer::from_gguf(f);
    const std::vector<TokenId> ids = parse_ids(o.ids, tok->n_vocab());
    const std::string text = tok->decode(ids, {.render_special = o.render_special});
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp detokenize: %s\n", e.what());
    return 1;
  }
}

}  // namespace moelsp::cli
