// The remote backend over HTTP/1.1 (Boost.Beast, synchronous): one
// connection per request, a streamed response read as it arrives, and the
// ticket's cancel closing the socket so a blocked read returns at once.
#include "assist/remote_backend.h"

// GCC 12 with sanitizers warns that Beast's parser (boost::optional in
// basic_parser::content_length) "may be used uninitialized": a false positive
// inside the library, which -Werror would turn into a failed build.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace moelsp::assist {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Url {
  std::string host, port, base;
};

Url parse_url(const std::string& u) {
  if (u.rfind("https://", 0) == 0)
    throw std::runtime_error("backend.url " + u + ": https is not supported yet; use http:// (e.g. through a local TLS proxy)");
  if (u.rfind("http://", 0) != 0) throw std::runtime_error("backend.url " + u + ": must start with http://");
  std::string rest = u.substr(7);
  Url url;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.base = rest.substr(slash);
    rest.resize(slash);
    while (!url.base.empty() && url.base.back() == '/') url.base.pop_back();
  }
  const size_t colon = rest.rfind(':');
  url.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  url.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (url.host.empty()) throw std::runtime_error("backend.url " + u + ": no host");
  return url;
}

json sampling_json(const SamplingParams& p) {
  return {{"temperature", p.temperature}, {"top_p", p.top_p}, {"top_k", p.top_k}, {"min_p", p.min_p},
          {"repeat_penalty", p.repeat_penalty}, {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty}, {"seed", p.seed}};
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
  Url url;
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
    net::io_context io;
    tcp::resolver resolver(io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) return "cannot resolve " + url.host + ": " + ec.message();
    tcp::socket sock(io);
    net::connect(sock, endpoints, ec);
    if (ec) return "cannot connect to " + url.host + ":" + url.port + ": " + ec.message();
    timeval tv{opt.timeout_s, 0};
    setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sock.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ticket.on_cancel([&sock] {
      beast::error_code ignored;
      sock.shutdown(tcp::socket::shutdown_both, ignored);
    });
    struct Unhook {
      Ticket& t;
      ~Unhook() { t.on_cancel(nullptr); }
    } unhook{ticket};
    bhttp::request<bhttp::string_body> req{bhttp::verb::post, url.base + path, 11};
    req.set(bhttp::field::host, url.host);
    req.set(bhttp::field::user_agent, "moelsp");
    req.set(bhttp::field::content_type, "application/json");
    req.set(bhttp::field::accept, "text/event-stream, application/json");
    if (!opt.api_key.empty()) req.set(bhttp::field::authorization, "Bearer " + opt.api_key);
    req.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    req.prepare_payload();
    bhttp::write(sock, req, ec);
    if (ec) return ticket.cancelled() ? "" : "sending the request: " + ec.message();
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);
    bhttp::read_header(sock, buf, parser, ec);
    if (ec) return ticket.cancelled() ? "" : "reading the answer: " + ec.message();
    const int status = parser.get().result_int();
    const bool sse = parser.get()[bhttp::field::content_type].find("event-stream") != beast::string_view::npos;
    std::string pending, whole;
    char chunk[8192];
    bool go_on = true;
    while (!parser.is_done() && go_on) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      bhttp::read(sock, buf, parser, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) break;
      const std::string_view got(chunk, sizeof chunk - parser.get().body().size);
      if (!sse || status != 200) {
        whole += got;
        continue;
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
    }
    if (ticket.cancelled()) return "";
    if (status != 200) {
      const json e = json::parse(whole, nullptr, false);
      std::string msg = whole.substr(0, 300);
      if (e.is_object() && e.contains("error")) {
        const json& er = e["error"];
        msg = er.is_object() ? er.value("message", msg) : er.is_string() ? er.get<std::string>() : msg;
      }
      return "HTTP " + std::to_string(status) + " from " + path + ": " + msg;
    }
    if (ec && go_on) return "reading the answer: " + ec.message();
    if (!sse && !whole.empty()) on_event(whole);
    return "";
  }
};

RemoteBackend::RemoteBackend(RemoteOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->url = parse_url(opt.url);
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
    if (budget_ms > 0 && std::chrono::duration<double, std::milli>(Clock::now() - t_first).count() > double(budget_ms)) {
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
    const json e = json::parse(data, nullptr, false);
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
    body.update({{"input_prefix", in.context.prefix}, {"input_suffix", in.context.suffix}, {"n_predict", in.max_tokens},
                 {"t_max_predict_ms", in.t_max_predict_ms}, {"cache_prompt", true}, {"stream", true}});
    if (in.context.single_line) body["stop"] = {"\n"};
    err = impl_->post("/infill", body, [&](const std::string& data) {
      const json e = json::parse(data, nullptr, false);
      if (!e.is_object()) return true;
      const bool stop = e.value("stop", false);
      return c.add(e.value("content", std::string()), stop ? json("stop") : json()) && !stop;
    }, ticket);
  } else {
    body.update({{"model", o.model}, {"max_tokens", in.max_tokens}, {"stream", true}});
    if (o.fim_template == "suffix") {
      body["prompt"] = in.context.prefix;
      body["suffix"] = in.context.suffix;
    } else {
      body["prompt"] = fim_template_prompt(o.fim_template, in.context.prefix, in.context.suffix);
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
  const std::string err = impl_->post("/v1/chat/completions", body, [&](const std::string& data) {
    const json e = json::parse(data, nullptr, false);
    if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) return true;
    const json& ch = e["choices"][0];
    std::string piece;
    if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
      piece = ch["delta"]["content"];
    return c.add(piece, ch.value("finish_reason", json()));
  }, ticket);
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
