// The one place a chat answer is shaped: Api::run_chat (answer.cpp) parses
// the model's text into reasoning, text and tool calls as it arrives and
// hands each piece, in order, to the protocol's AnswerShape — OpenAI chat
// chunks, Responses events, Anthropic content blocks — which says what to
// send now (streamed) and what the whole answer is (not streamed). A shape
// only formats: when a piece arrives, what is held back, how a call is
// numbered and when the answer has failed are decided in run_chat, once.
// Internal to http/.
#pragma once

#include <string>
#include <vector>

#include "api_internal.h"

namespace moelsp::http {

struct CallOut {
  int index = 0;  // among the answer's calls, from 0
  std::string name;
  std::string arguments;  // a JSON object, compact
};

// The whole answer so far, as run_chat has parsed it.
struct Answer {
  std::string content, reasoning;
  std::vector<CallOut> calls;
  FinishReason reason = FinishReason::Length;
  Timings timings;
  std::vector<TokenLogprob> logprobs;  // the chat's logprobs, when asked
};

class AnswerShape {
 public:
  virtual ~AnswerShape() = default;
  // Streamed: what goes out first, when the stream opens.
  virtual Sses open() = 0;
  virtual Sses reasoning(const std::string& text) = 0;
  virtual Sses text(const std::string& text) = 0;
  // A call as it streams: begun (its name known), a piece of its
  // arguments' JSON text, ended (`c` whole: the pieces joined).
  virtual Sses call_begin(int index, const std::string& name) = 0;
  virtual Sses call_args(int index, const std::string& piece) = 0;
  virtual Sses call_end(const CallOut& c) = 0;
  // The last events, once the model has stopped.
  virtual Sses finish(const Answer& a) = 0;
  // The error a stream ends with once open (a plain response before).
  virtual Sses failed(const HttpResponse& error) = 0;
  // Not streamed: the response body.
  virtual json whole(const Answer& a) = 0;
  // Streamed logprobs (OpenAI chat): the tokens behind the next piece,
  // filled by run_chat before it calls reasoning/text/call.
  std::vector<TokenLogprob> pending_logprobs;
};

}  // namespace moelsp::http
