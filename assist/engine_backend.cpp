// The embedded engine as a Backend: FIM prompts from the model's FIM tokens,
// chat through the model's template with the code fitted to the context.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "assist/backend.h"
#include "engine/gguf.h"
#include "engine/model.h"

namespace moelsp::assist {

void Ticket::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (handle_) handle_->cancel();
  if (on_cancel_) on_cancel_();
}

void Ticket::on_cancel(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  on_cancel_ = std::move(fn);
  if (cancelled_ && on_cancel_) on_cancel_();
}

std::optional<Handle> Ticket::submit(Engine& e, Request req, Callbacks cb) {
  std::lock_guard lock(mu_);
  if (cancelled_) return std::nullopt;
  handle_ = e.submit(std::move(req), std::move(cb));
  return handle_;
}

namespace {
Generation from_result(const Result& r) { return {r.text, r.reason, r.error, r.error_kind, r.timings, r.logprobs}; }
Generation cancelled() {
  Generation g;
  g.reason = FinishReason::Cancelled;
  return g;
}

// FIM prompt tokens that leave room in the context for the answer.
int prompt_budget(const Engine& eng, int max_tokens) { return std::max(eng.n_ctx() - max_tokens, eng.n_ctx() / 2); }
std::vector<TokenId> fim_tokens(const Engine& eng, const CompletionContext& ctx, int max_tokens, FimOrder order,
                                std::string* heal = nullptr) {
  const size_t budget = size_t(prompt_budget(eng, max_tokens));
  return fim_prompt(eng.model().tokenizer(), ctx, budget, order, heal, budget / 2);
}

// Submits through the ticket and waits; the text streams to on_text.
Generation run(Engine& eng, Request req, const std::function<void(const std::string&)>& on_text,
               std::function<bool(const std::string&)> should_stop, Ticket& ticket, const LogprobRequest& lp = {}) {
  Callbacks cb;
  req.logprobs = lp.top;
  cb.on_logprob = lp.on_logprob;
  if (on_text) cb.on_token = [on_text](TokenId, const std::string& text) { on_text(text); };
  cb.should_stop = std::move(should_stop);
  auto h = ticket.submit(eng, std::move(req), std::move(cb));
  return h ? from_result(h->wait()) : cancelled();
}
}  // namespace

int EngineBackend::fim_prompt_budget(int max_tokens) const { return prompt_budget(*engine_, max_tokens); }

Generation EngineBackend::fim(const FimInput& in, Ticket& ticket) {
  Request req;
  req.prompt_tokens = fim_tokens(*engine_, in.context, in.max_tokens, in.order, &req.heal);
  req.max_tokens = in.max_tokens;
  req.t_max_predict_ms = in.t_max_predict_ms;
  req.t_max_prompt_ms = in.t_max_prompt_ms;
  req.finish_prompt = true;  // the next keystroke's prompt starts where this one got to
  req.sampling = in.sampling;
  req.draft_max = in.draft_max;
  req.priority = Priority::kCompletion;  // before chat
  if (in.context.single_line) req.stop = {"\n"};
  return run(*engine_, std::move(req), nullptr, in.should_stop, ticket);
}

namespace {
// The chat prompt fitted to the context, keeping a quarter (or max_tokens,
// if less) for the answer: the code loses whole lines from its end first.
std::string fitted_prompt(Engine& eng, const ChatTemplate& tmpl, const ChatInput& in) {
  const Tokenizer& tok = eng.model().tokenizer();
  const int budget = eng.n_ctx() - std::min(in.max_tokens, eng.n_ctx() / 4);
  const auto prompt = [&](const std::string& code) {
    if (!in.messages_json.empty()) return tmpl.apply_json(in.messages_json, in.template_options);
    return tmpl.apply(in.with_code ? in.with_code(code) : in.messages, in.template_options);
  };
  const auto fits = [&](const std::string& code) {
    const auto ids = tok.encode(prompt(code), {.add_special = true, .parse_special = true});
    return int(ids.size()) <= budget;
  };
  const std::string& code = in.code;
  if (code.empty() || fits(code)) return prompt(code);
  std::vector<size_t> ends;  // line ends: candidate cut points
  for (size_t i = code.find('\n'); i != std::string::npos; i = code.find('\n', i + 1)) ends.push_back(i);
  size_t lo = 0, hi = ends.size();  // keep ends[k-1] lines: the largest k that fits
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (fits(code.substr(0, ends[mid - 1]) + "\n...")) lo = mid;
    else hi = mid - 1;
  }
  const std::string shown = lo > 0 ? code.substr(0, ends[lo - 1]) + "\n..." : "...";
  spdlog::info("chat: code context cut to {} of {} bytes to fit the context of {} tokens", shown.size(), code.size(),
               eng.n_ctx());
  return prompt(shown);
}
}  // namespace

