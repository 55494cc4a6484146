// Which completion requests a model never sees: the user's own controls,
// applied in the server so that every client (Helix and Emacs without a
// plugin of ours included) gets them the same way.
//  - per language (`completion.languages`): rules as in Copilot's
//    `github.copilot.enable` object, written as a list: `*` or `!*` for every
//    language, `id` or `!id` for one LSP languageId; an id's own rule wins
//    over `*`, a later rule over an earlier one for the same id;
//  - manual only (`completion.trigger = manual`): automatic inline requests
//    (triggerKind 2, sent as the user types) get nothing;
//  - a snooze: automatic requests get nothing until a moment passes
//    (workspace/executeCommand moelsp.snooze).
// A request the user made on purpose (inline triggerKind 1: VS Code's
// Alt+\, the clients' "suggest" keys) is always answered: asking is the
// point of turning automatic suggestions off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

// Prose, plain text and commit messages: VS Code's, Neovim's/Vim's and
// Helix's ids for them.
inline constexpr std::string_view kDefaultLanguages = "*,!markdown,!plaintext,!text,!scminput,!git-commit,!gitcommit";

class LanguageRules {
 public:
  // Comma-separated rules (blanks around them ignored, empty ones skipped).
  explicit LanguageRules(std::string_view rules);
  // Completions in a document of this languageId ("" when the client sent none).
  bool enabled(std::string_view language_id) const;

 private:
  struct Rule {
    std::string id;  // "*": every language
    bool on = true;
  };
  std::vector<Rule> rules_;
};

inline LanguageRules language_rules(const std::optional<std::string>& setting) {
  return LanguageRules(setting ? std::string_view(*setting) : kDefaultLanguages);
}

struct GateInput {
  std::string_view language_id;
  bool inline_kind = true;     // textDocument/inlineCompletion (else the classic list)
  bool invoked = false;        // inline triggerKind 1: the user asked
  bool manual_only = false;    // completion.trigger = manual
  int64_t snooze_left_ms = 0;  // > 0 while snoozed
};

// Why a request gets no suggestion without asking a model ("" when it goes
// ahead). The classic list (textDocument/completion) comes on the client's
// own schedule (Helix asks as the user types, and again on its key), so
// manual-only mode leaves it alone; languages and a snooze apply.
std::string gate(const LanguageRules& languages, const GateInput& in);

}  // namespace moelsp::assist
