// The LSP messages moelsp reads and writes, typed (clangd's Protocol.h in
// miniature). What it reads is parsed once at the edge: a handler sees
// fields, never JSON; a missing field or one of the wrong type is a
// ParamError naming its path ("textDocument.uri: expected a string, got a
// number"), which the dispatcher answers as -32602 InvalidParams. Only the
// fields moelsp uses are parsed. What it writes — results, notifications,
// its own requests — are structs with to_json (protocol_out.cpp), and the
// JSON-RPC envelope is written in one place (jsonrpc::*).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "documents.h"

namespace moelsp::lsp {

using json = nlohmann::json;

struct ParamError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- the protocol's numbers ----------------------------------------------------------

enum class MessageType { Error = 1, Warning = 2, Info = 3, Log = 4 };
enum class TextDocumentSyncKind { None = 0, Full = 1, Incremental = 2 };
enum class CompletionItemKind { Text = 1 };  // the one kind moelsp's items carry
// Invoked: the user asked (alternatives are offered); Automatic: as they type.
enum class InlineCompletionTriggerKind { Invoked = 1, Automatic = 2 };
enum class FileChangeType { Created = 1, Changed = 2, Deleted = 3 };
// $/setTrace and initialize's trace: verbose and messages mirror the log as $/logTrace.
enum class TraceValue { Off, Messages, Verbose };

// JSON-RPC / LSP error codes.
enum ErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  kServerNotInitialized = -32002,
  kRequestCancelled = -32800,
};

struct NoParams {};

struct ClientCapabilities {
  bool completion = false, inline_completion = false, execute_command = false, work_done_progress = false;
  bool dynamic_configuration = false, dynamic_completion = false, dynamic_inline = false;
  bool dynamic_watch = false;  // workspace/didChangeWatchedFiles registered at run time
};

struct InitializeParams {
  ClientCapabilities capabilities;
  TraceValue trace = TraceValue::Off;
  json initialization_options;  // settings, read through the settings table
  // The workspace's folders (workspaceFolders, else rootUri, else rootPath), as URIs.
  std::vector<std::string> roots;
};

struct TextDocumentItem {
  std::string uri, language_id, text;
  int version = 0;
};
struct DidOpenParams {
  TextDocumentItem text_document;
};

struct ContentChange {
  std::optional<Range> range;  // none: the whole text
  std::string text;
};
struct DidChangeParams {
  std::string uri;
  int version = 0;
  std::vector<ContentChange> changes;
};

struct DocumentParams {  // didClose, didSave
  std::string uri;
};

struct DidChangeConfigurationParams {
  json settings;  // the "moelsp" section when the client nests it
};

// workspace/didChangeWatchedFiles.
struct FileEvent {
  std::string uri;
  FileChangeType type = FileChangeType::Changed;
};
struct DidChangeWatchedFilesParams {
  std::vector<FileEvent> changes;
};
// moelsp/didResolveDefinitions (our extension): where the editor's own
// language servers say the names near the cursor in `uri` are defined.
struct EditorDefinition {
  std::string name, uri;
  Range range;
};
struct DidResolveDefinitionsParams {
  std::string uri;
  std::vector<EditorDefinition> definitions;
};
// moelsp/didChangeVisibleRanges (our extension): the lines of a document
// the editor shows now.
struct DidChangeVisibleRangesParams {
  std::string uri;
  std::vector<Range> ranges;
};
// workspace/didChangeWorkspaceFolders: the folders' URIs.
struct DidChangeWorkspaceFoldersParams {
  std::vector<std::string> added, removed;
};

struct SetTraceParams {
  TraceValue value = TraceValue::Off;
};

// moelsp/models (handlers_models.cpp).
struct ModelsParams {
  bool suggest = false;  // also the guide's rows (reads the hub)
};

struct CancelParams {
  json id;  // integer or string
};

struct SelectedCompletionInfo {
  Range range;
  std::string text;
};
struct CompletionParams {
  std::string uri;
  Position position;
  InlineCompletionTriggerKind trigger_kind = InlineCompletionTriggerKind::Automatic;
  std::optional<SelectedCompletionInfo> selected;  // LSP 3.18 selectedCompletionInfo
};

struct ChatMessage {
  std::string role, content;
};
// moelsp/chat, and the argument of moelsp.chat / explain / fix / document.
struct ChatParams {
  // moelsp/chat's "kind": chat (the default), explain, fix or document —
  // the commands' questions, asked through the chat request.
  std::string kind = "chat";
  std::vector<ChatMessage> messages;
  std::optional<std::string> uri;   // code to talk about: this document,
  std::optional<Range> range;       // or this part of it,
  std::optional<std::string> code;  // or this text (a buffer the server does not have open)
  std::string language;             // code's language (its fence)
  json work_done_token, partial_result_token;
};

