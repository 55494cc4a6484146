// The assistant service every front end shares (the LSP today, the HTTP
// server next), with no protocol in it: the completion pipeline (context
// window → FIM prompt → backend → post-processing; a cache with type-through,
// superseded requests cancelled, debounce, local telemetry) and chat (system
// prompt, the code as context, streaming).
//
// Latency model: an answer from the cache (same context, or the user typed
// the first characters of the last suggestion) costs microseconds; otherwise
// the prompt mostly hits the engine's prefix cache (the text before the
// cursor changes only at its end), so the cost is the new tokens plus
// generation, bounded by the time budget.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "assist/backend.h"

namespace moelsp::assist {

struct CompletionSettings {
  int max_tokens = 64;
  int time_budget_ms = 1500;  // generation; the prompt gets 4×
  int debounce_ms = 0;        // wait before starting; a newer request cancels the wait
  int draft_tokens = 8;       // prompt lookup drafts per decode step (Request::draft_max); 0: off
  FimOrder fim_order = FimOrder::kModel;
};

struct CompletionQuery {
  std::string text;        // the document, or the excerpt of it a completion reads (query_at)
  size_t cursor = 0;       // byte offset of the cursor in `text`
  size_t text_offset = 0;  // where `text` starts in the document
  RepoContext repo;        // other files' code for the prompt (the workspace index's picks, /infill's input_extra)
  // Where `repo` comes from when it is worth computing: called (in place of
  // reading `repo`) only when the backend runs — not for an answer from the
  // cache, nor for a keystroke a newer one cancelled during the debounce.
  // A suggestion typed through costs no index query (it cost 1-2 ms each,
  // the p50 of typing with context on).
  std::function<RepoContext(const CompletionQuery&)> repo_for;
  bool invoked = false;  // the user asked: up to three alternatives, not from the cache
  int alternatives = 0;  // > 0: this many tries (the first greedy, the others sampled); 0: 3 if invoked, else 1
  CompletionSettings settings;
};

// The query for `cursor` (a byte offset) in a document of any size: `text`
// holds only the excerpt the completion reads (excerpt_bounds with the
// service's prefix and suffix budgets), and the context made from it is the
// whole document's.
CompletionQuery query_at(std::string_view document, size_t cursor);

struct CompletionAnswer {
  std::vector<std::string> texts;  // best first; may be empty (nothing sensible to offer)
  Timings timings;                 // the first generation's (none from the cache)
  double context_ms = 0;           // finding other files' code (CompletionQuery::repo_for)
  bool from_cache = false;
  bool cancelled = false;
  std::string error;
};

enum class ChatKind { Chat, Explain, Fix, Document };
// The question a command asks about its code ("Explain what this code
// does."): written here only; editors show the turn as chat_turn() spells it.
const char* command_question(ChatKind kind);
// The user's turn a command makes: its question with the code in a fence
// (what an editor keeps for a follow-up question; the model may see the
// code shortened to fit its context).
std::string command_turn(ChatKind kind, const std::string& code, const std::string& language);

struct ChatQuery {
  ChatKind kind = ChatKind::Chat;
  std::vector<ChatMessage> messages;  // the conversation so far (Chat); ignored by the others
  std::string code;                   // the selection or file, if any
  std::string language;               // the code's language, for its fence
  int max_tokens = 1024;
  std::string template_override;
  // HTTP clients send the whole conversation, their own system prompt
  // included, and their sampling settings: used as they are.
  bool as_given = false;
  std::string messages_json;     // ChatInput::messages_json: the conversation with all its fields (HTTP)
  ChatOptions template_options;  // tools, enable_thinking, further template variables
  std::string assistant_prefix;  // ChatInput::assistant_prefix
  std::function<void(const std::string& prompt)> on_prompt;  // ChatInput::on_prompt
  // gpt-oss: the harmony channels as generated, for a caller that parses
  // them itself (OutputParser with ToolSyntax::Harmony); else the answer is
  // the final channel and the rest `reasoning`.
  bool raw_channels = false;
  SamplingParams sampling = ChatInput::chat_sampling();
  std::vector<std::string> stop;
  LogprobRequest logprobs;
  OutputConstraint constraint;  // ChatInput::constraint
};

struct ChatAnswer {
  std::string text;       // the answer (gpt-oss: its final channel)
  std::string reasoning;  // gpt-oss: its analysis channel; empty for other models
  FinishReason reason = FinishReason::Length;
  double tokens_per_second = 0;
  std::string error;  // reason == Error
  ErrorKind error_kind = ErrorKind::Server;
  Timings timings;
  std::vector<TokenLogprob> logprobs;  // ChatQuery::logprobs.top ≥ 0
};

struct TelemetrySnapshot {
  int64_t requests = 0, cancelled = 0, shown = 0, accepted = 0, partially_accepted = 0, cache_hits = 0;
  int64_t prompt_tokens = 0, prompt_tokens_reused = 0;  // and the part the KV prefix cache supplied
  // Where answered completions' time went (sums over `timed` answers that
  // reached the model; the first, greedy try only): waiting for the engine,
  // the prompt's new tokens, decoding, and the rest of the answer's
  // latency (debounce, tokenization, post-processing, alternatives), of
  // which timed_context_ms found other files' code.
  int64_t timed = 0, timed_prompt_new = 0, timed_generated = 0;
  double timed_queue_ms = 0, timed_prompt_ms = 0, timed_generate_ms = 0, timed_total_ms = 0, timed_context_ms = 0;
  double latency_p50_ms = 0, latency_p95_ms = 0;
  size_t latency_samples = 0;
};

class Service {
 public:
  // The backend arrives when the model has loaded; until then completions are
  // empty and chats refused.
  void set_backend(std::shared_ptr<Backend> backend);
  std::shared_ptr<Backend> backend() const;
  // A second model for completions only (`completion.model`: a small, fast
  // one while a bigger one answers chats); null: completions use backend().
  void set_completion_backend(std::shared_ptr<Backend> backend);
  std::shared_ptr<Backend> completion_backend() const;  // that model, else backend()

