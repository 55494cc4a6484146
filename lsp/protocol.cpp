// Parsing the LSP messages moelsp reads: each field is looked up through a
// Fields view that knows its path, so an error names exactly what is wrong.
#include "protocol.h"

namespace moelsp::lsp {

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "something else";
  }
}

// An object and the path that led to it ("" at the params' root).
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) throw ParamError(where() + "expected an object, got " + type_name(j_));
  }

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  std::string str(const char* key) const { return as_string(need(key), key); }
  std::string str_or(const char* key, std::string fallback) const {
    const json* v = find(key);
    return v ? as_string(*v, key) : fallback;
  }
  int integer(const char* key) const { return as_int(need(key), key); }
  int int_or(const char* key, int fallback) const {
    const json* v = find(key);
    return v ? as_int(*v, key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw ParamError(path(key) + ": expected a boolean, got " + type_name(*v));
    return v->get<bool>();
  }
  Fields object(const char* key) const { return Fields(need(key), path(key)); }
  std::optional<Fields> object_or_none(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return Fields(*v, path(key));
  }
  const json& array(const char* key) const {
    const json& v = need(key);
    if (!v.is_array()) throw ParamError(path(key) + ": expected an array, got " + type_name(v));
    return v;
  }
  json raw_or_null(const char* key) const {
    const json* v = find(key);
    return v ? *v : json();
  }
  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  std::string where() const { return path_.empty() ? "params: " : path_ + ": "; }
  const json& need(const char* key) const {
    const json* v = find(key);
    if (!v) throw ParamError(path(key) + ": missing");
    return *v;
  }
  std::string as_string(const json& v, const char* key) const {
    if (!v.is_string()) throw ParamError(path(key) + ": expected a string, got " + type_name(v));
    return v.get<std::string>();
  }
  int as_int(const json& v, const char* key) const {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      throw ParamError(path(key) + ": expected an integer, got " + type_name(v));
    return v.get<int>();
  }

  const json& j_;
  std::string path_;
};

Position read_position(const Fields& f) {
  Position p{f.integer("line"), f.integer("character")};
  if (p.line < 0 || p.character < 0) throw ParamError(f.path("line") + ": positions are not negative");
  return p;
}

Range read_range(const Fields& f) { return {read_position(f.object("start")), read_position(f.object("end"))}; }

// The value at a path of object keys, or nullptr.
const json* at_path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

bool has_path(const json& j, std::initializer_list<const char*> keys) { return at_path(j, keys) != nullptr; }

bool flag_at(const json& j, std::initializer_list<const char*> keys) {
  const json* v = at_path(j, keys);
  return v && v->is_boolean() && v->get<bool>();
}

// The chat fields of an object: messages, and the code (uri, range).
std::optional<TraceValue> trace_value(const std::string& s) {
  if (s == "off") return TraceValue::Off;
  if (s == "messages") return TraceValue::Messages;
  if (s == "verbose") return TraceValue::Verbose;
  return std::nullopt;
}

ChatParams read_chat(const Fields& f) {
  ChatParams p;
  if (f.has("messages")) {
    const json& list = f.array("messages");
    for (size_t i = 0; i < list.size(); ++i) {
      const Fields m(list[i], f.path("messages[" + std::to_string(i) + "]"));
      p.messages.push_back({m.str("role"), m.str("content")});
    }
  }
  p.kind = f.str_or("kind", "chat");
  if (p.kind != "chat" && p.kind != "explain" && p.kind != "fix" && p.kind != "document")
    throw ParamError(f.path("kind") + ": expected chat, explain, fix or document, got \"" + p.kind + "\"");
  if (f.has("uri")) p.uri = f.str("uri");
  if (auto r = f.object_or_none("range")) p.range = read_range(*r);
  if (f.has("code")) p.code = f.str("code");
  p.language = f.str_or("language", "");
  p.work_done_token = f.raw_or_null("workDoneToken");
  p.partial_result_token = f.raw_or_null("partialResultToken");
  return p;
}

}  // namespace

void from_json(const json&, NoParams&) {}

