// Api::run_chat: one chat generation for any protocol (answer.h). The
// model's text goes through assist::OutputParser — reasoning, text, tool
// calls in the model's own syntax — and each piece to the protocol's shape.
#include "answer.h"

#include <deque>
#include <mutex>

#include <spdlog/spdlog.h>

#include "assist/call_grammar.h"
#include "conversation.h"

namespace moelsp::http {

namespace {
// Where the answer's calls stand: begun so far, and whether the open one is
// passed on (parallel_tool_calls false keeps only the first).
struct Calls {
  bool parallel = true;
  int begun = 0;
  bool kept(int index) const { return parallel || index == 0; }
};

// What the parser found in a piece of output, as the shape's events in the
// order the model wrote it; recorded into the whole answer.
Sses shape_delta(const assist::OutputDelta& d, Answer& a, AnswerShape& shape, Calls& calls) {
  using Kind = assist::OutputPiece::Kind;
  Sses out;
  size_t done = 0;  // d.calls holds the calls these pieces end, in order
  for (const auto& p : d.pieces) {
    if (p.kind == Kind::Text) {
      a.content += p.text;
      append(out, shape.text(p.text));
      continue;
    }
    if (p.kind == Kind::Reasoning) {
      a.reasoning += p.text;
      append(out, shape.reasoning(p.text));
      continue;
    }
    const int index = p.kind == Kind::Begin ? calls.begun++ : calls.begun - 1;
    if (!calls.kept(index)) {
      done += p.kind == Kind::End;
      continue;
    }
    if (p.kind == Kind::Begin) append(out, shape.call_begin(index, p.text));
    else if (p.kind == Kind::Args) append(out, shape.call_args(index, p.text));
    else if (done < d.calls.size()) {
      a.calls.push_back({index, d.calls[done].name, d.calls[done].arguments});
      ++done;
      append(out, shape.call_end(a.calls.back()));
    }
  }
  shape.pending_logprobs.clear();
  return out;
}
// Calls under their grammar (assist/call_grammar.h): a forced call from the
// answer's start (its opening already in the prompt), else each call once
// its opening appears, the text around calls free. A response_format
// constrains the whole answer instead, unless a call is forced.
void constrain_calls(assist::ChatQuery& q, const Conversation& c, const ToolPlan& plan) {
  if (plan.syntax == assist::ToolSyntax::None || c.choice == ToolChoice::None || c.tools.empty()) return;
  const bool forced = !plan.prefix.empty();
  if (!forced && q.constraint.active()) return;
  const auto g = assist::call_grammar(
      {plan.syntax, q.template_options.tools_json, c.choice == ToolChoice::Named ? c.forced : "", c.parallel_calls});
  if (!g) return;
  try {
    q.constraint.grammar = compile_gbnf(g->gbnf);
  } catch (const GrammarError& e) {  // a bug here, not the client's: the calls stay unconstrained
    spdlog::warn("tool calls are not constrained: their grammar did not compile: {}", e.what());
    return;
  }
  q.constraint.triggers = forced ? std::vector<std::string>{} : g->triggers;
  q.constraint.prefix = forced ? plan.prefix : "";
}
}  // namespace

// A template that ends its generation prompt with <think> (Qwen3's thinking
// models, DeepSeek V3.1 thinking) starts the answer inside the reasoning.
bool opens_reasoning(std::string_view prompt) {
  const size_t end = prompt.find_last_not_of(" \n");
  return end != std::string_view::npos && prompt.substr(0, end + 1).ends_with("<think>");
}

// A response_format's grammar with room for the model's reasoning first
// (assist::with_reasoning): a thinking model constrained to JSON from its
// first token could not think, and would answer worse or not at all.
void Api::allow_reasoning(assist::ChatQuery& q) {
  if (!q.constraint.active() || !q.constraint.triggers.empty() || !q.constraint.prefix.empty()) return;
  // Only a model whose template knows <think>: a model that does not
  // reason, offered the room, may open reasoning it never closes.
  const assist::ToolSyntax family = service_.tool_syntax(q.template_override);
  if (!assist::reasons_in_think(family) || !service_.template_thinks(q.template_override)) return;
  std::optional<std::string> prompt;  // does the template open the reasoning itself?
  try {
    prompt = service_.chat_prompt(q);
  } catch (const std::exception&) {  // the template refuses the conversation: the chat says so
    return;
  }
  const bool opened = prompt && opens_reasoning(*prompt);
  try {
    q.constraint.grammar =
        compile_gbnf(assist::with_reasoning(family, grammar_source(*q.constraint.grammar), opened), "answer-root");
  } catch (const GrammarError& e) {
    spdlog::warn("response_format: no room for reasoning: {}", e.what());
  }
}

HttpResponse Api::run_chat(ChatRun run) {
  assist::ChatQuery& q = run.query;
  const ToolPlan plan = plan_tools(run.conversation, service_.tool_syntax(q.template_override));
  q.assistant_prefix = plan.prefix;
  constrain_calls(q, run.conversation, plan);
  allow_reasoning(q);
  q.raw_channels = plan.syntax == assist::ToolSyntax::Harmony;
  assist::OutputParser parser(plan.syntax, q.template_options.tools_json);
  // The parser learns from the rendered prompt whether the answer starts
  // inside the reasoning.
  if (plan.prefix.empty())
    q.on_prompt = [&parser](const std::string& prompt) {
      if (opens_reasoning(prompt)) parser.start_in_reasoning();
    };
  Calls calls{run.conversation.parallel_calls};
  AnswerShape& shape = run.shape;
  Answer answer;
  const Slot place = slot();
  assist::Ticket& t = *place.ticket;
  // Made now, sent when the stream opens: a shape numbers its events. A
  // forced call's opening is the answer's start (Qwen3-Coder's names the
  // tool: the call has begun).
  Sses opening = run.stream ? shape.open() : Sses{};
  append(opening, shape_delta(parser.push(plan.prefix), answer, shape, calls));
  LazyStream lazy{[&] {
    EventStream* opened = run.open_stream();
    for (const Sse& e : opening) opened->send_event(e.event, e.data);
    return opened;
  }};
  LazyStream* const es = run.stream ? &lazy : nullptr;
  const auto events = [&](const std::string& piece) {
    const assist::OutputDelta d = parser.push(piece);
    return d.empty() ? Sses{} : shape_delta(d, answer, shape, calls);
  };
  const assist::ChatAnswer a = pump_chat(q, t, es, run.req.client_gone, events, shape);
  count(run.endpoint, a.timings);
  if (const auto f = failed_generation(stopping(), a.reason, a.error, a.error_kind)) {
    if (!es || !es->es) return *f;
    for (const Sse& e : shape.failed(*f)) es->es->send_event(e.event, e.data);
    return streamed();
  }
  answer.reason = a.reason;
  answer.timings = a.timings;
  answer.logprobs = a.logprobs;
  if (!a.reasoning.empty()) answer.reasoning = a.reasoning + answer.reasoning;  // gpt-oss's analysis channel
  // Not streamed: the whole text parsed at once. Streamed: what the parser held back.
  assist::OutputDelta rest = es ? assist::OutputDelta{} : parser.push(a.text);
  rest.append(parser.finish());
  Sses tail = shape_delta(rest, answer, shape, calls);
  if (!es) return ok(shape.whole(answer));
  append(tail, shape.finish(answer));
  EventStream* out = es->get();
  for (const Sse& e : tail) out->send_event(e.event, e.data);
  return streamed();
}

// Streamed with logprobs, a piece's events carry its tokens' logprobs, so
// they are made where both are known (the generating thread), in order, and
// handed to the connection's thread with the piece.
assist::ChatAnswer Api::pump_chat(assist::ChatQuery& q, assist::Ticket& t, LazyStream* es,
                                  const std::function<bool()>& client_gone,
                                  const std::function<Sses(const std::string&)>& events, AnswerShape& shape) {
  const bool stream_lp = es && q.logprobs.top >= 0;
  if (!stream_lp)
    return pump<assist::ChatAnswer>(es, t, client_gone, events,
                                    [&](const OnText& on_text) { return service_.chat(q, on_text, t); });
  std::vector<TokenLogprob> lps;
  q.logprobs.on_logprob = [&](const TokenLogprob& lp) { lps.push_back(lp); };
  std::mutex made_mu;
  std::deque<Sses> made;
  return pump<assist::ChatAnswer>(
      es, t, client_gone,
      [&](const std::string&) {
        std::lock_guard lock(made_mu);  // one piece handed over: one entry made
        Sses out = std::move(made.front());
        made.pop_front();
        return out;
      },
      [&](const OnText& on_text) {
        return service_.chat(
            q,
            [&](const std::string& s) {
              shape.pending_logprobs = lps;
              Sses e = events(s);
              if (!e.empty()) lps.clear();  // held back: its logprobs go with the next piece
              {
                std::lock_guard lock(made_mu);
                made.push_back(std::move(e));
              }
              on_text(s);
            },
            t);
      });
}

}  // namespace moelsp::http
