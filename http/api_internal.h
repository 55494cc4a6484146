// What the API's endpoint files share: response builders, the error a
// failed generation maps to, and running a generation while watching its
// client. Internal to http/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "fields.h"

namespace moelsp::http {

inline HttpResponse error(int status, const std::string& message, const std::string& type = "invalid_request_error",
                          const std::string& code = "", const std::string& param = "") {
  HttpResponse r;
  r.status = status;
  r.body = error_json(message, type, code, param);
  return r;
}

// One server-sent event: `event: NAME` (when not empty) and its data.
struct Sse {
  std::string event, data;
};
using Sses = std::vector<Sse>;
inline Sses data_event(const json& j) { return {{"", j.dump(-1, ' ', false, json::error_handler_t::replace)}}; }
inline Sses named_event(const std::string& name, const json& j) {
  return {{name, j.dump(-1, ' ', false, json::error_handler_t::replace)}};
}
inline void append(Sses& to, Sses more) {
  for (auto& e : more) to.push_back(std::move(e));
}
inline int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An OpenAI error object's message as Anthropic's clients read it: an
// over-long prompt in Anthropic's words, "prompt is too long: N tokens > M
// maximum" (Claude Code compacts the conversation on it). api_anthropic.cpp.
std::string anthropic_wording(const json& openai_error);

inline HttpResponse ok(const json& j) {
  HttpResponse r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// What handle() returns once a response went out as a stream.
inline HttpResponse streamed() {
  HttpResponse r;
  r.status = 0;
  return r;
}

// A failed generation as the client sees it: its own mistakes are 400
// invalid_request_error (an over-long prompt with OpenAI's code
// context_length_exceeded), the server's faults 500 server_error.
struct GenerationError {
  int status;
  const char* type;
  const char* code;
};
inline GenerationError generation_error(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Request: return {400, "invalid_request_error", ""};
    case ErrorKind::ContextLength: return {400, "invalid_request_error", "context_length_exceeded"};
    case ErrorKind::Server: break;
  }
  return {500, "server_error", ""};
}
inline HttpResponse error_for(const std::string& message, ErrorKind kind) {
  const GenerationError e = generation_error(kind);
  return error(e.status, message, e.type, e.code);
}

// How often a generation's client is checked for having gone: the bound on
// how long a request runs for nobody (its KV blocks and slot held).
constexpr auto kClientCheck = std::chrono::milliseconds(100);

// Runs `work` on a thread of its own while this (the connection's) thread
// checks the client every kClientCheck and cancels the ticket once it has
// gone: a request nobody waits for frees its slot and KV blocks within a
// step of the check, streamed or not. Exceptions of `work` are rethrown here.
template <class Result>
Result watched(assist::Ticket& t, const std::function<bool()>& client_gone, const std::function<Result()>& work) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  Result result;
  std::exception_ptr failure;
  std::thread worker([&] {
    Result out;
    std::exception_ptr e;
    try {
      out = work();
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard lock(m);
    result = std::move(out);
    failure = e;
    finished = true;
    cv.notify_one();
  });
  bool cancelled = false;
  std::unique_lock lock(m);
  while (!cv.wait_for(lock, kClientCheck, [&] { return finished; }))
    if (!cancelled && client_gone && client_gone()) {
      cancelled = true;
      t.cancel();
    }
  lock.unlock();
  worker.join();
  if (failure) std::rethrow_exception(failure);
  return result;
}

// A response that will be streamed, opened (status 200 and the headers
// sent) only once the request has got past admission: on its first text,
// after kStreamGrace without a failure, or when it ends well. A request
// refused at admission — an empty prompt, one longer than the context, a
// token outside the vocabulary, a template that refuses the conversation —
// so gets its 4xx as a plain response, as OpenAI answers, not a 200 with an
// error event; a long prompt still gets its headers at once.
constexpr auto kStreamGrace = std::chrono::milliseconds(300);
struct LazyStream {
  std::function<EventStream*()> open;  // e.g. the transport's, then a first chunk
  EventStream* es = nullptr;
  EventStream* get() {
    if (!es) es = open();
    return es;
  }
};

// Streams without making the engine wait on a client: `generate` runs on a
// thread of its own and hands its text over through a queue; this thread
// (the connection's) writes it, and a failed write — or a client seen gone
// between tokens, e.g. during a long prompt — cancels the request. So a
// client that stops reading holds only its own connection, never the
// engine's scheduler thread that every other request shares. Without a
// stream (null) the generation is only watched.
using OnText = std::function<void(const std::string&)>;
// `events` turns a piece the generation handed over into the events to send.
template <class Result>
Result pump(LazyStream* stream, assist::Ticket& t, const std::function<bool()>& client_gone,
            const std::function<Sses(const std::string&)>& events,
            const std::function<Result(const OnText&)>& generate) {
  if (!stream) return watched<Result>(t, client_gone, [&] { return generate(nullptr); });
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> queue;
  bool finished = false;
  Result result;
  std::thread worker([&] {
    Result out;
    try {
      out = generate([&](const std::string& s) {
        {
          std::lock_guard lock(m);
          queue.push_back(s);
        }
        cv.notify_one();
      });
    } catch (const std::exception& e) {
      out.reason = FinishReason::Error;
      out.error = e.what();
    } catch (...) {
      out.reason = FinishReason::Error;
      out.error = "unknown error";
    }
    {
      std::lock_guard lock(m);
      result = std::move(out);
      finished = true;
    }
    cv.notify_one();
  });
  bool open = true;
  const auto leave = [&] {
    open = false;
    t.cancel();  // the client left: stop generating
  };
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, kClientCheck, [&] { return finished || !queue.empty(); })) {
      lock.unlock();
      if (open && client_gone && client_gone()) leave();
      if (open && !stream->es && std::chrono::steady_clock::now() - started >= kStreamGrace && !stream->get()->ok())
        leave();
      continue;
    }
    if (queue.empty() && finished) break;
    std::deque<std::string> batch;
    batch.swap(queue);
    lock.unlock();
    for (const auto& s : batch)
      for (const Sse& e : events(s))  // none when there is nothing to send yet
        if (open && !stream->get()->send_event(e.event, e.data)) leave();
  }
  worker.join();
  return result;
}

// The answer of a generation that did not succeed, alike for every
// endpoint; nullopt when it did. Shutdown cancels generations in flight:
// their clients get 503 shutting_down (as a final error event when the
// stream is open). With `done_marker` (OpenAI's endpoints) a stream's error event
// is followed by [DONE], so clients that read to it end cleanly.
inline std::optional<HttpResponse> failed_generation(bool stopping, FinishReason reason, const std::string& message,
                                                     ErrorKind kind) {
  if (stopping && (reason == FinishReason::Cancelled || reason == FinishReason::Error))
    return error(503, "the server is shutting down", "server_error", "shutting_down");
  if (reason == FinishReason::Error) return error_for(message, kind);
  return std::nullopt;
}
inline std::optional<HttpResponse> failure(LazyStream* stream, bool stopping, FinishReason reason,
                                           const std::string& message, ErrorKind kind, bool done_marker) {
  EventStream* es = stream ? stream->es : nullptr;  // not yet open: a plain response
  const auto f = failed_generation(stopping, reason, message, kind);
  if (!f) return std::nullopt;
  const HttpResponse& r = *f;
  if (!es) return r;
  es->send(r.body);
  if (done_marker) es->send("[DONE]");
  return streamed();
}

}  // namespace moelsp::http