void from_json(const json& j, InitializeParams& p) {
  const Fields f(j, "");
  // Capabilities are read leniently: a client that omits or misshapes one
  // simply does not get the feature.
  const json caps = f.raw_or_null("capabilities");
  auto& c = p.capabilities;
  c.completion = has_path(caps, {"textDocument", "completion"});
  c.inline_completion = has_path(caps, {"textDocument", "inlineCompletion"});
  c.execute_command = has_path(caps, {"workspace", "executeCommand"});
  c.dynamic_configuration = flag_at(caps, {"workspace", "didChangeConfiguration", "dynamicRegistration"});
  c.work_done_progress = flag_at(caps, {"window", "workDoneProgress"});
  c.dynamic_completion = c.completion && flag_at(caps, {"textDocument", "completion", "dynamicRegistration"});
  c.dynamic_inline = c.inline_completion && flag_at(caps, {"textDocument", "inlineCompletion", "dynamicRegistration"});
  c.dynamic_watch = flag_at(caps, {"workspace", "didChangeWatchedFiles", "dynamicRegistration"});
  p.trace = trace_value(f.str_or("trace", "off")).value_or(TraceValue::Off);  // (leniently: unknown is off)
  // The workspace's folders, leniently too: a malformed entry is skipped.
  if (const json* wf = f.find("workspaceFolders"); wf && wf->is_array()) {
    for (const json& w : *wf)
      if (w.is_object() && w.contains("uri") && w["uri"].is_string()) p.roots.push_back(w["uri"]);
  } else if (const json* r = f.find("rootUri"); r && r->is_string()) {
    p.roots.push_back(*r);
  } else if (const json* rp = f.find("rootPath"); rp && rp->is_string() && !rp->get<std::string>().empty()) {
    p.roots.push_back(*rp);
  }
  p.initialization_options = f.raw_or_null("initializationOptions");
  if (!p.initialization_options.is_null() && !p.initialization_options.is_object())
    throw ParamError("initializationOptions: expected an object, got " +
                     std::string(type_name(p.initialization_options)));
}

void from_json(const json& j, DidChangeWatchedFilesParams& p) {
  const json& list = Fields(j, "").array("changes");
  for (size_t i = 0; i < list.size(); ++i) {
    const Fields c(list[i], "changes[" + std::to_string(i) + "]");
    const int type = c.int_or("type", int(FileChangeType::Changed));  // (an unknown one: changed)
    p.changes.push_back({c.str("uri"), type == int(FileChangeType::Created)   ? FileChangeType::Created
                                       : type == int(FileChangeType::Deleted) ? FileChangeType::Deleted
                                                                              : FileChangeType::Changed});
  }
}

void from_json(const json& j, DidResolveDefinitionsParams& p) {
  const Fields f(j, "");
  p.uri = f.object("textDocument").str("uri");
  const json& list = f.array("definitions");
  for (size_t i = 0; i < list.size() && i < 64; ++i) {
    const Fields d(list[i], "definitions[" + std::to_string(i) + "]");
    const Fields loc = d.object("location");
    p.definitions.push_back({d.str("name"), loc.str("uri"), read_range(loc.object("range"))});
  }
}

void from_json(const json& j, DidChangeVisibleRangesParams& p) {
  const Fields f(j, "");
  p.uri = f.object("textDocument").str("uri");
  const json& list = f.array("ranges");
  for (size_t i = 0; i < list.size() && i < 8; ++i)
    p.ranges.push_back(read_range(Fields(list[i], "ranges[" + std::to_string(i) + "]")));
}

void from_json(const json& j, DidChangeWorkspaceFoldersParams& p) {
  const Fields e = Fields(j, "").object("event");
  for (const char* key : {"added", "removed"}) {
    const json& list = e.array(key);
    for (size_t i = 0; i < list.size(); ++i) {
      const Fields w(list[i], std::string("event.") + key + "[" + std::to_string(i) + "]");
      (std::string_view(key) == "added" ? p.added : p.removed).push_back(w.str("uri"));
    }
  }
}

void from_json(const json& j, DidOpenParams& p) {
  const Fields d = Fields(j, "").object("textDocument");
  // languageId and version only label the document: a client that sends them
  // mistyped still gets its document opened (the text and uri are what count).
  const json lang = d.raw_or_null("languageId"), version = d.raw_or_null("version");
  p.text_document = {d.str("uri"), lang.is_string() ? lang.get<std::string>() : "", d.str("text"),
                     version.is_number_integer() ? version.get<int>() : 0};
}

void from_json(const json& j, DidChangeParams& p) {
  const Fields f(j, "");
  const Fields d = f.object("textDocument");
  p.uri = d.str("uri");
  p.version = d.int_or("version", 0);
  const json& list = f.array("contentChanges");
  for (size_t i = 0; i < list.size(); ++i) {
    const Fields c(list[i], "contentChanges[" + std::to_string(i) + "]");
    ContentChange change;
    if (auto r = c.object_or_none("range")) {
      change.range = read_range(*r);
      const Position a = change.range->start, b = change.range->end;
      if (b.line < a.line || (b.line == a.line && b.character < a.character))
        throw ParamError(c.path("range") + ": its end is before its start");
    }
    change.text = c.str("text");
    p.changes.push_back(std::move(change));
  }
}

