// The server's state, shared by server.cpp (transport loop, dispatch,
// lifecycle, documents, settings) and the feature handlers
// (handlers_completion.cpp, handlers_chat.cpp: thin adapters from the protocol
// to assist::Service, which holds the completion pipeline and chat). Internal
// to lsp/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "assist/background_pull.h"
#include "assist/model_host.h"
#include "assist/service.h"
#include "assist/workspace_index.h"
#include "documents.h"
#include "engine/model.h"
#include "protocol.h"
#include "server.h"
#include "transport.h"

namespace moelsp::lsp {

using json = nlohmann::json;

// The answer to one request, sent exactly once: the first result or error
// wins, later ones are dropped (and logged), and a request whose every handle
// is gone unanswered — a handler that returned or threw without replying —
// gets -32603 from the last handle's destructor. Copies share the state.
class Reply {
 public:
  using Send = std::function<void(const json&)>;
  Reply(json id, Send send, std::string method);
  void operator()(json result) const;
  void error(int code, const std::string& message) const;
  const json& id() const;
  bool sent() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

// Request work runs on two lanes so that a completion never waits behind
// chats: chats hold a worker for their whole answer, completions are short
// and superseded by the next keystroke.
enum class Lane { Completion, Chat };

struct Server::Impl {
  Transport& t;
  ServerOptions opt;
  Settings init_options;  // initializationOptions + didChangeConfiguration
  std::mutex settings_mu;

  enum class Phase { Uninitialized, Running, ShutDown } phase = Phase::Uninitialized;
  bool exiting = false, shutdown_received = false;
  std::atomic<bool> output_closed{false};  // the client closed our stdout: stop reading, exit 1
  TraceValue trace = TraceValue::Off;      // $/setTrace ($/logTrace mirrors the log unless off)
  ClientCapabilities client;

  DocumentStore docs;
  assist::Service service;  // the completion pipeline, chat, telemetry
  // The workspace index (handlers_workspace.cpp): the folders' files and the
  // open documents, for completion context.
  std::mutex roots_mu;
  std::vector<std::string> roots;  // the workspace folders' paths
  std::string index_key;           // what the index was started with (roots + settings), to restart on a change
  assist::WorkspaceIndex index;
  // Per document, the snippets its last completion sent (assist::merge_context).
  std::mutex sticky_mu;
  std::unordered_map<std::string, std::vector<assist::Snippet>> sticky;
  uint64_t sticky_gen = 0;  // moves when the index restarts: picks made before are not kept
  // moelsp/didResolveDefinitions: per document, where the editor's language
  // servers say the names near its cursor are defined (the newest set).
  std::mutex editor_defs_mu;
  std::unordered_map<std::string, std::vector<EditorDefinition>> editor_defs;
  std::atomic<uint64_t> editor_defs_received{0}, editor_defs_sent{0};
  // Where open documents were last edited (didChange ranges), oldest first,
  // at most 8: other files' recently edited lines join a completion's context.
  struct RecentEdit {
    std::string uri;
    int line = 0;
  };
  std::mutex recent_mu;
  std::deque<RecentEdit> recent_edits;
  // moelsp/didChangeVisibleRanges: what the editor shows of each document,
  // oldest first, at most 8 (guarded by recent_mu).
  struct Viewed {
    std::string uri;
    Range range;
  };
  std::deque<Viewed> viewed;
  std::atomic<uint64_t> viewed_received{0};

  // The model (or remote backend) and its phase; its hooks tell the editor
  // (progress, messages, moelsp/status).
  assist::ModelHost host;
  json load_token;  // the model load's $/progress token (null: the client shows none)
  // The `model` setting as start_loading() last read it (a reference stays a
  // reference while its file is pulled): a settings change reloads only
  // when it differs. Guarded by reload_mu, which also keeps two reloads
  // (the editor's, a finished pull's) from interleaving.
  std::mutex reload_mu;
  std::optional<std::string> requested_model;
  // A `model` that names a hub reference not in the cache: pulled here
  // while the embedded model serves (pull_changed: progress, status, then
  // the reload that loads it).
  assist::BackgroundPull puller{[this](const assist::BackgroundPull::State& st) { pull_changed(st); }};
  json pull_token;  // its $/progress token (touched on the pull's thread only)

