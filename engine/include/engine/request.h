// What a caller gives the engine and gets back: a request, its callbacks,
// its result and timings. Separate from engine.h so that code which builds
// requests or reads results (the assistant's backends, the servers' JSON)
// does not pull in the engine itself.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "engine/sampling_params.h"
#include "engine/tokenizer.h"

namespace moelsp {

struct Request {
  std::string prompt;                  // tokenized with BOS (if the model wants it) and special tokens parsed
  std::vector<TokenId> prompt_tokens;  // used instead of `prompt` when not empty
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // generation ends before any of these strings
  bool ignore_eos = false;
  // 0: no limit. A prompt that takes longer ends the request with
  // FinishReason::Timeout; with `finish_prompt` its prefill then goes on at
  // Priority::kBackground into the prefix cache (a completion's next
  // keystroke shares that prompt: it starts from what was done).
  int64_t t_max_prompt_ms = 0;
  bool finish_prompt = false;
  int64_t t_max_predict_ms = 0;  // 0: no limit; generation stops (keeping its text) after this
  int priority = 0;              // higher runs first (see Priority)
  // A prompt longer than the context: Fit::Error refuses it; Fit::KeepEnd
  // keeps the first `keep_start` tokens (a system prompt) and the most recent
  // ones, dropping from the start of what follows. Either way room is left for
  // min(max_tokens, n_ctx / 4) generated tokens.
  enum class Fit { Error, KeepEnd } fit = Fit::Error;
  int keep_start = 0;
  // −1: none; N ≥ 0: each generated token's log-probability and its N most
  // likely alternatives (at most kMaxTopLogprobs), in Result::logprobs and
  // Callbacks::on_logprob.
  int logprobs = -1;
  // Prompt lookup decoding: with greedy sampling (temperature 0), each decode
  // step may also run up to `draft_max` draft tokens copied from the text so
  // far (what followed the latest earlier occurrence of the last few tokens:
  // code repeats itself) and keep those the model itself would have picked.
  // The output is the same as plain decoding; accepted drafts save steps.
  // 0: off. Ignored when sampling is random.
  int draft_max = 0;
  // Token healing: the prompt's last token was taken out of it (the start of
  // a word the cursor stands in, e.g. `se` of `self`), and the first token
  // generated must begin with this text. Tokenizers split a word cut at the
  // cursor into tokens the model rarely saw (`return se|` → ` se`), so the
  // model continues the word far better from before it. The text is not
  // returned: the answer starts where the prompt's text ended. Ignored when
  // no token of the vocabulary begins with it.
  std::string heal;
  // The output must match a grammar (engine/grammar.h): JSON of a schema, a
  // tool call. Every sampled token is one the grammar allows; where the
  // grammar's sentence is complete and nothing may follow, generation ends
  // (FinishReason::Eos). With triggers it applies from the first trigger on.
  OutputConstraint constraint;
  // Once the prompt is done, its blocks not yet on disk are written to the
  // prompt cache (EngineOptions::prompt_cache; prompts of at least its
  // min_tokens): set for an agent's or a chat's prompt, whose head a later
  // session sends again, not for completions, whose prompt changes with
  // every keystroke. A request's prompt is looked up there either way.
  bool store_prompt = false;
};

// A generated token's log-probability under the model: the log-softmax of the
// raw logits (before temperature and the other samplers, as vLLM reports
// them by default), with the most likely tokens at that step.
struct TokenLogprob {
  struct Alt {
    TokenId id;
    std::string text;  // the token's bytes as text (may be part of a UTF-8 character)
    float logprob;
  };
  TokenId id;
  std::string text;
  float logprob;
  std::vector<Alt> top;
};
constexpr int kMaxTopLogprobs = 20;

// Request::priority values used by the servers.
struct Priority {
  static constexpr int kCompletion = 10;  // inline completion: someone is waiting at the cursor
  static constexpr int kChat = 0;
  static constexpr int kBackground = -10;  // indexing, prefetching, batch jobs
};

enum class FinishReason { Length, Stop, Eos, Cancelled, Timeout, Error };
const char* to_string(FinishReason r);

// Whose fault a FinishReason::Error is, so front ends answer a client's
// mistake as one (HTTP 400, JSON-RPC InvalidParams) and keep 5xx for the
// server's own: an empty prompt or a token outside the vocabulary is the
// request's; a prompt longer than the context is too, with a kind of its
// own (OpenAI's `context_length_exceeded`).
enum class ErrorKind { Server, Request, ContextLength };

// What the scheduler throws for a request it cannot serve as sent.
class RequestError : public std::runtime_error {
 public:
  RequestError(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind(kind) {}
  ErrorKind kind;
};

struct Timings {
  int n_prompt = 0;           // prompt tokens in the request (after fitting to the context)
  int n_prompt_cached = 0;    // of which reused from the prefix cache
  int n_prompt_restored = 0;  // of those, read from the prompt cache on disk
  int n_prompt_cut = 0;       // tokens dropped to fit the context (Request::Fit::KeepEnd)
  int n_generated = 0;
  int n_preempted = 0;  // times its blocks were taken for a higher-priority request
  int n_masked = 0;     // Request::constraint: samples the grammar rejected, drawn again from a masked vocabulary
  double queue_ms = 0;  // submission to first scheduled step
  double prompt_ms = 0, generate_ms = 0;
  double prompt_tps() const { return prompt_ms > 0 ? (n_prompt - n_prompt_cached) / (prompt_ms / 1000) : 0; }
  double generate_tps() const { return generate_ms > 0 ? n_generated / (generate_ms / 1000) : 0; }
};

struct Result {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenLogprob> logprobs;  // Request::logprobs ≥ 0
  FinishReason reason = FinishReason::Length;
  std::string error;
  ErrorKind error_kind = ErrorKind::Server;  // reason == Error
  Timings timings;
};

struct Callbacks {
  // Text that is final (never a partial UTF-8 character, never part of a stop
  // string), with the token that completed it. Called on the scheduler thread.
  std::function<void(TokenId id, const std::string& text)> on_token = nullptr;
  std::function<void(const Result&)> on_done = nullptr;
  // Asked with all the text emitted so far, after each piece of it; true ends
  // generation at once (FinishReason::Stop, the text kept). The completion
  // pipeline stops a repetition loop here instead of decoding it to the
  // token limit. Called on the scheduler thread: keep it cheap.
  std::function<bool(const std::string& text)> should_stop = nullptr;
  // With Request::logprobs ≥ 0: each token's, right after it is sampled
  // (before on_token gives the text it completes). Scheduler thread.
  std::function<void(const TokenLogprob&)> on_logprob = nullptr;
};

}  // namespace moelsp
