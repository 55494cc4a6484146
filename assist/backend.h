// What generates the text: a Backend. The service (service.h) decides what
// to ask — the FIM context, the limits, the chat's messages — and a backend
// turns that into tokens: the embedded engine (engine_backend.cpp) or a
// remote OpenAI-compatible or llama.cpp server (remote_backend.h, the
// `backend.url` setting). Both calls block until the
// answer ends; a Ticket cancels them from another thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "assist/completion.h"
#include "assist/tool_calls.h"
#include "engine/chat.h"
#include "engine/engine.h"

namespace moelsp::assist {

// One request in flight. cancel() from any thread ends it: the engine
// request it started, or the wait before it starts.
class Ticket {
 public:
  void cancel();
  bool cancelled() const { return cancelled_; }
  // Submits to the engine unless already cancelled.
  std::optional<Handle> submit(Engine& e, Request req, Callbacks cb = {});
  // What else cancel() must do (a remote backend closes its connection);
  // runs at once when already cancelled. Cleared by passing nullptr.
  void on_cancel(std::function<void()> fn);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::optional<Handle> handle_;
  std::function<void()> on_cancel_;
};

struct Generation {
  std::string text;
  FinishReason reason = FinishReason::Length;
  std::string error;  // FinishReason::Error
  ErrorKind error_kind = ErrorKind::Server;
  Timings timings;
  std::vector<TokenLogprob> logprobs;  // when asked for (logprobs ≥ 0; the embedded engine only)
};

// Asking for token log-probabilities (HTTP clients' `logprobs`): −1 none,
// N ≥ 0 each token's and its N most likely alternatives. on_logprob streams
// them, each just before on_text gives the text its token completes.
struct LogprobRequest {
  int top = -1;
  std::function<void(const TokenLogprob&)> on_logprob;
};

// A fill-in-the-middle generation: the cursor's context (extra files already
// ahead of the prefix), limits, and when to give up early.
struct FimInput {
  CompletionContext context;
  int max_tokens = 64;
  int64_t t_max_predict_ms = 0, t_max_prompt_ms = 0;
  SamplingParams sampling = SamplingParams::greedy();
  int draft_max = 0;  // prompt lookup drafts per step (Request::draft_max; greedy only)
  FimOrder order = FimOrder::kModel;
  std::function<bool(const std::string& text)> should_stop;  // e.g. a repetition loop
};

// A chat: the conversation asked for, and code that goes with it. The code
// is kept apart so the backend can shorten it (whole lines from its end) to
// fit the context; `with_code` puts it into the messages.
struct ChatInput {
  std::vector<ChatMessage> messages;  // system prompt first
  std::string code;
  std::function<std::vector<ChatMessage>(const std::string& code)> with_code;
  // The conversation as a JSON array of message objects with every field
  // the client sent (tool_calls, tool_call_id, reasoning_content, …): the
  // model's Jinja template reads it in place of `messages` when set (HTTP
  // chat completions); `messages` stays the role/content view of it.
  std::string messages_json;
  ChatOptions template_options;  // tools, enable_thinking, further template variables
  // Text the answer starts with, appended to the rendered prompt: the
  // opening of a tool call when the client forces one (tool_choice). The
  // generated text does not repeat it.
  std::string assistant_prefix;
  // Called with the rendered prompt (before assistant_prefix) just before
  // generation starts, on the generating thread: a caller learns, e.g.,
  // that the template opened the model's reasoning (<think>) for it.
  std::function<void(const std::string& prompt)> on_prompt;
  int max_tokens = 1024;
  std::string template_override;  // a built-in template the user chose instead of the model's own
  SamplingParams sampling = chat_sampling();
  std::vector<std::string> stop;
  LogprobRequest logprobs;
  OutputConstraint constraint;     // Request::constraint (the embedded engine only)
  int priority = Priority::kChat;  // completions go first for prompt budget and KV blocks
  static SamplingParams chat_sampling() {
    SamplingParams p;
    p.temperature = 0.3f;
    p.repeat_penalty = 1.1f;
    return p;
  }
};

// Plain text generation: a prompt (text with special tokens parsed, or
// token ids) continued as it is (HTTP /v1/completions, /completion).
struct TextInput {
  std::string prompt;
  std::vector<TokenId> prompt_tokens;  // used instead of `prompt` when not empty
  std::optional<std::string> suffix;   // fill in the middle: `prompt` is the prefix (the model's FIM tokens)
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  int64_t t_max_prompt_ms = 0, t_max_predict_ms = 0;
  bool ignore_eos = false;  // generate max_tokens (benchmarks; llama.cpp's field)
  LogprobRequest logprobs;
  OutputConstraint constraint;  // Request::constraint (the embedded engine only)
  int priority = Priority::kChat;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The prompt chat() would generate from (the conversation through the chat
  // template, fitted to the context); nullopt where another server applies
  // the template (a remote backend).
  virtual std::optional<std::string> chat_prompt(const ChatInput&) { return std::nullopt; }
  // Tokens in `prompt` as chat() would count them (special tokens parsed);
  // nullopt where another server tokenizes (a remote backend).
  virtual std::optional<int> count_tokens(const std::string& /*prompt*/) const { return std::nullopt; }
  virtual Generation fim(const FimInput& in, Ticket& ticket) = 0;
  // The tokens a FIM prompt may take beside an answer of `max_tokens`
  // (fim() fits the prompt to it); 0 where another server decides.
  virtual int fim_prompt_budget(int /*max_tokens*/) const { return 0; }
  virtual Generation chat(const ChatInput& in, const std::function<void(const std::string&)>& on_text,
                          Ticket& ticket) = 0;
  virtual Generation text(const TextInput& in, const std::function<void(const std::string&)>& on_text,
                          Ticket& ticket) = 0;
  // How the model writes tool calls, read off its chat template (None where
  // another server parses them, or with a built-in template override).
  virtual ToolSyntax tool_syntax(const std::string& /*template_override*/) const { return ToolSyntax::None; }
  // Whether the chat template knows <think> reasoning (a model that reasons
  // before it answers); false where another server applies the template.
  virtual bool template_thinks(const std::string& /*template_override*/) const { return false; }
};

// The embedded engine: FIM prompts from the model's FIM tokens, chat through
// the model's template, the code shortened to fit the context window.
class EngineBackend final : public Backend {
 public:
  explicit EngineBackend(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
  std::optional<std::string> chat_prompt(const ChatInput& in) override;  // throws ChatTemplateError
  std::optional<int> count_tokens(const std::string& prompt) const override;
  Generation fim(const FimInput& in, Ticket& ticket) override;
  int fim_prompt_budget(int max_tokens) const override;
  Generation chat(const ChatInput& in, const std::function<void(const std::string&)>& on_text, Ticket& ticket) override;
  Generation text(const TextInput& in, const std::function<void(const std::string&)>& on_text, Ticket& ticket) override;
  ToolSyntax tool_syntax(const std::string& template_override) const override;
  bool template_thinks(const std::string& template_override) const override;
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace moelsp::assist