  // moelsp/models: the guide's rows, once the hub answered (its files and
  // this machine change rarely within a session).
  std::mutex guide_mu;
  std::optional<json> guide_rows;
  json suggested_rows(assist::Ticket& ticket);

  // completion.model (completion_model.cpp): a second engine that answers
  // completions while `host` answers chats; loaded after the main model, in
  // the memory it leaves. None when unset or the same file as the model.
  assist::ModelHost completion_host;
  std::mutex completion_load_mu;             // one (re)load of it at a time (never held by a status)
  std::mutex completion_mu;                  // the three below (held briefly: hooks and statuses take it)
  std::optional<std::string> completion_as;  // what it was loaded for (the setting's value), or none
  bool completion_shared = false;            // the setting names the model's own file
  std::string completion_error;              // why the setting could not be honoured
  void start_completion_model();             // after the main model's load ended
  void completion_done(const assist::ModelHost::Snapshot& st);  // its load ended
  json completion_status();

  std::mutex pending_mu;
  // Requests in flight by id.dump(). A multimap: a client that reuses the id
  // of a request still running (a protocol error, but seen) can still
  // cancel both.
  std::unordered_multimap<std::string, std::shared_ptr<assist::Ticket>> pending;

  struct Worklane {
    std::deque<std::function<void()>> queue;
    std::condition_variable cv;
  };
  std::mutex q_mu;
  Worklane lanes[2];
  bool stopping = false;
  std::vector<std::thread> workers;
  std::atomic<int> next_server_request_id{1};
  // moelsp.snooze: automatic completions get nothing until this moment
  // (steady clock, ms since its epoch; 0: not snoozed).
  std::atomic<int64_t> snooze_until_ms{0};
  int64_t snooze_left_ms() const;

  // The typed method table: each entry parses its params struct once
  // (-32602 naming the field) and calls a member with it.
  std::unordered_map<std::string, std::function<void(const json& params, Reply)>> requests;
  std::unordered_map<std::string, std::function<void(const json& params)>> notifications;
  // workspace/executeCommand's table, in the order initialize advertises it
  // (vscode-languageclient registers only advertised commands).
  std::vector<std::pair<std::string, void (Impl::*)(const ExecuteCommandParams&, Reply)>> commands;
  template <class P>
  void on_request(const std::string& method, void (Impl::*handler)(const P&, Reply));
  template <class P>
  void on_notification(const std::string& method, void (Impl::*handler)(const P&));

  Impl(Transport& tr, ServerOptions o);
  ~Impl();

  Settings effective();
  // Reads a settings object from the editor; bad values are reported to the
  // user (window/showMessage) and skipped, the others apply.
  Settings editor_settings(const json& j);

  // output
  void send(const json& j);
  void notify(const std::string& method, json params);
  // A request of ours to the client (its answer is not awaited).
  void request_client(const std::string& method, json params);
  void log_message(MessageType type, const std::string& text);
  void show_message(MessageType type, const std::string& text);
  json status_json();
  static CompletionOptions completion_options();
  std::vector<std::string> command_names() const;
  void send_status();
  void progress(const json& token, json value);

  // requests and notifications
  void handle(const std::string& body);
  // Runs `job` on a worker of `lane`; an exception it throws answers `reply`
  // with -32603 and its message.
  void enqueue(Lane lane, Reply reply, std::function<void()> job);
  std::shared_ptr<assist::Ticket> track(const json& id);
  void untrack(const json& id, const std::shared_ptr<assist::Ticket>& ticket);
  void start_loading();  // under reload_mu
  // `s.model` names a hub reference: its cached file, or the embedded model
  // while a pull fetches it. False: the reference is malformed (the host failed).
  bool resolve_model_ref(Settings& s);
  void pull_changed(const assist::BackgroundPull::State& st);
  // The host's hooks: a load begins (status, progress) and ends (progress,
  // messages, status).
  void load_started(const assist::ModelHost::Snapshot& st);
  void load_done(const assist::ModelHost::Snapshot& st);
  // Drops the engine (or remote) and loads again from the current settings:
  // a changed model, backend or plan, a failed load fixed, the moelsp.reload command.
  void reload();

