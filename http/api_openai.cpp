// OpenAI's endpoints: /v1/completions (text, fill in the middle with
// `suffix`), /v1/chat/completions (the conversation through the model's
// chat template; tool calls and reasoning parsed out, answer.h) and
// llama.cpp's /apply-template, which shares chat's request.
#include <fmt/format.h>

#include "answer.h"
#include "api.h"
#include "constraint.h"
#include "conversation.h"

namespace moelsp::http {

namespace {

// max_tokens and its aliases: at least one token, at most 2^20.
int max_tokens(const json& j, const char* name, int fallback) { return int(int_field(j, name, fallback, 1, 1 << 20)); }

// `logprobs` of /v1/completions: an integer 0..20 (OpenAI allows 5, vLLM 20),
// the alternatives per token; absent or null: none.
int completion_logprobs_field(const json& j) {
  if (!has(j, "logprobs")) return -1;
  if (j["logprobs"].is_boolean()) return j["logprobs"].get<bool>() ? 0 : -1;
  return int(int_field(j, "logprobs", -1, 0, kMaxTopLogprobs));
}

// `logprobs: true` and `top_logprobs` of /v1/chat/completions.
int chat_logprobs_field(const json& j) {
  if (!bool_field(j, "logprobs", false)) {
    if (has(j, "top_logprobs")) throw BadField("field 'top_logprobs' needs 'logprobs': true", "top_logprobs");
    return -1;
  }
  return int(int_field(j, "top_logprobs", 0, 0, kMaxTopLogprobs));
}

// stream_options {"include_usage": true}: a last chunk with empty choices
// and the usage, before [DONE] (OpenAI's; agents read their token counts
// from it).
bool usage_chunk_asked(const json& j, bool stream) {
  if (!has(j, "stream_options")) return false;
  const json& o = j["stream_options"];
  if (!o.is_object()) throw BadField("field 'stream_options' must be an object", "stream_options");
  if (!stream) throw BadField("field 'stream_options' needs 'stream': true", "stream_options");
  return bool_field(o, "include_usage", false);
}

// The legacy completions shape: parallel arrays; text_offset counts bytes
// from the start of the generated text, continuing across stream chunks.
json completion_logprobs(const std::vector<TokenLogprob>& lps, size_t& offset) {
  json tokens = json::array(), values = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    tokens.push_back(lp.text);
    values.push_back(lp.logprob);
    json alts = json::object();
    for (const auto& a : lp.top) alts[a.text] = a.logprob;
    top.push_back(alts);
    offsets.push_back(offset);
    offset += lp.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// The chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json chat_logprobs(const std::vector<TokenLogprob>& lps) {
  const auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  json content = json::array();
  for (const auto& lp : lps) {
    json alts = json::array();
    for (const auto& a : lp.top) alts.push_back({{"token", a.text}, {"logprob", a.logprob}, {"bytes", bytes(a.text)}});
    content.push_back({{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", bytes(lp.text)}, {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

const char* openai_reason(FinishReason r) {
  return r == FinishReason::Length || r == FinishReason::Timeout ? "length" : "stop";
}

// prompt_tokens_details.cached_tokens: the prompt's tokens the prefix cache
// served (OpenAI's field; an agent's turn re-sends the conversation, so all
// but the new tail should be cached).
json usage(const Timings& t) {
  return {{"prompt_tokens", t.n_prompt},
          {"completion_tokens", t.n_generated},
          {"total_tokens", t.n_prompt + t.n_generated},
          {"prompt_tokens_details", {{"cached_tokens", t.n_prompt_cached}}}};
}

// The chunk stream_options.include_usage asks for.
std::string usage_chunk(const std::string& id, const char* object, const std::string& model, const Timings& t) {
  return json{{"id", id},       {"object", object},         {"created", now_s()},
              {"model", model}, {"choices", json::array()}, {"usage", usage(t)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

// POST /v1/completions: prompt (text or token ids), `suffix` for fill in the
// middle, sampling, stop, stream.
namespace {
assist::TextInput text_input(const json& j, const SamplingParams& defaults) {
  assist::TextInput in;
  if (!has(j, "prompt")) throw BadField("field 'prompt' is required", "prompt");
  const json& prompt = j["prompt"];
  if (prompt.is_string()) in.prompt = prompt;
  else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number())
    in.prompt_tokens = token_ids(prompt, "prompt");
  else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) in.prompt = prompt[0];
  else throw BadField("field 'prompt' must be a string, one string in an array, or an array of token ids", "prompt");
  if (has(j, "suffix")) in.suffix = string_field(j, "suffix");
  in.max_tokens = max_tokens(j, "max_tokens", 16);
  in.sampling = sampling(j, defaults);
  in.stop = stops(j);
  in.logprobs.top = completion_logprobs_field(j);
  in.ignore_eos = bool_field(j, "ignore_eos", false);  // llama.cpp's extension
  return in;
}

// One streamed chunk of /v1/completions.
std::string completion_chunk(const std::string& id, const std::string& model_id, const std::string& text,
                             const json& reason, const json& logprobs) {
  return json{{"id", id},
              {"object", "text_completion"},
              {"created", now_s()},
              {"model", model_id},
              {"choices", {{{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", reason}}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

HttpResponse Api::completions(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  const std::string model_id = served_as(string_field(j, "model"));
  refuse_unsupported(j);
  assist::TextInput in = text_input(j, sampling_defaults(1.0f));
  // llama-server's extensions on this endpoint too: grammar, json_schema, response_format.
  in.constraint = has(j, "response_format") ? response_format(j, req.body) : llama_constraint(j, req.body);
  const bool stream = bool_field(j, "stream", false);
  const bool include_usage = usage_chunk_asked(j, stream);
  const std::string id = "cmpl-" + std::to_string(next_id_++);
  const Slot s = slot();
  LazyStream lazy{open_stream};
  LazyStream* const es = stream ? &lazy : nullptr;
  const auto chunk = [&](const std::string& text, const json& reason, const json& logprobs = nullptr) {
    return completion_chunk(id, model_id, text, reason, logprobs);
  };
  // Streamed with logprobs: each chunk carries its tokens' logprobs, so it
  // is formatted where both are known (the generating thread), in order.
  const bool stream_lp = es && in.logprobs.top >= 0;
  std::vector<TokenLogprob> pending;
  size_t offset = 0;
  if (stream_lp) in.logprobs.on_logprob = [&](const TokenLogprob& lp) { pending.push_back(lp); };
  const assist::Generation g = pump<assist::Generation>(
      es, *s.ticket, req.client_gone,
      [&](const std::string& text) {
        return Sses{{"", stream_lp ? text : chunk(text, nullptr)}};
      },
      [&](const OnText& on_text) {
        if (!stream_lp) return service_.text(in, on_text, *s.ticket);
        return service_.text(
            in,
            [&](const std::string& text) {
              const json lp = completion_logprobs(pending, offset);
              pending.clear();
              on_text(chunk(text, nullptr, lp));
            },
            *s.ticket);
      });
  count("/v1/completions", g.timings);
  if (auto f = failure(es, stopping(), g.reason, g.error, g.error_kind, true)) return *f;
  if (es) {
    es->get()->send(chunk("", openai_reason(g.reason)));
    if (include_usage) es->get()->send(usage_chunk(id, "text_completion", model_id, g.timings));
    es->get()->send("[DONE]");
    return streamed();
  }
  size_t offset0 = 0;
  const json logprobs = in.logprobs.top >= 0 ? completion_logprobs(g.logprobs, offset0) : json();
  return ok({{"id", id},
             {"object", "text_completion"},
             {"created", now_s()},
             {"model", model_id},
             {"choices",
              {{{"text", g.text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", openai_reason(g.reason)}}}},
             {"usage", usage(g.timings)}});
}

namespace {
// OpenAI chat's chunks and body (answer.h): a role chunk first, then a
// delta per piece, each call as a tool_calls delta with its index, id,
// name and arguments; finish_reason "tool_calls" when the model called.
class ChatShape final : public AnswerShape {
 public:
  ChatShape(std::string id, std::string model, bool logprobs, bool usage)
      : id_(std::move(id)), model_(std::move(model)), logprobs_(logprobs), usage_(usage) {}
  Sses open() override { return chunk({{"role", "assistant"}, {"content", ""}}, nullptr); }
  Sses reasoning(const std::string& s) override { return chunk({{"reasoning_content", s}}, nullptr); }
  Sses text(const std::string& s) override { return chunk({{"content", s}}, nullptr); }
  // A call's first delta has its index, id, type and name; then its
  // arguments come in pieces (OpenAI's shape; clients join them by index).
  Sses call_begin(int index, const std::string& name) override {
    json call = call_json({index, name, ""});
    call["index"] = index;
    return chunk({{"tool_calls", {call}}}, nullptr);
  }
  Sses call_args(int index, const std::string& piece) override {
    return chunk({{"tool_calls", {{{"index", index}, {"function", {{"arguments", piece}}}}}}}, nullptr);
  }
  Sses call_end(const CallOut&) override { return {}; }
  Sses finish(const Answer& a) override {
    Sses out = chunk(json::object(), reason(a));
    if (usage_) append(out, data_event(json::parse(usage_chunk(id_, "chat.completion.chunk", model_, a.timings))));
    out.push_back({"", "[DONE]"});
    return out;
  }
  Sses failed(const HttpResponse& e) override { return {{"", e.body}, {"", "[DONE]"}}; }
  json whole(const Answer& a) override {
    json message{{"role", "assistant"}, {"content", a.calls.empty() || !a.content.empty() ? json(a.content) : json()}};
    if (!a.reasoning.empty()) message["reasoning_content"] = a.reasoning;  // where llama.cpp's server puts it
    if (!a.calls.empty()) {
      message["tool_calls"] = json::array();
      for (const auto& c : a.calls) message["tool_calls"].push_back(call_json(c));
    }
    return {{"id", id_},
            {"object", "chat.completion"},
            {"created", now_s()},
            {"model", model_},
            {"choices",
             {{{"index", 0},
               {"message", message},
               {"logprobs", logprobs_ ? chat_logprobs(a.logprobs) : json()},
               {"finish_reason", reason(a)}}}},
            {"usage", usage(a.timings)}};
  }

 private:
  static const char* reason(const Answer& a) { return a.calls.empty() ? openai_reason(a.reason) : "tool_calls"; }
  json call_json(const CallOut& c) const {
    return {{"id", "call_" + id_.substr(id_.find('-') + 1) + "_" + std::to_string(c.index)},
            {"type", "function"},
            {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
  }
  Sses chunk(const json& delta, const json& finish) {
    json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", finish}};
    if (logprobs_ && !pending_logprobs.empty()) choice["logprobs"] = chat_logprobs(pending_logprobs);
    pending_logprobs.clear();  // once, with the piece's first chunk
    return data_event({{"id", id_},
                       {"object", "chat.completion.chunk"},
                       {"created", now_s()},
                       {"model", model_},
                       {"choices", {choice}}});
  }
  std::string id_, model_;
  bool logprobs_, usage_;
};
}  // namespace

// POST /apply-template (llama.cpp's): the prompt a chat request would
// generate from, without generating: {"prompt": "..."}.
HttpResponse Api::apply_template(const std::string& body) {
  const json j = parse_body(body);
  const assist::ChatQuery q = to_query(openai_conversation(j), opt_.chat_template);
  try {
    const auto prompt = service_.chat_prompt(q);
    if (!prompt) return error(501, "the chat template is applied by the remote backend, not here", "server_error");
    return ok({{"prompt", *prompt}});
  } catch (const ChatTemplateError& e) {
    return error(400, e.what());
  }
}

// POST /v1/chat/completions.
HttpResponse Api::chat_completions(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  const std::string model = served_as(string_field(j, "model"));
  refuse_unsupported(j);
  const Conversation c = openai_conversation(j);
  assist::ChatQuery q = to_query(c, opt_.chat_template);
  q.max_tokens = max_tokens(j, has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", 1024);
  q.sampling = sampling(j, sampling_defaults(1.0f));
  q.stop = stops(j);
  q.constraint = response_format(j, req.body);
  q.logprobs.top = chat_logprobs_field(j);
  const bool stream = bool_field(j, "stream", false);
  ChatShape shape("chatcmpl-" + std::to_string(next_id_++), model, q.logprobs.top >= 0, usage_chunk_asked(j, stream));
  return run_chat({req, open_stream, c, std::move(q), stream, shape, "/v1/chat/completions"});
}

}  // namespace moelsp::http
