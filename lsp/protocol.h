// The LSP messages moelsp reads, as typed structs parsed once at the edge
// (clangd's Protocol.h in miniature): a handler sees fields, never JSON. A
// missing field or one of the wrong type is a ParamError naming its path
// ("textDocument.uri: expected a string, got a number"), which the dispatcher
// answers as -32602 InvalidParams. Only the fields moelsp uses are parsed.
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

struct NoParams {};

struct ClientCapabilities {
  bool completion = false, inline_completion = false, execute_command = false, work_done_progress = false;
  bool dynamic_configuration = false, dynamic_completion = false, dynamic_inline = false;
  bool dynamic_watch = false;  // workspace/didChangeWatchedFiles registered at run time
};

struct InitializeParams {
  ClientCapabilities capabilities;
  std::string trace = "off";    // off, messages, verbose
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

// workspace/didChangeWatchedFiles: FileChangeType 1 created, 2 changed, 3 deleted.
struct FileEvent {
  std::string uri;
  int type = 2;
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
  std::string value;  // off, messages, verbose
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
  // InlineCompletionTriggerKind: 1 = Invoked (the user asked: offer alternatives), 2 = Automatic.
  int trigger_kind = 2;
  std::optional<SelectedCompletionInfo> selected;  // LSP 3.18 selectedCompletionInfo
};

struct ChatMessage {
  std::string role, content;
};
// moelsp/chat, and the argument of moelsp.chat / explain / fix / document.
struct ChatParams {
  std::vector<ChatMessage> messages;
  std::optional<std::string> uri;  // code to talk about: this document,
  std::optional<Range> range;      // or this part of it
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

}  // namespace moelsp::lsp
