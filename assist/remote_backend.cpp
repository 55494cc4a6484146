// The remote backend: requests in each API's shape, answers streamed as
// server-sent events into the pipeline (HTTP itself is http_client.cpp).
#include "assist/remote_backend.h"

#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "assist/http_client.h"
#include "util/json_limits.h"

namespace moelsp::assist {

using json = nlohmann::json;

namespace {
// The remote server's JSON, or a discarded value when it is malformed or
// nests beyond the limits every JSON this process reads keeps to.
json parse_answer(const std::string& text) {
  if (!json_limit_problem(text).empty()) return json(json::value_t::discarded);
  return json::parse(text, nullptr, false);
}
}  // namespace

using Clock = std::chrono::steady_clock;

namespace {

json sampling_json(const SamplingParams& p) {
  return {{"temperature", p.temperature},
          {"top_p", p.top_p},
          {"top_k", p.top_k},
          {"min_p", p.min_p},
          {"repeat_penalty", p.repeat_penalty},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty},
          {"seed", p.seed}};
}

FinishReason reason_of(const json& r) {
  if (r.is_string() && r.get<std::string>() == "length") return FinishReason::Length;
  return FinishReason::Stop;
}

}  // namespace

std::string fim_template_prompt(const std::string& tmpl, const std::string& prefix, const std::string& suffix) {
  if (tmpl == "suffix") return "";
  std::string t = tmpl == "qwen"        ? "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
                  : tmpl == "deepseek"  ? "<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>"
                  : tmpl == "codellama" ? "<PRE> {prefix} <SUF>{suffix} <MID>"
                  : tmpl == "starcoder" ? "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
                  : tmpl == "codestral" ? "[SUFFIX]{suffix}[PREFIX]{prefix}"
                                        : tmpl;
  const size_t p = t.find("{prefix}"), s = t.find("{suffix}");
  if (p == std::string::npos || s == std::string::npos)
    throw std::runtime_error("backend.fimTemplate '" + tmpl +
                             "': not a preset (suffix, qwen, deepseek, codellama, starcoder, codestral) and has no "
                             "{prefix} and {suffix}");
  // Replace the later placeholder first so the earlier one's offset holds.
  if (p < s) {
    t.replace(s, 8, suffix);
    t.replace(p, 8, prefix);
  } else {
    t.replace(p, 8, prefix);
    t.replace(s, 8, suffix);
  }
  return t;
}

struct RemoteBackend::Impl {
  RemoteOptions opt;
  std::unique_ptr<HttpClient> http;
  mutable std::mutex mu;
  std::string last_error;

  // POSTs `body` to `path`; each server-sent event's data (or a plain JSON
  // body, whole) goes to on_event, which returns false to stop reading.
  // Returns "" or the error.
  std::string post(const std::string& path, const json& body, const std::function<bool(const std::string&)>& on_event,
                   Ticket& ticket) {
    std::string err = post_once(path, body, on_event, ticket);
    std::lock_guard lock(mu);
    if (!err.empty() && !ticket.cancelled()) {
      if (err != last_error) spdlog::warn("remote backend {}: {}", opt.url, err);  // once per new failure
      last_error = err;
    } else if (err.empty() && !last_error.empty()) {
      spdlog::info("remote backend {}: answering again", opt.url);
      last_error.clear();
    }
    return err;
  }

  std::string post_once(const std::string& path, const json& body,
                        const std::function<bool(const std::string&)>& on_event, Ticket& ticket) {
    int status = 0;
    bool sse = false, go_on = true;
    std::string pending, whole;
    std::string err = http->post(
        path, body.dump(-1, ' ', false, json::error_handler_t::replace),
        [&](const HttpClient::Head& h) {
          status = h.status;
          sse = h.content_type.find("event-stream") != std::string::npos;
        },
        [&](std::string_view got) {
          if (!sse || status != 200) {
            whole += got;
            return true;
          }
          pending += got;
          // Events end at a blank line; each `data: ` line is one payload.
          for (size_t nl; go_on && (nl = pending.find('\n')) != std::string::npos;) {
            std::string line = pending.substr(0, nl);
            pending.erase(0, nl + 1);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.rfind("data:", 0) != 0) continue;
            std::string data = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
            if (data == "[DONE]") go_on = false;
            else go_on = on_event(data);
          }
          return go_on;
        },
        ticket);
    if (ticket.cancelled()) return "";
    if (status != 0 && status != 200) {
      const json e = parse_answer(whole);
      std::string msg = whole.substr(0, 300);
      if (e.is_object() && e.contains("error")) {
        const json& er = e["error"];
        msg = er.is_object() ? er.value("message", msg) : er.is_string() ? er.get<std::string>() : msg;
      }
      return "HTTP " + std::to_string(status) + " from " + path + ": " + msg;
    }
    if (!err.empty()) return err;
    if (!sse && !whole.empty()) on_event(whole);
    return "";
  }
};

