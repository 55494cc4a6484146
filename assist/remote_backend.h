// A remote server as the Backend, for teams that run one large model on a
// GPU cluster (vLLM or SGLang with expert parallelism, Ollama, LM Studio,
// llama-server, or another moelsp serve): the editor's completion pipeline
// stays here (context, cache, post-processing), generation happens there.
// Everything streams (server-sent events), so a cancelled request closes its
// connection at once and a repetition loop stops early.
#pragma once

#include <memory>
#include <string>

#include "assist/backend.h"

namespace moelsp::assist {

struct RemoteOptions {
  std::string url;             // http://host:port or https://host:port (a path prefix is kept)
  std::string api_key;         // sent as Authorization: Bearer
  std::string model;           // the "model" field of OpenAI requests
  std::string api = "openai";  // openai (/v1/completions, /v1/chat/completions) or llama.cpp (/infill)
  // How a fill-in-the-middle prompt is sent with api = openai: "suffix" (the
  // request's `suffix` field: the server uses the model's FIM tokens; moelsp
  // serve, Ollama) or a preset that builds the prompt here, since vLLM and
  // SGLang refuse `suffix`: qwen (Qwen2.5/3-Coder), deepseek
  // (DeepSeek-Coder), codellama, starcoder (StarCoder2), codestral; or a
  // template with {prefix} and {suffix}.
  std::string fim_template = "qwen";
  int timeout_s = 30;  // connect, and each read or write
  // https: the system's trusted CAs, or those of ca_file (PEM); verify_tls
  // off accepts any certificate (a test server, never across a network).
  std::string ca_file;
  bool verify_tls = true;
};

// The prompt for `fim_template` (empty for "suffix"); throws on an unknown name.
std::string fim_template_prompt(const std::string& tmpl, const std::string& prefix, const std::string& suffix);

class RemoteBackend final : public Backend {
 public:
  explicit RemoteBackend(RemoteOptions opt);  // checks the URL and template (throws with the reason)
  ~RemoteBackend() override;
  Generation fim(const FimInput& in, Ticket& ticket) override;
  Generation chat(const ChatInput& in, const std::function<void(const std::string&)>& on_text, Ticket& ticket) override;
  Generation text(const TextInput& in, const std::function<void(const std::string&)>& on_text, Ticket& ticket) override;
  const RemoteOptions& options() const;
  // The last failure talking to the server ("" when the last request worked).
  std::string last_error() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moelsp::assist
