#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "options.h"

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

void add_tokenize(CLI::App& app, std::vector<Command>& out) {
  auto tk = std::make_shared<TokenizeOptions>();
  auto* c = app.add_subcommand("tokenize", "Print the tokens of a text");
  c->add_option("-m,--model", tk->model, "GGUF file with a tokenizer (default: the embedded model)");
  auto* p = c->add_option("-p,--prompt", tk->prompt, "Text to tokenize");
  auto* f = c->add_option("-f,--file", tk->file, "File whose contents to tokenize")->check(kFile);
  p->excludes(f);
  c->add_flag("--ids", tk->ids_only, "Print only the ids, space-separated, on one line");
  c->add_flag("--add-special", tk->add_special, "Add BOS/EOS where the model asks for them");
  c->add_flag("--no-parse-special", tk->no_parse_special, "Treat special-token text (e.g. <|im_end|>) as plain text");
  out.push_back({c, [tk, c, p, f] {
                   if (!default_model(tk->model, c)) return 2;
                   if (p->count() == 0 && f->count() == 0) {
                     std::fprintf(stderr, "moelsp tokenize: give the text with -p TEXT or -f FILE\n");
                     return 2;
                   }
                   return tokenize(*tk);
                 }});

  auto dt = std::make_shared<DetokenizeOptions>();
  auto* d = app.add_subcommand("detokenize", "Print the text of token ids");
  d->add_option("-m,--model", dt->model, "GGUF file with a tokenizer (default: the embedded model)");
  d->add_option("ids", dt->ids, "Token ids (separate arguments or one space-separated string)")->required();
  d->add_flag("--render-special", dt->render_special, "Print control tokens' text");
  out.push_back({d, [dt, d] { return default_model(dt->model, d) ? detokenize(*dt) : 2; }});
}

}  // namespace moelsp::cli
