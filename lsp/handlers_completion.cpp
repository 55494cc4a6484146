// textDocument/inlineCompletion and textDocument/completion: the protocol's
// side only. The pipeline (context window, FIM prompt, cache, debounce,
// post-processing) is assist::Service::complete.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "assist/completion_gate.h"
#include "assist/exclude.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

// The identifier the cursor stands in (ASCII: as many UTF-16 units as bytes).
std::string word_before(const std::string& text, size_t cursor) {
  size_t i = std::min(cursor, text.size());
  while (i > 0 && assist::is_word_char(text[i - 1])) --i;
  return text.substr(i, std::min(cursor, text.size()) - i);
}

}  // namespace

void Server::Impl::on_completion(const CompletionParams& p, Reply reply) { complete(p, std::move(reply), false); }
void Server::Impl::on_inline_completion(const CompletionParams& p, Reply reply) { complete(p, std::move(reply), true); }

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t Server::Impl::snooze_left_ms() const {
  const int64_t now = steady_ms(), until = snooze_until_ms.load();
  return until > now ? until - now : 0;
}

void Server::Impl::snooze(const ExecuteCommandParams& p, Reply reply) {
  constexpr double kDefaultMinutes = 5;  // Copilot's snooze step
  const double minutes = p.command == "moelsp.resume" ? 0 : p.minutes.value_or(kDefaultMinutes);
  snooze_until_ms = minutes > 0 ? steady_ms() + int64_t(minutes * 60000.0) : 0;
  spdlog::info("completions: {}", minutes > 0 ? fmt::format("snoozed for {} min", minutes) : "resumed");
  reply(to_json(SnoozeResult{snooze_left_ms()}));
  send_status();  // status bars show it
}

namespace {

// The suggestions as inline items (after the popup's selected item, when
// there is one) or as classic completion items, as the result's JSON.
// Incomplete: the next keystroke changes the continuation, so clients ask again.
json completion_result(const std::vector<std::string>& texts, const Position& pos,
                       const std::optional<SelectedCompletionInfo>& selected, const std::string& word,
                       bool inline_kind) {
  const Range range = selected ? selected->range : Range{pos, pos};
  const std::string selected_text = selected ? selected->text : "";
  if (inline_kind) {
    InlineCompletionList list;
    for (const auto& text : texts)
      list.items.push_back({.insert_text = selected_text + text,
                            .range = range,
                            .command = Command{.title = "accepted", .command = "moelsp.accepted"}});
    return to_json(list);
  }
  CompletionList list{.is_incomplete = true, .items = {}};
  for (const auto& text : texts) {
    // Clients filter the list by the word before the cursor (Helix,
    // nvim-cmp, VS Code): an item that only continued it would be
    // filtered out, so it replaces the word with word + continuation.
    // (The document may have changed since the request: at most the line's start.)
    const size_t w = std::min(word.size(), size_t(std::max(0, pos.character)));
    const std::string full = word.substr(word.size() - w) + text;
    std::string label = full.substr(0, full.find('\n'));
    if (label.empty()) label = full;
    const Range word_range{{pos.line, pos.character - int(w)}, range.end};
    list.items.push_back({.label = label,
                          .kind = CompletionItemKind::Text,
                          .detail = "moelsp",
                          .filter_text = full,
                          .insert_text = full,
                          .text_edit = {.range = word_range, .new_text = full}});
  }
  return to_json(list);
}

// An answer with nothing in it.
json empty_result(bool inline_kind) {
  return inline_kind ? to_json(InlineCompletionList{}) : to_json(CompletionList{.is_incomplete = false, .items = {}});
}

}  // namespace