RemoteBackend::RemoteBackend(RemoteOptions opt) : impl_(std::make_unique<Impl>()) {
  try {
    impl_->http = std::make_unique<HttpClient>(HttpClientOptions{.url = opt.url,
                                                                 .api_key = opt.api_key,
                                                                 .timeout_s = opt.timeout_s,
                                                                 .ca_file = opt.ca_file,
                                                                 .verify_tls = opt.verify_tls});
  } catch (const std::runtime_error& e) {  // a malformed URL: say which setting holds it
    if (std::string_view(e.what()).starts_with(opt.url))
      throw std::runtime_error("backend.url " + std::string(e.what()));
    throw;
  }
  if (opt.api != "openai" && opt.api != "llama.cpp")
    throw std::runtime_error("backend.api '" + opt.api + "': openai or llama.cpp");
  (void)fim_template_prompt(opt.fim_template, "", "");  // an unknown template is an error now, not per keystroke
  impl_->opt = std::move(opt);
}

RemoteBackend::~RemoteBackend() = default;

const RemoteOptions& RemoteBackend::options() const { return impl_->opt; }

std::string RemoteBackend::last_error() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_error;
}

namespace {

// Collects streamed text, enforcing the budget, the stop strings and
// should_stop on this side too (the server may not honour them all).
struct Collector {
  Generation g;
  // As the engine counts it: the generation budget runs from the first
  // piece of text (the prompt's time, and the network's, come before).
  Clock::time_point t0 = Clock::now(), t_first{};
  bool started = false;
  int64_t budget_ms = 0;
  std::vector<std::string> stop;
  std::function<bool(const std::string&)> should_stop;
  std::function<void(const std::string&)> on_text;

  bool add(const std::string& piece, const json& reason) {
    if (!started) {
      started = true;
      t_first = Clock::now();
      g.timings.prompt_ms = std::chrono::duration<double, std::milli>(t_first - t0).count();
    }
    if (!reason.is_null()) g.reason = reason_of(reason);
    if (piece.empty()) return reason.is_null();
    std::string text = piece;
    bool stopped = false;
    for (const auto& s : stop)
      if (const size_t at = (g.text + text).find(s); !s.empty() && at != std::string::npos) {
        text.resize(at >= g.text.size() ? at - g.text.size() : 0);
        stopped = true;
      }
    g.text += text;
    ++g.timings.n_generated;
    if (on_text && !text.empty()) on_text(text);
    if (stopped || (should_stop && should_stop(g.text))) {
      g.reason = FinishReason::Stop;
      return false;
    }
    if (budget_ms > 0 &&
        std::chrono::duration<double, std::milli>(Clock::now() - t_first).count() > double(budget_ms)) {
      g.reason = FinishReason::Timeout;
      return false;
    }
    return reason.is_null();
  }
  Generation finish(const std::string& err, Ticket& ticket) {
    g.timings.generate_ms = started ? std::chrono::duration<double, std::milli>(Clock::now() - t_first).count() : 0;
    if (ticket.cancelled()) g.reason = FinishReason::Cancelled;
    else if (!err.empty()) {
      g.reason = FinishReason::Error;
      g.error = "remote backend: " + err;
    }
    return g;
  }
};

// /v1/completions' stream events into the collector.
std::function<bool(const std::string&)> completion_events(Collector& c) {
  return [&c](const std::string& data) {
    const json e = parse_answer(data);
    if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) return true;
    const json& ch = e["choices"][0];
    return c.add(ch.value("text", std::string()), ch.value("finish_reason", json()));
  };
}

}  // namespace