  // Requests on one stream (the LSP: a document) supersede each other: a
  // newer ticket cancels the older. Release when the request has ended.
  void claim(const std::string& stream, const std::shared_ptr<Ticket>& ticket);
  void release(const std::string& stream, const std::shared_ptr<Ticket>& ticket);

  // Both block until the answer is complete (or cancelled through the ticket).
  CompletionAnswer complete(const CompletionQuery& q, Ticket& ticket);
  ChatAnswer chat(const ChatQuery& q, const std::function<void(const std::string& text)>& on_text, Ticket& ticket);
  // The prompt chat(q) would generate from; nullopt without a model or with
  // a remote backend (its server applies the template). Throws
  // ChatTemplateError when the template fails.
  std::optional<std::string> chat_prompt(const ChatQuery& q);
  // Tokens in a prompt (chat_prompt's); nullopt without a model or with a
  // remote backend.
  std::optional<int> count_tokens(const std::string& prompt) const;
  // How the backend's model writes tool calls (None without a model).
  ToolSyntax tool_syntax(const std::string& template_override) const;
  bool template_thinks(const std::string& template_override) const;  // Backend::template_thinks
  // Plain text continuation (no FIM, no template); error when no backend.
  Generation text(const TextInput& in, const std::function<void(const std::string& text)>& on_text, Ticket& ticket);

  // What the user did with suggestions (local only, never sent anywhere).
  void count_shown();
  void count_accepted();
  void count_partially_accepted();
  TelemetrySnapshot telemetry() const;

  bool busy() const { return busy_ > 0; }
  double last_tokens_per_second() const;
  // Called when the service turns busy or idle again, in order.
  std::function<void()> on_busy_change;

 private:
  static ChatInput chat_input(const ChatQuery& q);
  struct CacheEntry {
    std::string prefix, suffix, text;
  };
  void begin_busy();
  void end_busy(double tokens_per_second);
  std::optional<std::string> from_cache(const CompletionContext& ctx);
  void remember(const CompletionContext& ctx, const std::string& text);
  // complete()'s steps: the backend's answers (the greedy one, then sampled
  // alternatives), post-processed, into out; and the request's telemetry.
  void generate(const CompletionQuery& q, const CompletionContext& ctx, Backend& backend, Ticket& ticket,
                CompletionAnswer& out);
  void record(const CompletionAnswer& out, double total_ms);

  mutable std::mutex backend_mu_;
  std::shared_ptr<Backend> backend_, completion_backend_;

  std::mutex streams_mu_;
  std::map<std::string, std::shared_ptr<Ticket>> latest_;

  std::mutex cache_mu_;
  std::deque<CacheEntry> cache_;  // most recent first

  mutable std::mutex telemetry_mu_;
  TelemetrySnapshot counts_;
  std::vector<double> latency_ms_;  // the last 1000 completions
  double last_tps_ = 0;

  std::mutex busy_mu_;  // a busy/idle change and its callback go together, in order
  std::atomic<int> busy_{0};
};

}  // namespace moelsp::assist
