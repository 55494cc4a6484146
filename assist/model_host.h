// The model both front ends serve: loaded in the background (or a remote
// backend named by backend.url), its phase, reload, and what runs as JSON
// (plan, hardware, experts, KV cache, scheduler) and Prometheus lines. The
// LSP (moelsp/status, progress, messages) and `moelsp serve` (/health,
// /v1/status, /metrics) keep only how they tell their clients.
//
// Threads: load() returns at once; the engine is built on the host's loader
// thread, which calls Hooks::done when it ends. A remote backend needs no
// load: load() sets it up and calls done before returning.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json_fwd.hpp>

#include "assist/settings.h"

namespace moelsp {
class Model;
}

namespace moelsp::assist {

class Service;
class Backend;
class EngineBackend;
class RemoteBackend;

// Where the model stands (the LSP's moelsp/status adds "busy": ready with work).
enum class ModelPhase { Loading, Ready, Error };
const char* to_string(ModelPhase p);

// What the engine was built from: a settings change reloads it only when it
// changes one of these.
struct LoadKey {
  std::optional<std::string> model, backend_url;
  PlanOverrides plan;
  std::string prompt_cache;  // promptCache.dir
};

class ModelHost {
 public:
  struct Snapshot {
    ModelPhase phase = ModelPhase::Loading;
    std::string message = {};      // "loading FILE", "model loaded: FILE", the error
    std::string file = {};         // the GGUF (empty with a remote backend)
    std::string backend_url = {};  // a remote backend's URL (empty for the engine)
    std::shared_ptr<Model> model = {};
    std::shared_ptr<EngineBackend> backend = {};
    std::shared_ptr<RemoteBackend> remote = {};
    std::string plan_text = {};              // the plan, a line per decision with its reason
    int n_ctx = 0;                           // tokens per sequence the plan allows
    uint64_t ram_bytes = 0, vram_bytes = 0;  // what the plan holds (the engine)
  };
  // Which of the service's backends a load fills: the model (chat, and
  // completions when there is no other), or the completion model.
  enum class Slot { Main, Completion };
  struct Hooks {
    // On the caller's thread, the phase now Loading, before the loader starts.
    std::function<void(const Snapshot&)> loading;
    // When a load ends, ready or failed: on the loader thread (the engine),
    // or in load() (a remote backend).
    std::function<void(const Snapshot&)> done;
  };
  ModelHost(Service& service, Hooks hooks, Slot slot = Slot::Main);
  ~ModelHost();  // waits for a load in flight
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  // Loads what `s` names: backend.url → a remote backend; else the GGUF
  // s.model (the caller resolves the default; empty: the Error phase, and done). `full_context`:
  // the plan gives sequences the model's whole context when memory allows
  // (agents' prompts). The service gets the backend once it is ready.
  void load(const Settings& s, bool full_context = false);
  // Memory another model of this process holds: later loads plan it as
  // taken (PlanRequest::reserved_ram_bytes).
  void reserve(uint64_t ram_bytes, uint64_t vram_bytes);
  // Waits for a load in flight, then drops the engine (freed when the last
  // request holding it lets go): the service has no backend until load().
  void unload();
  // The Error phase without a load (nothing to load: the caller's message).
  void fail(std::string message);

  Snapshot snapshot() const;
  ModelPhase phase() const;
  bool is_remote() const;  // a remote backend generates (its privacy rules apply)
  LoadKey loaded() const;

  // What runs, as a JSON object: "model", "plan", "hardware", "experts",
  // "device", "kvCache", "promptCache", "scheduler" for the engine; "model"
  // and "backend" for a remote; {} while nothing is loaded. Names and
  // messages come from files and servers: dump it with
  // error_handler_t::replace (bad UTF-8 becomes U+FFFD).
  nlohmann::json status() const;
  // The engine's gauges as Prometheus text (KV blocks, prefix and expert
  // cache hit rates, scheduler, per-layer routing entropy); "" without an engine.
  std::string metrics_text() const;

 private:
  void load_engine(Settings s, bool full_context);
  void load_remote(const Settings& s);
  void set(ModelPhase phase, std::string message);

  void install(std::shared_ptr<Backend> b);  // into the service's slot

  Service& service_;
  Hooks hooks_;
  Slot slot_;
  uint64_t reserved_ram_ = 0, reserved_vram_ = 0;  // guarded by mu_
  mutable std::mutex mu_;
  Snapshot state_;
  // The plan and the machine as loaded, parsed once (a status is built on
  // every busy change: each completion's start and end).
  std::shared_ptr<const nlohmann::json> plan_json_, hw_json_;
  LoadKey loaded_;
  std::thread loader_;
};

}  // namespace moelsp::assist
