// completion.model: a second, smaller model that answers completions while
// `model` answers chats (a fast model for keystrokes, a bigger one for
// questions). It loads after the model, planned in the memory the model
// leaves (ModelHost::reserve: the model's planned RAM and VRAM count as
// taken), and serves through the service's completion slot; until it is
// ready, and when it fails, completions use the model. Naming the model's own
// file loads nothing: one copy serves both. A hub reference must be in the
// cache (`moelsp pull`): one background pull at a time is the model's.
#include <filesystem>

#include <fmt/format.h>

#include "server_impl.h"

namespace moelsp::lsp {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return !a.empty() && !b.empty() && std::filesystem::equivalent(a, b, ec);
}

// The file `want` names: itself, or a reference's file in the cache ("" and
// *error when it is not there).
std::string completion_file(const std::string& want, std::string* error) {
  if (!assist::looks_like_model_ref(want)) return want;
  try {
    const auto paths = assist::cached_paths(assist::models_dir(), assist::parse_model_ref(want));
    if (!paths.empty()) return paths.front();
    *error = fmt::format("{} is not in the cache: `moelsp pull {}` first", want, want);
  } catch (const std::exception& e) {
    *error = std::string("completion.model: ") + e.what();
  }
  return {};
}

}  // namespace

void Server::Impl::start_completion_model() {
  std::lock_guard load_lock(completion_load_mu);
  const Settings s = effective();
  const std::optional<std::string> want =
      s.completion_model && !s.completion_model->empty() ? s.completion_model : std::nullopt;
  const assist::ModelHost::Snapshot main = host.snapshot();
  std::string error;
  const std::string file = want ? completion_file(*want, &error) : "";
  const bool shared = want && same_file(file, main.file);
  {
    std::lock_guard lock(completion_mu);
    // An echo of the same settings, or the model reloaded: what runs stays.
    const bool loaded_here =
        completion_host.loaded().model == file && completion_host.phase() != assist::ModelPhase::Error;
    if (!want && !completion_as) return;  // none wanted, none there
    if (want && want == completion_as && shared == completion_shared && error == completion_error &&
        (shared || !error.empty() || loaded_here))
      return;
    completion_as = want;
    completion_shared = shared;
    completion_error = error;
  }
  completion_host.unload();  // completions go back to the model until the new one is ready
  if (!want || shared || !error.empty()) {
    if (!error.empty()) show_message(MessageType::Error, "moelsp: " + error);
    return send_status();
  }
  completion_host.reserve(main.ram_bytes, main.vram_bytes);
  Settings cs = s;
  cs.model = file;
  cs.backend_url.reset();
  cs.prompt_cache_dir.reset();  // agents' long prompts are the model's, not the completion model's
  completion_host.load(cs);
}

void Server::Impl::completion_done(const assist::ModelHost::Snapshot& st) {
  if (st.phase == assist::ModelPhase::Error)
    show_message(MessageType::Error, "moelsp: the completion model could not be loaded: " + st.message +
                                         ". Completions use the model meanwhile.");
  log_message(MessageType::Info, "completion model: " + st.message);
  send_status();
}

json Server::Impl::completion_status() {
  std::lock_guard lock(completion_mu);
  if (!completion_as) return nullptr;
  if (completion_shared)
    return {{"setting", *completion_as}, {"state", "shared"}, {"message", "the model serves both"}};
  if (!completion_error.empty())
    return {{"setting", *completion_as}, {"state", "error"}, {"message", completion_error}};
  const assist::ModelHost::Snapshot st = completion_host.snapshot();
  return {{"setting", *completion_as}, {"state", to_string(st.phase)}, {"file", st.file},
          {"message", st.message},     {"ramBytes", st.ram_bytes},     {"vramBytes", st.vram_bytes}};
}

}  // namespace moelsp::lsp
