// llama.cpp's own endpoints, as its clients send them: /infill (llama.vim,
// llama.vscode) and /completion.
#include <algorithm>
#include <chrono>

#include "api.h"
#include "api_internal.h"
#include "constraint.h"

namespace moelsp::http {

namespace {
// llama-server's names: eos, word (a stop string), limit (n_predict), none.
const char* llama_stop_type(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Stop: return "word";
    case FinishReason::Length: return "limit";
    default: return "none";
  }
}
}  // namespace

namespace {
// The completion /infill asks for. Fields llama.vim and llama.vscode send
// that change nothing here: model (llama.vscode sends its chat model's
// name), id_slot, samplers, n_indent, cache_prompt (the prefix cache is
// always on), time of input_extra chunks. n_predict 0 is the plugins'
// warm-up: the context is processed (its KV stays in the prefix cache for
// the next keystroke) and nothing is returned.
assist::CompletionQuery infill_query(const json& j, int n_predict) {
  const std::string prefix = string_field(j, "input_prefix"), suffix = string_field(j, "input_suffix");
  const std::string typed = string_field(j, "prompt");  // the cursor line's text before the cursor
  if (has(j, "response_fields") && !j["response_fields"].is_array())
    throw BadField("field 'response_fields' must be an array of strings", "response_fields");
  assist::CompletionQuery q;
  q.text = prefix + typed + suffix;
  q.cursor = prefix.size() + typed.size();
  if (has(j, "input_extra")) {
    if (!j["input_extra"].is_array())
      throw BadField("field 'input_extra' must be an array of {filename, text}", "input_extra");
    for (const auto& chunk : j["input_extra"]) {
      if (!chunk.is_object()) throw BadField("field 'input_extra' must be an array of {filename, text}", "input_extra");
      const std::string name = string_field(chunk, "filename", "(unnamed)"), text = string_field(chunk, "text");
      q.repo.snippets.push_back({name, text, ""});
    }
  }
  q.settings.max_tokens = n_predict == 0 ? 1 : n_predict;
  q.settings.time_budget_ms = int(int_field(j, "t_max_predict_ms", 1500, INT32_MIN, 3'600'000));
  if (q.settings.time_budget_ms <= 0) q.settings.time_budget_ms = 1500;
  // n_cmpl (llama.vscode): that many suggestions, the first greedy; an array is returned when > 1.
  q.alternatives = int(int_field(j, "n_cmpl", 1, 1, 8));
  return q;
}

// response_fields (llama.vim): a flat object of the paths asked for,
// "timings/prompt_n" → value; the whole answer when not asked.
json only_fields(const json& j, const json& r) {
  if (!has(j, "response_fields")) return r;
  json flat = json::object();
  for (const auto& f : j["response_fields"]) {
    if (!f.is_string() || f.get<std::string>().empty()) continue;
    const std::string path = f;
    const json* cur = &r;
    for (size_t at = 0; cur && at <= path.size();) {
      const size_t slash = std::min(path.find('/', at), path.size());
      const std::string key = path.substr(at, slash - at);
      cur = cur->is_object() && cur->contains(key) ? &(*cur)[key] : nullptr;
      at = slash + 1;
    }
    if (cur) flat[path] = *cur;
  }
  return flat;
}
}  // namespace

