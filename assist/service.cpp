#include "assist/service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/harmony.h"

namespace moelsp::assist {

namespace {

using Clock = std::chrono::steady_clock;

// The suffix follows the prefix in the FIM prompt, so it is recomputed on every
// keystroke: keep it short (a few lines) and spend the budget on the prefix.
constexpr size_t kMaxPrefixBytes = 6000, kMaxSuffixBytes = 400;
constexpr size_t kCacheEntries = 64, kLatencySamples = 1000;

const char* kSystem =
    "You are moelsp, a concise coding assistant running locally in the user's editor. "
    "Answer with correct, idiomatic code and brief explanations.";

}  // namespace

void Service::set_backend(std::shared_ptr<Backend> backend) {
  std::lock_guard lock(backend_mu_);
  backend_ = std::move(backend);
}

std::shared_ptr<Backend> Service::backend() const {
  std::lock_guard lock(backend_mu_);
  return backend_;
}

void Service::set_completion_backend(std::shared_ptr<Backend> backend) {
  std::lock_guard lock(backend_mu_);
  completion_backend_ = std::move(backend);
}

std::shared_ptr<Backend> Service::completion_backend() const {
  std::lock_guard lock(backend_mu_);
  return completion_backend_ ? completion_backend_ : backend_;
}

void Service::claim(const std::string& stream, const std::shared_ptr<Ticket>& ticket) {
  std::lock_guard lock(streams_mu_);
  auto& latest = latest_[stream];
  if (latest && latest != ticket) latest->cancel();  // a newer request makes the older one moot
  latest = ticket;
}

void Service::release(const std::string& stream, const std::shared_ptr<Ticket>& ticket) {
  std::lock_guard lock(streams_mu_);
  if (auto it = latest_.find(stream); it != latest_.end() && it->second == ticket) latest_.erase(it);
}

std::optional<std::string> Service::from_cache(const CompletionContext& ctx) {
  std::lock_guard lock(cache_mu_);
  for (const auto& e : cache_) {
    if (e.suffix != ctx.suffix || ctx.prefix.size() < e.prefix.size() ||
        ctx.prefix.compare(0, e.prefix.size(), e.prefix) != 0)
      continue;
    // The same context, or the user typed the first characters of the suggestion.
    const std::string typed = ctx.prefix.substr(e.prefix.size());
    if (typed.size() < e.text.size() && e.text.compare(0, typed.size(), typed) == 0) return e.text.substr(typed.size());
  }
  return std::nullopt;
}

void Service::remember(const CompletionContext& ctx, const std::string& text) {
  std::lock_guard lock(cache_mu_);
  cache_.push_front({ctx.prefix, ctx.suffix, text});
  if (cache_.size() > kCacheEntries) cache_.pop_back();
}

CompletionQuery query_at(std::string_view document, size_t cursor) {
  cursor = std::min(cursor, document.size());
  const Excerpt e = excerpt_bounds(document, cursor, kMaxPrefixBytes, kMaxSuffixBytes);
  CompletionQuery q;
  q.text = std::string(document.substr(e.begin, e.end - e.begin));
  q.cursor = cursor - e.begin;
  q.text_offset = e.begin;
  return q;
}

namespace {

// What the backend is asked for a completion: FIM with the other files'
// code ahead, within the settings' token and time budgets.
FimInput fim_input(const CompletionQuery& q, const CompletionContext& ctx) {
  const CompletionSettings& s = q.settings;
  FimInput in;
  in.context = ctx;
  in.context.repo = q.repo_for ? q.repo_for(q) : q.repo;
  in.max_tokens = s.max_tokens;
  in.t_max_predict_ms = s.time_budget_ms;
  // The prompt may take 10× the generation budget (15 s by default): a
  // newly opened file's first prefill is long, and an answer after it is
  // worth more than none (a newer keystroke cancels the wait anyway).
  // Past that the answer is empty, but the prefill goes on in the
  // background (Request::finish_prompt), so the next keystroke is quick.
  in.t_max_prompt_ms = int64_t(s.time_budget_ms) * 10;
  in.draft_max = s.draft_tokens;  // the engine uses it for the greedy try only
  in.order = s.fim_order;
  // A repetition loop ends decoding as soon as a line of it is complete:
  // the post-processing would cut it anyway. So do the end of the line the
  // user is typing (line_end_at) and the end of the cursor's block.
  in.should_stop = [ctx](const std::string& t) {
    return degenerate_at(t, true) != std::string::npos || line_end_at(t, ctx) != std::string::npos ||
           block_end_at(t, ctx) != std::string::npos;
  };
  return in;
}

}  // namespace

CompletionAnswer Service::complete(const CompletionQuery& q, Ticket& ticket) {
  const auto t_start = Clock::now();
  {
    std::lock_guard lock(telemetry_mu_);
    ++counts_.requests;
  }
  CompletionAnswer out;
  const CompletionContext ctx = make_context(q.text, q.cursor, kMaxPrefixBytes, kMaxSuffixBytes, q.text_offset == 0);
  // 1. The cache (not for an explicit request: it wants alternatives).
  if (!q.invoked) {
    if (auto hit = from_cache(ctx)) {
      out.texts.push_back(*hit);
      out.from_cache = true;
    }
  }
  // 2. Debounce: wait, unless a newer keystroke cancels us meanwhile.
  if (!out.from_cache && q.settings.debounce_ms > 0) {
    const auto until = Clock::now() + std::chrono::milliseconds(q.settings.debounce_ms);
    while (Clock::now() < until && !ticket.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // 3. The backend (the completion model's when there is one).
  const auto backend = completion_backend();
  if (!out.from_cache && backend && !ticket.cancelled()) {
    generate(q, ctx, *backend, ticket, out);
    if (!out.texts.empty() && !ticket.cancelled()) remember(ctx, out.texts.front());
  }
  if (ticket.cancelled()) {
    std::lock_guard lock(telemetry_mu_);
    out.cancelled = true;
    ++counts_.cancelled;
    return out;
  }
  if (out.error.empty()) record(out, std::chrono::duration<double, std::milli>(Clock::now() - t_start).count());
  return out;
}

void Service::generate(const CompletionQuery& q, const CompletionContext& ctx, Backend& backend, Ticket& ticket,
                       CompletionAnswer& out) {
  const auto t_context = Clock::now();
  FimInput in = fim_input(q, ctx);
  out.context_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_context).count();
  const int alternatives = q.alternatives > 0 ? q.alternatives : q.invoked ? 3 : 1;
  begin_busy();
  double tps = 0;
  for (int k = 0; k < alternatives && !ticket.cancelled(); ++k) {
    if (k > 0) {  // alternatives: sampled, different seeds
      in.sampling = SamplingParams{};
      in.sampling.temperature = 0.7f;
      in.sampling.seed = uint64_t(k);
    }
    const Generation g = backend.fim(in, ticket);
    {
      std::lock_guard lock(telemetry_mu_);
      counts_.prompt_tokens += g.timings.n_prompt;
      counts_.prompt_tokens_reused += g.timings.n_prompt_cached;
    }
    if (g.reason == FinishReason::Error) {
      out.error = g.error;
      break;
    }
    if (g.reason == FinishReason::Cancelled) break;
    if (k == 0) out.timings = g.timings;
    if (g.timings.generate_tps() > 0) tps = g.timings.generate_tps();
    // Out of time or tokens in the middle of a line: that line is
    // unfinished, the ones before it are not.
    std::string raw = g.text;
    if (g.reason == FinishReason::Timeout || g.reason == FinishReason::Length)
      if (const size_t nl = raw.rfind('\n'); nl != std::string::npos) raw.resize(nl);
    std::string text = postprocess(raw, ctx);
    if (!text.empty() && std::find(out.texts.begin(), out.texts.end(), text) == out.texts.end())
      out.texts.push_back(text);
  }
  end_busy(tps);
}

void Service::record(const CompletionAnswer& out, double total_ms) {
  std::lock_guard lock(telemetry_mu_);
  if (out.from_cache) ++counts_.cache_hits;
  if (!out.from_cache && out.timings.n_prompt > 0) {
    ++counts_.timed;
    counts_.timed_prompt_new += out.timings.n_prompt - out.timings.n_prompt_cached;
    counts_.timed_generated += out.timings.n_generated;
    counts_.timed_queue_ms += out.timings.queue_ms;
    counts_.timed_prompt_ms += out.timings.prompt_ms;
    counts_.timed_generate_ms += out.timings.generate_ms;
    counts_.timed_total_ms += total_ms;
    counts_.timed_context_ms += out.context_ms;
  }
  latency_ms_.push_back(total_ms);
  if (latency_ms_.size() > kLatencySamples) latency_ms_.erase(latency_ms_.begin());
}

const char* command_question(ChatKind kind) {
  switch (kind) {
    case ChatKind::Explain: return "Explain what this code does.";
    case ChatKind::Fix: return "Find the bugs in this code and give a fixed version.";
    case ChatKind::Document: return "Write documentation comments for this code.";
    case ChatKind::Chat: break;
  }
  return "";
}

std::string command_turn(ChatKind kind, const std::string& code, const std::string& language) {
  std::string_view body = code;
  while (!body.empty() && body.back() == '\n') body.remove_suffix(1);  // (a selection of whole lines)
  return std::string(command_question(kind)) + "\n\n```" + language + "\n" + std::string(body) + "\n```";
}

ChatInput Service::chat_input(const ChatQuery& q) {
  // The conversation, with the code as context: a chat puts it ahead of the
  // last message, the commands after their question.
  std::vector<ChatMessage> asked = q.messages;
  if (q.kind != ChatKind::Chat) asked = {{"user", command_question(q.kind)}};
  ChatInput in;
  if (!q.as_given) in.messages = {{"system", kSystem}};
  in.messages.insert(in.messages.end(), asked.begin(), asked.end());
  if (q.kind == ChatKind::Chat) in.messages_json = q.messages_json;
  in.template_options = q.template_options;
  in.assistant_prefix = q.assistant_prefix;
  in.on_prompt = q.on_prompt;
  in.sampling = q.sampling;
  in.stop = q.stop;
  in.code = q.code;
  in.max_tokens = q.max_tokens;
  in.template_override = q.template_override;
  in.logprobs = q.logprobs;
  in.constraint = q.constraint;
  const bool has_code = !q.code.empty() && !asked.empty();
  if (has_code) {
    const std::string fence = "```" + q.language + "\n";
    const bool is_chat = q.kind == ChatKind::Chat;
    in.with_code = [base = in.messages, fence, is_chat](const std::string& code) {
      std::vector<ChatMessage> m = base;
      const std::string block = fence + code + "\n```";
      m.back().content = is_chat ? "Context:\n" + block + "\n\n" + m.back().content : m.back().content + "\n\n" + block;
      return m;
    };
  }
  return in;
}

std::optional<std::string> Service::chat_prompt(const ChatQuery& q) {
  const auto backend = this->backend();
  if (!backend) return std::nullopt;
  return backend->chat_prompt(chat_input(q));
}

std::optional<int> Service::count_tokens(const std::string& prompt) const {
  const auto backend = this->backend();
  return backend ? backend->count_tokens(prompt) : std::nullopt;
}

ToolSyntax Service::tool_syntax(const std::string& template_override) const {
  const auto backend = this->backend();
  return backend ? backend->tool_syntax(template_override) : ToolSyntax::None;
}

bool Service::template_thinks(const std::string& template_override) const {
  const auto backend = this->backend();
  return backend && backend->template_thinks(template_override);
}

ChatAnswer Service::chat(const ChatQuery& q, const std::function<void(const std::string&)>& on_text, Ticket& ticket) {
  ChatAnswer out;
  const auto backend = this->backend();
  if (!backend) {
    out.reason = FinishReason::Error;
    out.error = "the model is not loaded (see moelsp/status)";
    return out;
  }
  const ChatInput in = chat_input(q);
  // gpt-oss answers in harmony channels: only the final one is the answer,
  // streamed as it comes; the analysis is the reasoning (engine/harmony.h).
  // Other models' text passes through unchanged.
  HarmonyStream streamed;
  const auto relay = [&](const std::string& t) {
    const std::string shown = q.raw_channels ? t : streamed.push(t);
    if (!shown.empty() && on_text) on_text(shown);
  };
  begin_busy();
  const Generation g = backend->chat(in, relay, ticket);
  end_busy(g.timings.generate_tps());
  if (const std::string tail = q.raw_channels ? "" : streamed.finish(); !tail.empty() && on_text) on_text(tail);
  if (q.raw_channels) {
    out.text = g.text;
  } else {
    HarmonyStream whole;  // the result from the whole text, whatever the backend streamed
    whole.push(g.text);
    whole.finish();
    out.text = whole.answer();
    out.reasoning = whole.reasoning();
  }
  out.reason = ticket.cancelled() ? FinishReason::Cancelled : g.reason;
  out.error = g.error;
  out.error_kind = g.error_kind;
  out.tokens_per_second = g.timings.generate_tps();
  out.timings = g.timings;
  out.logprobs = g.logprobs;
  return out;
}

Generation Service::text(const TextInput& in, const std::function<void(const std::string&)>& on_text, Ticket& ticket) {
  const auto backend = this->backend();
  if (!backend) {
    Generation g;
    g.reason = FinishReason::Error;
    g.error = "the model is not loaded";
    return g;
  }
  begin_busy();
  Generation g = backend->text(in, on_text, ticket);
  end_busy(g.timings.generate_tps());
  if (ticket.cancelled()) g.reason = FinishReason::Cancelled;
  return g;
}

void Service::begin_busy() {
  std::lock_guard lock(busy_mu_);
  if (busy_.fetch_add(1) == 0 && on_busy_change) on_busy_change();
}

void Service::end_busy(double tokens_per_second) {
  if (tokens_per_second > 0) {
    std::lock_guard lock(telemetry_mu_);
    last_tps_ = tokens_per_second;
  }
  std::lock_guard lock(busy_mu_);
  if (busy_.fetch_sub(1) == 1 && on_busy_change) on_busy_change();
}

double Service::last_tokens_per_second() const {
  std::lock_guard lock(telemetry_mu_);
  return last_tps_;
}

void Service::count_shown() {
  std::lock_guard lock(telemetry_mu_);
  ++counts_.shown;
}
void Service::count_accepted() {
  std::lock_guard lock(telemetry_mu_);
  ++counts_.accepted;
}
void Service::count_partially_accepted() {
  std::lock_guard lock(telemetry_mu_);
  ++counts_.partially_accepted;
}

TelemetrySnapshot Service::telemetry() const {
  std::lock_guard lock(telemetry_mu_);
  TelemetrySnapshot t = counts_;
  std::vector<double> v = latency_ms_;
  std::sort(v.begin(), v.end());
  const auto pct = [&](double p) { return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(p * double(v.size())))]; };
  t.latency_p50_ms = pct(0.5);
  t.latency_p95_ms = pct(0.95);
  t.latency_samples = v.size();
  return t;
}

}  // namespace moelsp::assist
