// textDocument/inlineCompletion and textDocument/completion.
//
// Latency model: an answer from the cache (same context, or the user typed
// the first characters of the last suggestion) costs microseconds; otherwise
// the prompt mostly hits the engine's prefix cache (the text before the cursor
// changes only at its end), so the cost is the new tokens plus generation,
// bounded by completion.timeBudgetMs.
#include <algorithm>
#include <cctype>
#include <chrono>

#include <spdlog/spdlog.h>

#include "completion.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

using Clock = std::chrono::steady_clock;

// The suffix follows the prefix in the FIM prompt, so it is recomputed on every
// keystroke: keep it short (a few lines) and spend the budget on the prefix.
constexpr size_t kMaxPrefixBytes = 6000, kMaxSuffixBytes = 400, kExtraContextBytes = 2000;
constexpr size_t kCacheEntries = 64;

// Other open documents, in a stable order, as a header of the prefix: the
// same files give the same bytes, so the engine reuses their KV prefix.
std::string extra_context(const DocumentStore& docs, const std::string& uri) {
  std::string out;
  for (const auto& [u, d] : docs.all()) {
    if (u == uri || out.size() >= kExtraContextBytes) continue;
    std::string chunk = d.text.substr(0, std::min(d.text.size(), kExtraContextBytes - out.size()));
    if (const size_t nl = chunk.rfind('\n'); nl != std::string::npos && chunk.size() < d.text.size()) chunk.resize(nl + 1);
    if (chunk.empty()) continue;
    out += "// " + u + "\n" + chunk;
    if (out.back() != '\n') out += '\n';
  }
  return out;
}

}  // namespace

void Server::Impl::on_completion(const json& id, const json& params) { complete(id, params, false); }
void Server::Impl::on_inline_completion(const json& id, const json& params) { complete(id, params, true); }