void from_json(const json& j, DocumentParams& p) { p.uri = Fields(j, "").object("textDocument").str("uri"); }

void from_json(const json& j, DidChangeConfigurationParams& p) {
  const Fields f(j, "");
  p.settings = f.raw_or_null("settings");
  if (p.settings.is_object() && p.settings.contains("moelsp")) p.settings = p.settings["moelsp"];
  if (p.settings.is_null()) p.settings = json::object();
  if (!p.settings.is_object())
    throw ParamError("settings: expected an object, got " + std::string(type_name(p.settings)));
}

void from_json(const json& j, CancelParams& p) {
  const Fields f(j, "");
  p.id = f.raw_or_null("id");
  if (!p.id.is_number_integer() && !p.id.is_string()) throw ParamError("id: expected an integer or a string");
}

void from_json(const json& j, SetTraceParams& p) {
  const std::string v = Fields(j, "").str("value");
  const std::optional<TraceValue> t = trace_value(v);
  if (!t) throw ParamError("value: expected off, messages or verbose, got \"" + v + "\"");
  p.value = *t;
}

void from_json(const json& j, ModelsParams& p) {
  if (j.is_null()) return;
  p.suggest = Fields(j, "").boolean_or("suggest", false);
}

void from_json(const json& j, CompletionParams& p) {
  const Fields f(j, "");
  p.uri = f.object("textDocument").str("uri");
  p.position = read_position(f.object("position"));
  if (auto ctx = f.object_or_none("context")) {
    const int kind = ctx->int_or("triggerKind", int(InlineCompletionTriggerKind::Automatic));
    p.trigger_kind = kind == int(InlineCompletionTriggerKind::Invoked) ? InlineCompletionTriggerKind::Invoked
                                                                       : InlineCompletionTriggerKind::Automatic;
    if (auto sel = ctx->object_or_none("selectedCompletionInfo"))
      p.selected = SelectedCompletionInfo{read_range(sel->object("range")), sel->str("text")};
  }
}

void from_json(const json& j, ChatParams& p) { p = read_chat(Fields(j, "")); }

void from_json(const json& j, ExecuteCommandParams& p) {
  const Fields f(j, "");
  p.command = f.str("command");
  p.work_done_token = f.raw_or_null("workDoneToken");
  if (f.has("arguments")) {
    const json& args = f.array("arguments");
    if (args.empty() || args[0].is_null()) return;
    const json& a = args[0];
    if (p.command == "moelsp.snooze") {
      const json* m = a.is_object() ? Fields(a, "arguments[0]").find("minutes") : &a;
      if (!m) return;
      if (!m->is_number() || m->get<double>() < 0 || m->get<double>() > 1e6)
        throw ParamError(std::string(a.is_object() ? "arguments[0].minutes" : "arguments[0]") +
                         ": expected minutes, a number from 0 to 1000000, got " + m->dump());
      p.minutes = m->get<double>();
    } else {
      p.chat = read_chat(Fields(a, "arguments[0]"));
    }
  }
}

std::string repair_json_text(std::string_view in) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string out;
  out.reserve(in.size());
  const auto hex4 = [&](size_t at, unsigned& v) {
    if (at + 4 > in.size()) return false;
    v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = in[k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else return false;
    }
    return true;
  };
  for (size_t i = 0; i < in.size();) {
    const auto c = static_cast<unsigned char>(in[i]);
    if (c == '\\' && i + 1 < in.size()) {
      unsigned v = 0, lo = 0;
      if (in[i + 1] == 'u' && hex4(i + 2, v) && v >= 0xD800 && v <= 0xDFFF) {
        const bool pair = v <= 0xDBFF && i + 12 <= in.size() && in.substr(i + 6, 2) == "\\u" && hex4(i + 8, lo) &&
                          lo >= 0xDC00 && lo <= 0xDFFF;
        if (pair) {
          out.append(in.substr(i, 12));
          i += 12;
        } else {
          out += "\\ufffd";
          i += 6;
        }
        continue;
      }
      out.append(in.substr(i, 2));  // any other escape, kept as it is
      i += 2;
      continue;
    }
    // UTF-8: the length the lead byte announces, every continuation byte
    // 10xxxxxx, no overlong or surrogate forms, at most U+10FFFF.
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= in.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(in[i + k]) & 0xC0) == 0x80;
    if (ok && n > 1) {
      uint32_t cp = c & (0xFF >> (n + 1));
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(in[i + k]) & 0x3F);
      const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
      ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(in.substr(i, n));
      i += n;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

json to_json(const Position& p) { return {{"line", p.line}, {"character", p.character}}; }
json to_json(const Range& r) { return {{"start", to_json(r.start)}, {"end", to_json(r.end)}}; }

}  // namespace moelsp::lsp
