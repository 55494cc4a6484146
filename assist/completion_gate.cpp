#include "assist/completion_gate.h"

#include <fmt/format.h>

namespace moelsp::assist {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

LanguageRules::LanguageRules(std::string_view rules) {
  while (!rules.empty()) {
    const size_t comma = rules.find(',');
    std::string_view r = trim(rules.substr(0, comma));
    rules = comma == std::string_view::npos ? std::string_view() : rules.substr(comma + 1);
    const bool on = r.empty() || r.front() != '!';
    if (!on) r = trim(r.substr(1));
    if (!r.empty()) rules_.push_back({std::string(r), on});
  }
}

bool LanguageRules::enabled(std::string_view language_id) const {
  std::optional<bool> any, own;
  for (const Rule& r : rules_) {
    if (r.id == "*") any = r.on;
    else if (!language_id.empty() && r.id == language_id) own = r.on;
  }
  return own.value_or(any.value_or(true));
}

std::string gate(const LanguageRules& languages, const GateInput& in) {
  if (in.invoked) return "";
  if (!languages.enabled(in.language_id))
    return fmt::format("completions are off for language \"{}\" (setting completion.languages)", in.language_id);
  if (in.snooze_left_ms > 0)
    return fmt::format("snoozed for {} s more (moelsp.snooze)", (in.snooze_left_ms + 999) / 1000);
  if (in.inline_kind && in.manual_only) return "manual mode: only requests the user makes (setting completion.trigger)";
  return "";
}

}  // namespace moelsp::assist