void Server::Impl::complete(const json& id, const json& params, bool inline_kind) {
  const auto t_start = Clock::now();
  const std::string uri = params.at("textDocument").at("uri");
  const Position pos{params.at("position").at("line"), params.at("position").at("character")};
  // InlineCompletionTriggerKind: 1 = Invoked (the user asked: offer alternatives), 2 = Automatic.
  const json context = params.value("context", json::object());
  const bool invoked = inline_kind && context.value("triggerKind", 2) == 1;
  // The item selected in the client's completion popup: the suggestion must
  // start with it and replace its range (LSP 3.18 selectedCompletionInfo).
  std::optional<Range> selected_range;
  std::string selected_text;
  if (inline_kind && context.contains("selectedCompletionInfo") && context["selectedCompletionInfo"].is_object()) {
    const json& sel = context["selectedCompletionInfo"];
    const json& r = sel.at("range");
    selected_range = Range{{r.at("start").at("line"), r.at("start").at("character")},
                           {r.at("end").at("line"), r.at("end").at("character")}};
    selected_text = sel.at("text");
  }
  auto p = track(id);
  {
    std::lock_guard lock(pending_mu);
    // A newer completion for the same document makes the older one moot.
    if (auto it = latest_completion.find(uri); it != latest_completion.end()) it->second->cancel();
    latest_completion[uri] = p;
  }
  {
    std::lock_guard lock(telemetry.mu);
    ++telemetry.requests;
  }
  const Settings s = effective();
  enqueue([this, id, uri, pos, p, s, inline_kind, invoked, t_start, selected_range, selected_text] {
    std::vector<std::string> texts;
    std::string word;  // the identifier the cursor stands in (classic items replace it)
    std::string error;
    bool from_cache = false;
    try {
      const auto doc = docs.get(uri);
      if (!doc) throw std::runtime_error("document not open: " + uri);
      std::string doc_text = doc->text;
      size_t cursor = offset_of(doc_text, pos);
      if (selected_range) {  // complete as if the selected item were already inserted
        const size_t a = offset_of(doc_text, selected_range->start), b = offset_of(doc_text, selected_range->end);
        if (a <= b && b <= doc_text.size()) {
          doc_text.replace(a, b - a, selected_text);
          cursor = a + selected_text.size();
        }
      }
      CompletionContext ctx = make_context(doc_text, cursor, kMaxPrefixBytes, kMaxSuffixBytes);
      for (size_t i = ctx.prefix.size(); i > 0; --i) {
        const char c = ctx.prefix[i - 1];
        if (!std::isalnum((unsigned char)c) && c != '_') {
          word = ctx.prefix.substr(i);
          break;
        }
        if (i == 1) word = ctx.prefix;
      }

      // 1. Cache: the same context, or typed-through (the user typed the start
      //    of a suggestion). An explicit request wants alternatives: not from here.
      if (!invoked) {
        std::lock_guard lock(cache_mu);
        for (const auto& e : cache) {
          if (e.suffix != ctx.suffix || ctx.prefix.size() < e.prefix.size() ||
              ctx.prefix.compare(0, e.prefix.size(), e.prefix) != 0)
            continue;
          const std::string typed = ctx.prefix.substr(e.prefix.size());
          if (typed.size() < e.text.size() && e.text.compare(0, typed.size(), typed) == 0) {
            texts.push_back(e.text.substr(typed.size()));
            from_cache = true;
            break;
          }
        }
      }
      // 2. Debounce: wait, unless a newer keystroke cancels us meanwhile.
      if (!from_cache && *s.completion_debounce_ms > 0) {
        const auto until = Clock::now() + std::chrono::milliseconds(*s.completion_debounce_ms);
        while (Clock::now() < until && !p->cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      Engine* eng = current_engine();
      if (!from_cache && eng && !p->cancelled) {
        // 3. The model: FIM prompt (with other open files ahead of the prefix), greedy first.
        CompletionContext prompt_ctx = ctx;
        prompt_ctx.prefix = extra_context(docs, uri) + ctx.prefix;
        Request req;
        // The prompt leaves room in the context for the answer.
        const int room = eng->n_ctx() - *s.completion_max_tokens;
        req.prompt_tokens = fim_prompt(eng->model().tokenizer(), prompt_ctx, size_t(std::max(room, eng->n_ctx() / 2)));
        req.max_tokens = *s.completion_max_tokens;
        req.t_max_predict_ms = *s.completion_time_budget_ms;
        req.t_max_prompt_ms = *s.completion_time_budget_ms * 4;
        req.sampling = SamplingParams::greedy();
        req.priority = Priority::kCompletion;  // before chat
        if (ctx.single_line) req.stop = {"\n"};
        const int alternatives = invoked ? 3 : 1;
        begin_busy();
        double tps = 0;
        for (int k = 0; k < alternatives && !p->cancelled; ++k) {
          if (k > 0) {  // alternatives: sampled, different seeds
            req.sampling = SamplingParams{};
            req.sampling.temperature = 0.7f;
            req.sampling.seed = uint64_t(k);
          }
          // A repetition loop ends decoding as soon as a line of it is
          // complete: the post-processing would cut it anyway.
          Callbacks cb;
          cb.should_stop = [](const std::string& t) { return degenerate_at(t, true) != std::string::npos; };
          auto h = p->submit(*eng, req, std::move(cb));
          if (!h) break;
          const Result r = h->wait();
          {
            std::lock_guard lock(telemetry.mu);
            telemetry.prompt_tokens += r.timings.n_prompt;
            telemetry.prompt_tokens_reused += r.timings.n_prompt_cached;
          }
          if (r.reason == FinishReason::Error) {
            error = r.error;
            break;
          }
          if (r.timings.generate_tps() > 0) tps = r.timings.generate_tps();
          // Out of time or tokens in the middle of a line: that line is
          // unfinished, the ones before it are not.
          std::string raw = r.text;
          if (r.reason == FinishReason::Timeout || r.reason == FinishReason::Length)
            if (const size_t nl = raw.rfind('\n'); nl != std::string::npos) raw.resize(nl);
          std::string text = postprocess(raw, ctx);
          if (!text.empty() && std::find(texts.begin(), texts.end(), text) == texts.end()) texts.push_back(text);
        }
        end_busy(tps);
        if (!texts.empty() && !p->cancelled) {
          std::lock_guard lock(cache_mu);
          cache.push_front({ctx.prefix, ctx.suffix, texts.front()});
          if (cache.size() > kCacheEntries) cache.pop_back();
        }
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    untrack(id);
    {
      std::lock_guard lock(pending_mu);
      if (auto it = latest_completion.find(uri); it != latest_completion.end() && it->second == p)
        latest_completion.erase(it);
    }
    if (p->cancelled) {
      std::lock_guard lock(telemetry.mu);
      ++telemetry.cancelled;
      return reply_error(id, kRequestCancelled, "request cancelled");
    }
    if (!error.empty()) return reply_error(id, kInternalError, error);
    telemetry.record_latency(std::chrono::duration<double, std::milli>(Clock::now() - t_start).count());
    if (from_cache) {
      std::lock_guard lock(telemetry.mu);
      ++telemetry.cache_hits;
    }
    const Position from = selected_range ? selected_range->start : pos;
    const Position to = selected_range ? selected_range->end : pos;
    const json range = {{"start", {{"line", from.line}, {"character", from.character}}},
                        {"end", {{"line", to.line}, {"character", to.character}}}};
    json items = json::array();
    for (const auto& text : texts) {
      if (inline_kind) {
        items.push_back({{"insertText", selected_text + text}, {"range", range},
                         {"command", {{"title", "accepted"}, {"command", "moelsp.accepted"}}}});
      } else {
        // Clients filter the list by the word before the cursor (Helix,
        // nvim-cmp, VS Code): an item that only continued it would be
        // filtered out, so it replaces the word with word + continuation.
        // (ASCII identifier characters: as many UTF-16 units as bytes.)
        // (The document may have changed since the request: at most the line's start.)
        const size_t w = std::min(word.size(), size_t(std::max(0, pos.character)));
        const std::string full = word.substr(word.size() - w) + text;
        std::string label = full.substr(0, full.find('\n'));
        if (label.empty()) label = full;
        const json word_range = {{"start", {{"line", pos.line}, {"character", pos.character - int(w)}}},
                                 {"end", range["end"]}};
        items.push_back({{"label", label}, {"kind", 1}, {"detail", "moelsp"}, {"filterText", full},
                         {"insertText", full}, {"textEdit", {{"range", word_range}, {"newText", full}}}});
      }
    }
    // Incomplete: the next keystroke changes the continuation, so clients ask again.
    reply(id, inline_kind ? json{{"items", items}} : json{{"isIncomplete", true}, {"items", items}});
  });
}

}  // namespace moelsp::lsp