struct ExecuteCommandParams {
  std::string command;
  ChatParams chat;  // arguments[0], for the chat commands
  // moelsp.snooze: arguments[0] as a number or {"minutes": n}; unset: the default.
  std::optional<double> minutes;
  json work_done_token;
};

// Parsers: throw ParamError naming the field.
void from_json(const json& j, NoParams& p);
void from_json(const json& j, InitializeParams& p);
void from_json(const json& j, DidOpenParams& p);
void from_json(const json& j, DidChangeParams& p);
void from_json(const json& j, DocumentParams& p);
void from_json(const json& j, DidResolveDefinitionsParams& p);
void from_json(const json& j, DidChangeVisibleRangesParams& p);
void from_json(const json& j, DidChangeConfigurationParams& p);
void from_json(const json& j, CancelParams& p);
void from_json(const json& j, DidChangeWatchedFilesParams& p);
void from_json(const json& j, DidChangeWorkspaceFoldersParams& p);
void from_json(const json& j, SetTraceParams& p);
void from_json(const json& j, ModelsParams& p);
void from_json(const json& j, CompletionParams& p);
void from_json(const json& j, ChatParams& p);
void from_json(const json& j, ExecuteCommandParams& p);

// JSON text a client may send that nlohmann::json refuses: invalid UTF-8
// bytes and lone UTF-16 surrogate escapes ("\ud800", which JavaScript strings
// can hold) become U+FFFD, so a document with one bad character still opens.
std::string repair_json_text(std::string_view text);

template <class T>
T parse_params(const json& j) {
  T out;
  from_json(j, out);
  return out;
}

json to_json(const Position& p);
json to_json(const Range& r);

// ---- what moelsp writes (protocol_out.cpp) -------------------------------------------

// The JSON-RPC envelope: every message moelsp sends is made by one of these.
namespace jsonrpc {
json response(const json& id, json result);
json error(const json& id, int code, const std::string& message);
json notification(const std::string& method, json params);
json request(const json& id, const std::string& method, json params);
}  // namespace jsonrpc

struct CompletionOptions {
  bool resolve_provider = false;
  std::vector<std::string> trigger_characters;
};
struct ServerCapabilities {
  TextDocumentSyncKind change = TextDocumentSyncKind::Incremental;  // with openClose, save without text
  std::optional<CompletionOptions> completion;                      // none: registered dynamically or unsupported
  bool inline_completion = false;
  std::optional<std::vector<std::string>> commands;  // executeCommandProvider
};
struct InitializeResult {
  ServerCapabilities capabilities;
  std::string name = "moelsp", version = "0.1.0";
};

struct Command {
  std::string title, command;
};
struct TextEdit {
  Range range;
  std::string new_text;
};
struct InlineCompletionItem {
  std::string insert_text;
  Range range;
  std::optional<Command> command;
};
struct InlineCompletionList {
  std::vector<InlineCompletionItem> items;
};
struct CompletionItem {
  std::string label;
  CompletionItemKind kind = CompletionItemKind::Text;
  std::string detail, filter_text, insert_text;
  TextEdit text_edit;
};
struct CompletionList {
  bool is_incomplete = false;
  std::vector<CompletionItem> items;
};

// moelsp/chat's and the chat commands' result.
struct ChatResult {
  std::string text, finish_reason;
  double tokens_per_second = 0;
  std::optional<std::string> reasoning;
  // explain, fix, document: the user's turn as the server asked it (its
  // question and the code), for the editor's transcript and follow-ups.
  std::optional<std::string> question;
};
// moelsp.snooze's and moelsp.resume's result.
struct SnoozeResult {
  int64_t snooze_left_ms = 0;
};

// window/logMessage and window/showMessage.
struct MessageParams {
  MessageType type = MessageType::Info;
  std::string message;
};
// $/progress values on a work-done token.
struct WorkDoneProgressBegin {
  std::string title;
  std::optional<std::string> message;
  bool cancellable = false;
  std::optional<int> percentage = {};  // 0-100, when the work knows how far it is
};
struct WorkDoneProgressReport {
  std::string message;
  std::optional<int> percentage = {};
};
struct WorkDoneProgressEnd {
  std::optional<std::string> message;
};
// $/progress values on moelsp/chat's partialResultToken: the new text.
struct PartialChatResult {
  std::string text;
};

// client/registerCapability.
struct Registration {
  std::string id, method;
  json register_options;  // null: none
};
struct RegistrationParams {
  std::vector<Registration> registrations;
};

json to_json(const InitializeResult& r);
json to_json(const CompletionOptions& o);
json to_json(const InlineCompletionList& l);
json to_json(const CompletionList& l);
json to_json(const ChatResult& r);
json to_json(const SnoozeResult& r);
json to_json(const MessageParams& p);
json to_json(const WorkDoneProgressBegin& p);
json to_json(const WorkDoneProgressReport& p);
json to_json(const WorkDoneProgressEnd& p);
json to_json(const PartialChatResult& p);
json to_json(const RegistrationParams& p);

}  // namespace moelsp::lsp