std::optional<std::string> EngineBackend::chat_prompt(const ChatInput& in) {
  Engine& eng = *engine_;
  return fitted_prompt(eng, ChatTemplate::for_model(eng.model().file(), eng.model().tokenizer(), in.template_override),
                       in) +
         in.assistant_prefix;
}

std::optional<int> EngineBackend::count_tokens(const std::string& prompt) const {
  return int(engine_->model().tokenizer().encode(prompt, {.add_special = true, .parse_special = true}).size());
}

Generation EngineBackend::chat(const ChatInput& in, const std::function<void(const std::string&)>& on_text,
                               Ticket& ticket) {
  Engine& eng = *engine_;
  Generation g;
  Request req;
  try {
    // The model's template, or the built-in one the user chose; either may
    // refuse the conversation (raise_exception), which ends the chat here.
    const ChatTemplate tmpl =
        ChatTemplate::for_model(eng.model().file(), eng.model().tokenizer(), in.template_override);
    req.prompt = fitted_prompt(eng, tmpl, in);
    if (in.on_prompt) in.on_prompt(req.prompt);
    req.prompt += in.assistant_prefix;
  } catch (const ChatTemplateError& e) {
    g.reason = FinishReason::Error;
    g.error = std::string(e.what()) + " (setting: chat.template)";
    g.error_kind = ErrorKind::Request;  // the conversation as sent cannot be rendered
    return g;
  } catch (const std::exception& e) {
    g.reason = FinishReason::Error;
    g.error = e.what();
    return g;
  }
  req.max_tokens = in.max_tokens;
  req.sampling = in.sampling;
  req.stop = in.stop;
  req.priority = in.priority;
  req.constraint = in.constraint;
  req.store_prompt = true;  // a later session sends the same system prompt and tools
  return run(eng, std::move(req), on_text, nullptr, ticket, in.logprobs);
}

// The Jinja text of the template a chat uses: a file given instead of the
// model's, or the model's own; "" for a built-in template (they show no
// tools and no reasoning) or a file that cannot be read (the chat says why).
namespace {
std::string template_text(const Engine& e, const std::string& template_override) {
  if (template_override.ends_with(".jinja")) {
    try {
      return read_template_file(template_override);
    } catch (const ChatTemplateError&) {
      return "";
    }
  }
  if (!template_override.empty()) return "";
  return e.model().file().get_or<std::string>("tokenizer.chat_template", "");
}
}  // namespace

ToolSyntax EngineBackend::tool_syntax(const std::string& template_override) const {
  return tool_syntax_for_template(template_text(*engine_, template_override));
}

bool EngineBackend::template_thinks(const std::string& template_override) const {
  return template_text(*engine_, template_override).find("<think>") != std::string::npos;
}

Generation EngineBackend::text(const TextInput& in, const std::function<void(const std::string&)>& on_text,
                               Ticket& ticket) {
  // Token ids from a client: one out of range would fail the whole batch it runs in.
  const size_t n_vocab = engine_->model().tokenizer().n_vocab();
  for (TokenId id : in.prompt_tokens)
    if (id < 0 || size_t(id) >= n_vocab) {
      Generation g;
      g.reason = FinishReason::Error;
      g.error_kind = ErrorKind::Request;
      g.error =
          "token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")";
      return g;
    }
  Request req;
  req.prompt = in.prompt;
  req.prompt_tokens = in.prompt_tokens;
  if (in.suffix)
    req.prompt_tokens =
        fim_tokens(*engine_, {.prefix = in.prompt, .suffix = *in.suffix, .repo = {}}, in.max_tokens, FimOrder::kModel);
  req.max_tokens = in.max_tokens;
  req.sampling = in.sampling;
  req.stop = in.stop;
  req.t_max_prompt_ms = in.t_max_prompt_ms;
  req.t_max_predict_ms = in.t_max_predict_ms;
  req.ignore_eos = in.ignore_eos;
  req.priority = in.priority;
  req.constraint = in.constraint;
  req.store_prompt = !in.suffix;  // not fill-in-the-middle, whose prompt changes with every keystroke
  return run(*engine_, std::move(req), on_text, nullptr, ticket, in.logprobs);
}

}  // namespace moelsp::assist
