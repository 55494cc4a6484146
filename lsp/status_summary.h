// moelsp/status rendered for people: every editor shows these texts rather
// than formatting the status's fields itself (four clients, one wording).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moelsp::lsp {

// The status in a line, for a message area or a status line:
// "moelsp ready (qwen3moe), 41.2 tokens/s; completions: 12 asked, 9 shown,
// 3 accepted, p50 180 ms [snoozed for 240 s more]".
std::string status_line(const nlohmann::json& st);
// The whole status as lines of text (markdown): state, model, plan,
// completions and where their time goes, KV cache, scheduler, index,
// controls, and the plan's reasons.
std::string status_summary(const nlohmann::json& st);

}  // namespace moelsp::lsp