// POST /infill (llama.cpp's, as llama.vim and llama.vscode send it): the
// editor pipeline — FIM prompt with input_extra ahead of the prefix, the
// cache and type-through, post-processing.
HttpResponse Api::infill(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  const int n_predict = int(int_field(j, "n_predict", 64, 0, 1 << 20));
  const bool warm_up = n_predict == 0;
  const assist::CompletionQuery q = infill_query(j, n_predict);
  const bool stream = bool_field(j, "stream", false);
  const Slot place = slot();
  const auto t0 = std::chrono::steady_clock::now();
  const assist::CompletionAnswer a = watched<assist::CompletionAnswer>(
      *place.ticket, req.client_gone, [&] { return service_.complete(q, *place.ticket); });
  const Timings& tm = a.timings;
  count("/infill", tm);
  if (stopping()) return error(503, "the server is shutting down", "server_error", "shutting_down");
  if (!a.error.empty()) return error(500, a.error, "server_error");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int n_ctx = 0;
  {
    std::lock_guard lock(mu_);
    n_ctx = model_.n_ctx;
  }
  // What llama.cpp's server answers and the plugins read: content, the
  // cache, and timings (llama.vscode's status bar reads them as numbers).
  const int prompt_n = tm.n_prompt - tm.n_prompt_cached;
  const double predict_ms = a.from_cache ? ms : tm.generate_ms;
  const auto result = [&](const std::string& content) {
    return only_fields(j, {{"content", warm_up ? "" : content},
                           {"stop", true},
                           {"truncated", tm.n_prompt_cut > 0},
                           {"tokens_cached", tm.n_prompt_cached},
                           {"tokens_evaluated", tm.n_prompt},
                           {"model", model_id()},
                           {"cached", a.from_cache},
                           {"generation_settings", {{"n_ctx", n_ctx}, {"n_predict", n_predict}}},
                           {"timings",
                            {{"prompt_n", prompt_n},
                             {"prompt_ms", tm.prompt_ms},
                             {"prompt_per_token_ms", prompt_n > 0 ? tm.prompt_ms / prompt_n : 0.0},
                             {"prompt_per_second", tm.prompt_tps()},
                             {"predicted_n", tm.n_generated},
                             {"predicted_ms", predict_ms},
                             {"predicted_per_token_ms", tm.n_generated > 0 ? predict_ms / tm.n_generated : 0.0},
                             {"predicted_per_second", tm.generate_tps()}}}});
  };
  std::vector<std::string> texts = a.texts;
  if (texts.empty()) texts.push_back("");
  if (stream) {
    EventStream* es = open_stream();
    es->send(json{{"content", warm_up ? "" : texts.front()}, {"stop", false}}.dump(-1, ' ', false,
                                                                                   json::error_handler_t::replace));
    es->send(result("").dump(-1, ' ', false, json::error_handler_t::replace));  // as llama.cpp ends a stream
    return streamed();
  }
  if (q.alternatives == 1) return ok(result(texts.front()));
  json all = json::array();
  for (int k = 0; k < q.alternatives && k < int(texts.size()); ++k) all.push_back(result(texts[size_t(k)]));
  return ok(all);
}

// POST /completion (llama.cpp's): prompt, n_predict, samplers, stream.
HttpResponse Api::llama_completion(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  assist::TextInput in;
  if (!has(j, "prompt")) throw BadField("field 'prompt' is required", "prompt");
  const json& prompt = j["prompt"];
  if (prompt.is_string()) in.prompt = prompt;
  else if (prompt.is_array()) in.prompt_tokens = token_ids(prompt, "prompt");
  else throw BadField("field 'prompt' must be a string or an array of token ids", "prompt");
  // n_predict -1 (llama.cpp's "no limit"): until the context is full.
  const int64_t n_predict = int_field(j, "n_predict", 128, -1, 1 << 20);
  if (n_predict == 0) throw BadField("field 'n_predict' must be -1 (no limit) or within [1, 1048576]", "n_predict");
  in.max_tokens = n_predict == -1 ? 1 << 20 : int(n_predict);
  in.sampling = sampling(j, sampling_defaults(0.8f));
  in.stop = stops(j);
  in.t_max_predict_ms = int_field(j, "t_max_predict_ms", 0, 0, int64_t(24) * 3'600'000);
  const bool stream = bool_field(j, "stream", false);
  in.constraint = llama_constraint(j, req.body);
  if (has(j, "logit_bias") && !(j["logit_bias"].is_array() || j["logit_bias"].is_object()))
    throw BadField("field 'logit_bias' must be an array or an object", "logit_bias");
  if (has(j, "logit_bias") && !j["logit_bias"].empty())
    throw BadField("field 'logit_bias' is not supported", "logit_bias");
  const Slot place = slot();
  LazyStream lazy{open_stream};
  LazyStream* const es = stream ? &lazy : nullptr;
  const assist::Generation g = pump<assist::Generation>(
      es, *place.ticket, req.client_gone,
      [&](const std::string& s) {
        return data_event({{"content", s}, {"stop", false}});
      },
      [&](const OnText& on_text) { return service_.text(in, on_text, *place.ticket); });
  count("/completion", g.timings);
  if (auto f = failure(es, stopping(), g.reason, g.error, g.error_kind, false)) return *f;
  const json timings = {{"prompt_n", g.timings.n_prompt},
                        {"prompt_ms", g.timings.prompt_ms},
                        {"predicted_n", g.timings.n_generated},
                        {"predicted_ms", g.timings.generate_ms},
                        {"predicted_per_second", g.timings.generate_tps()}};
  const json final = {{"content", es ? "" : g.text},
                      {"stop", true},
                      {"stop_type", llama_stop_type(g.reason)},
                      {"tokens_predicted", g.timings.n_generated},
                      {"tokens_evaluated", g.timings.n_prompt},
                      {"tokens_cached", g.timings.n_prompt_cached},
                      {"timings", timings}};
  if (es) {
    es->get()->send(final.dump(-1, ' ', false, json::error_handler_t::replace));
    return streamed();
  }
  return ok(final);
}

}  // namespace moelsp::http