Generation RemoteBackend::fim(const FimInput& in, Ticket& ticket) {
  const RemoteOptions& o = impl_->opt;
  Collector c;
  c.g.reason = FinishReason::Length;
  c.budget_ms = in.t_max_predict_ms;
  c.should_stop = in.should_stop;
  if (in.context.single_line) c.stop = {"\n"};
  json body = sampling_json(in.sampling);
  std::string err;
  if (o.api == "llama.cpp") {
    body.update({{"input_prefix", in.context.prefix},
                 {"input_suffix", in.context.suffix},
                 {"n_predict", in.max_tokens},
                 {"t_max_predict_ms", in.t_max_predict_ms},
                 {"cache_prompt", true},
                 {"stream", true}});
    if (in.context.single_line) body["stop"] = {"\n"};
    if (!in.context.repo.empty()) {  // llama-server formats them (its model's repo format, or comments)
      json extra = json::array();
      for (const Snippet& s : in.context.repo.snippets) extra.push_back({{"filename", s.path}, {"text", s.text}});
      body["input_extra"] = std::move(extra);
    }
    err = impl_->post(
        "/infill", body,
        [&](const std::string& data) {
          const json e = parse_answer(data);
          if (!e.is_object()) return true;
          const bool stop = e.value("stop", false);
          return c.add(e.value("content", std::string()), stop ? json("stop") : json()) && !stop;
        },
        ticket);
  } else {
    body.update({{"model", o.model}, {"max_tokens", in.max_tokens}, {"stream", true}});
    // Other files' code ahead: Qwen's repository format with its preset,
    // comment-headed snippets otherwise (repo_context.h).
    const RepoContext& repo = in.context.repo;
    const std::string context = repo.empty()               ? std::string()
                                : o.fim_template == "qwen" ? context_as_repo(repo, "<|repo_name|>", "<|file_sep|>")
                                                           : context_as_comments(repo);
    if (o.fim_template == "suffix") {
      body["prompt"] = context + in.context.prefix;
      body["suffix"] = in.context.suffix;
    } else if (o.fim_template == "qwen") {
      body["prompt"] = context + fim_template_prompt(o.fim_template, in.context.prefix, in.context.suffix);
    } else {
      body["prompt"] = fim_template_prompt(o.fim_template, context + in.context.prefix, in.context.suffix);
    }
    if (in.context.single_line) body["stop"] = {"\n"};
    err = impl_->post("/v1/completions", body, completion_events(c), ticket);
  }
  return c.finish(err, ticket);
}

Generation RemoteBackend::chat(const ChatInput& in, const std::function<void(const std::string&)>& on_text,
                               Ticket& ticket) {
  // The server counts the tokens: send the code whole up to a size that
  // fits any usual context, cut at a line end beyond it.
  constexpr size_t kMaxCodeBytes = 24000;
  std::string code = in.code;
  if (code.size() > kMaxCodeBytes) {
    const size_t nl = code.rfind('\n', kMaxCodeBytes);
    code = code.substr(0, nl == std::string::npos ? kMaxCodeBytes : nl) + "\n...";
  }
  const std::vector<ChatMessage> messages = in.with_code ? in.with_code(code) : in.messages;
  json msgs = json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  json body = sampling_json(in.sampling);
  body.update({{"model", impl_->opt.model}, {"messages", msgs}, {"max_tokens", in.max_tokens}, {"stream", true}});
  if (!in.stop.empty()) body["stop"] = in.stop;
  Collector c;
  c.on_text = on_text;
  c.stop = in.stop;
  const std::string err = impl_->post(
      "/v1/chat/completions", body,
      [&](const std::string& data) {
        const json e = parse_answer(data);
        if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) return true;
        const json& ch = e["choices"][0];
        std::string piece;
        if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") &&
            ch["delta"]["content"].is_string())
          piece = ch["delta"]["content"];
        return c.add(piece, ch.value("finish_reason", json()));
      },
      ticket);
  return c.finish(err, ticket);
}

Generation RemoteBackend::text(const TextInput& in, const std::function<void(const std::string&)>& on_text,
                               Ticket& ticket) {
  json body = sampling_json(in.sampling);
  body.update({{"model", impl_->opt.model}, {"max_tokens", in.max_tokens}, {"stream", true}});
  if (!in.prompt_tokens.empty()) body["prompt"] = in.prompt_tokens;
  else body["prompt"] = in.prompt;
  if (in.suffix) body["suffix"] = *in.suffix;
  if (!in.stop.empty()) body["stop"] = in.stop;
  Collector c;
  c.on_text = on_text;
  c.stop = in.stop;
  c.budget_ms = in.t_max_predict_ms;
  const std::string err = impl_->post("/v1/completions", body, completion_events(c), ticket);
  return c.finish(err, ticket);
}

}  // namespace moelsp::assist