  void on_initialize(const InitializeParams& p, Reply reply);
  void on_shutdown(const NoParams& p, Reply reply);
  void on_status(const NoParams& p, Reply reply);
  void on_completion(const CompletionParams& p, Reply reply);
  void on_inline_completion(const CompletionParams& p, Reply reply);
  void on_execute_command(const ExecuteCommandParams& p, Reply reply);
  void on_chat(const ChatParams& p, Reply reply);
  void on_models(const ModelsParams& p, Reply reply);  // handlers_models.cpp
  // The commands: moelsp.snooze [minutes] (default 5; 0 ends it) and
  // moelsp.resume; moelsp.reload; moelsp.accepted (the inline item's: the
  // user took the suggestion); moelsp.chat, explain, fix, document.
  void snooze(const ExecuteCommandParams& p, Reply reply);
  void reload_command(const ExecuteCommandParams& p, Reply reply);
  void accepted_command(const ExecuteCommandParams& p, Reply reply);
  void chat_command(const ExecuteCommandParams& p, Reply reply);

  void on_initialized(const NoParams& p);
  void on_cancel(const CancelParams& p);
  void on_set_trace(const SetTraceParams& p);
  void on_did_open(const DidOpenParams& p);
  void on_did_change(const DidChangeParams& p);
  void on_did_close(const DocumentParams& p);
  void on_did_save(const DocumentParams& p);
  void on_did_change_configuration(const DidChangeConfigurationParams& p);
  void on_did_change_watched_files(const DidChangeWatchedFilesParams& p);
  void on_did_change_workspace_folders(const DidChangeWorkspaceFoldersParams& p);
  void on_did_resolve_definitions(const DidResolveDefinitionsParams& p);
  void on_did_change_visible_ranges(const DidChangeVisibleRangesParams& p);
  void on_did_show(const NoParams& p);
  void on_did_accept(const NoParams& p);
  void on_did_partially_accept(const NoParams& p);

  // the workspace index
  // (Re)starts the walk when the folders or the settings it reads changed.
  void start_index(const Settings& s);
  json index_status();
  // The definitions the editor resolved for `uri` that the text near the
  // cursor uses, as snippets (within budget_bytes; their files in `files`).
  // `to_remote`: the text goes to a remote backend (stricter rules, see the file).
  std::vector<assist::Snippet> editor_snippets(const std::string& uri, const assist::CompletionQuery& q,
                                               const assist::ExcludeList& exclude, bool to_remote, size_t budget_bytes);
  // The lines around the last edits of the two documents edited most
  // recently, and the lines shown of the document viewed last (not `uri`),
  // as snippets within budget_bytes.
  std::vector<assist::Snippet> recent_snippets(const std::string& uri, const assist::ExcludeList& exclude,
                                               bool to_remote, size_t budget_bytes);
  // Whether an editor-named file may go into a prompt: not excluded, and with
  // a remote backend inside a workspace folder and not hidden by .gitignore.
  bool editor_file_allowed(const std::string& path, const assist::ExcludeList& exclude, bool to_remote);
  // A (normalised) path relative to the workspace folder holding it; none outside them.
  std::optional<std::string> in_workspace(const std::string& path);
  // A file's name in the prompt: relative to its workspace folder, else the
  // last three parts of its path.
  std::string context_path(const std::string& path);
  // Other files' code for a completion in `uri` (at most budget_bytes of it).
  assist::RepoContext repo_context(const std::string& uri, const assist::CompletionQuery& q, const Settings& s,
                                   const assist::ExcludeList& exclude, bool to_remote);

  // features
  void complete(const CompletionParams& p, Reply reply, bool inline_kind);
  // What a completion asks the service: the text around the cursor (the
  // popup's selected item as if inserted), other files' code, the settings.
  struct QueryArgs {
    const CompletionParams& params;
    const std::string& text;  // the document
    const std::optional<SelectedCompletionInfo>& selected;
    const Settings& settings;
    const assist::ExcludeList& exclude;
    bool to_remote = false, invoked = false;
  };
  assist::CompletionQuery completion_query(const QueryArgs& a);
  void chat(const std::string& command, const ChatParams& p, Reply reply);
};

}  // namespace moelsp::lsp