assist::CompletionQuery Server::Impl::completion_query(const QueryArgs& a) {
  const std::string& text = a.text;  // a snapshot, not a copy
  assist::CompletionQuery q = assist::query_at(text, offset_of(text, a.params.position));
  if (a.selected) {  // complete as if the selected item were already inserted
    const size_t sa = offset_of(text, a.selected->range.start), sb = offset_of(text, a.selected->range.end);
    // (The item's range is on the cursor's line, which the excerpt holds.)
    if (sa <= sb && sa >= q.text_offset && sb - q.text_offset <= q.text.size()) {
      q.text.replace(sa - q.text_offset, sb - sa, a.selected->text);
      q.cursor = sa - q.text_offset + a.selected->text.size();
    }
  }
  const Settings& s = a.settings;
  // Computed only when the model runs (assist::CompletionQuery::repo_for),
  // inside service.complete(), while the caller's arguments still live.
  q.repo_for = [this, &uri = a.params.uri, &s, &exclude = a.exclude, to_remote = a.to_remote](
                   const assist::CompletionQuery& query) { return repo_context(uri, query, s, exclude, to_remote); };
  q.invoked = a.invoked;
  q.settings = {*s.completion_max_tokens, *s.completion_time_budget_ms, *s.completion_debounce_ms,
                *s.completion_draft_tokens, assist::FimOrder::kModel};
  if (s.completion_fim_order)
    q.settings.fim_order = *s.completion_fim_order == "spm" ? assist::FimOrder::kSpm : assist::FimOrder::kPsm;
  return q;
}

void Server::Impl::complete(const CompletionParams& params, Reply reply, bool inline_kind) {
  const bool invoked = inline_kind && params.trigger_kind == InlineCompletionTriggerKind::Invoked;
  // The item selected in the client's completion popup: the suggestion must
  // start with it and replace its range.
  const std::optional<SelectedCompletionInfo> selected = inline_kind ? params.selected : std::nullopt;
  const Settings s = effective();
  const assist::ExcludeList exclude = assist::exclude_list(s.exclude);
  const bool to_remote = host.is_remote();
  // A secret's file: nothing of it goes to a model. A file .gitignore hides
  // (local configuration, often credentials) is completed by the embedded
  // engine, in this process, but never sent to a remote server.
  if (exclude.excluded(params.uri) || (to_remote && index.git_ignored(assist::path_of_uri(params.uri)))) {
    spdlog::debug("completion: {} is excluded (setting exclude, or .gitignore with a remote backend); no suggestion",
                  params.uri);
    return reply(empty_result(inline_kind));
  }
  // The user's controls: languages, manual mode, a snooze (assist/completion_gate.h).
  const auto open_doc = docs.get(params.uri);
  const std::string why = assist::gate(assist::language_rules(s.completion_languages),
                                       {.language_id = open_doc ? std::string_view(open_doc->language) : "",
                                        .inline_kind = inline_kind,
                                        .invoked = invoked,
                                        .manual_only = s.completion_trigger.value_or("automatic") == "manual",
                                        .snooze_left_ms = snooze_left_ms()});
  if (!why.empty()) {
    spdlog::debug("completion: {}; no suggestion", why);
    return reply(empty_result(inline_kind));
  }
  auto ticket = track(reply.id());
  service.claim(params.uri, ticket);  // a newer completion for the same document makes this one moot
  enqueue(Lane::Completion, reply,
          [this, params, reply, ticket, s, exclude, inline_kind, invoked, selected, to_remote] {
            const Position pos = params.position;
            assist::CompletionAnswer answer;
            std::string word;  // classic items replace it
            try {
              const auto doc = docs.get(params.uri);
              if (!doc) throw std::runtime_error("document not open: " + params.uri);
              const assist::CompletionQuery q = completion_query({.params = params,
                                                                  .text = *doc->text,
                                                                  .selected = selected,
                                                                  .settings = s,
                                                                  .exclude = exclude,
                                                                  .to_remote = to_remote,
                                                                  .invoked = invoked});
              word = word_before(q.text, q.cursor);
              answer = service.complete(q, *ticket);
            } catch (const std::exception& e) {
              answer.error = e.what();
            }
            untrack(reply.id(), ticket);
            service.release(params.uri, ticket);
            if (answer.cancelled || ticket->cancelled()) return reply.error(kRequestCancelled, "request cancelled");
            if (!answer.error.empty()) return reply.error(kInternalError, answer.error);
            reply(completion_result(answer.texts, pos, selected, word, inline_kind));
          });
}

}  // namespace moelsp::lsp
