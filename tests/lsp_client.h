// The in-process LSP client of the tests and the typing bench (after clangd's
// unittests/LSPClient.h): the real server in this process, talking over
// pipes through the real transport. A reader thread files what the server
// writes: the answer to a request sent with call() goes to its callback,
// everything else (notifications, our requests, answers to request()) waits
// in arrival order for next(). Failures throw std::runtime_error, so Catch2
// reports them in a test and the bench prints them; no test framework here.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "lsp/server.h"
#include "lsp/transport.h"

namespace moelsp::test {

using json = nlohmann::json;
using moelsp::lsp::Server;
using moelsp::lsp::ServerOptions;
using moelsp::lsp::Transport;

class Client {
 public:
  using OnResponse = std::function<void(const json& response)>;

  explicit Client(ServerOptions opt = {}) {
    if (pipe(to_server_) != 0 || pipe(from_server_) != 0) throw std::runtime_error("lsp client: pipe() failed");
    server_t_ = std::make_unique<Transport>(to_server_[0], from_server_[1]);
    client_t_ = std::make_unique<Transport>(from_server_[0], to_server_[1]);
    server_ = std::make_unique<Server>(*server_t_, std::move(opt));
    exit_code_ = std::async(std::launch::async, [this] {
      int rc = -1;
      try {
        rc = server_->run();
      } catch (const std::exception& e) {
        fail("the server threw: " + std::string(e.what()));
      }
      server_.reset();         // joins the server's workers: nothing writes to the pipe after this
      close(from_server_[1]);  // (whatever happened: the reader sees the end)
      return rc;
    });
    reader_ = std::thread([this] { read_loop(); });
  }
  ~Client() {
    close_input();
    if (exit_code_.valid()) exit_code_.wait();
    if (reader_.joinable()) reader_.join();
    close(to_server_[0]);
    close(from_server_[0]);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void raw(const std::string& bytes) {
    if (write(to_server_[1], bytes.data(), bytes.size()) != ssize_t(bytes.size()))
      throw std::runtime_error("lsp client: could not write to the server");
  }
  void send(const json& j) { client_t_->write(j.dump()); }
  // A request whose answer next() and response() return.
  void request(int id, const std::string& method, json params = json::object()) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}});
  }
  // A request whose answer goes to `on_response` (on the reader thread);
  // returns its id ("c1", "c2", …: never one of request()'s integers).
  json call(const std::string& method, json params, OnResponse on_response) {
    json id;
    {
      std::lock_guard lock(mu_);
      id = "c" + std::to_string(++calls_);
      callbacks_[id.dump()] = std::move(on_response);
    }
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}});
    return id;
  }
  // A request, waiting for its answer (the whole response object). Not from
  // a callback: the reader thread that would deliver the answer runs it.
  json call(const std::string& method, json params = json::object(), int timeout_ms = 20000) {
    auto answer = std::make_shared<std::promise<json>>();
    auto f = answer->get_future();
    call(method, std::move(params), [answer](const json& r) { answer->set_value(r); });
    if (f.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready)
      throw std::runtime_error("no answer to " + method + " within " + std::to_string(timeout_ms) + " ms");
    return f.get();
  }
  void notify(const std::string& method, json params = json::object()) {
    send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
  }
  // From now on, what next() would return goes to `f` (on the reader thread)
  // instead: a long run that only watches for some messages keeps no queue.
  void on_message(std::function<void(const json&)> f) {
    std::lock_guard lock(mu_);
    on_message_ = std::move(f);
  }

  // The next message not answered through call(), within a timeout.
  json next(int timeout_ms = 20000) {
    std::unique_lock lock(mu_);
    if (!failure_.empty()) throw std::runtime_error(failure_);
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !inbox_.empty() || ended_; }))
      throw std::runtime_error("no message from the server within " + std::to_string(timeout_ms) + " ms");
    if (inbox_.empty()) throw std::runtime_error("the server closed its output" + read_error_);
    json m = std::move(inbox_.front());
    inbox_.pop_front();
    return m;
  }
  // The next message that is a response (skipping notifications), within a timeout.
  json response(int timeout_ms = 20000) {
    for (;;) {
      const json m = next(timeout_ms);
      if (m.contains("id") && !m.contains("method")) return m;
    }
  }
  void initialize(json init_options = json::object(), bool inline_support = true) {
    json caps = {{"textDocument", {{"completion", json::object()}}}};
    if (inline_support) caps["textDocument"]["inlineCompletion"] = json::object();
    request(1, "initialize", {{"capabilities", caps}, {"initializationOptions", init_options}});
    if (response()["id"] != 1) throw std::runtime_error("initialize: the answer has another id");
    notify("initialized");
  }
  void close_input() {
    if (to_server_[1] >= 0) {
      close(to_server_[1]);
      to_server_[1] = -1;
    }
  }
  // Ends the input, waits for the server to exit and for the reader to take
  // what it wrote last: no callback runs after this returns.
  int exit_code() {
    close_input();
    const int rc = exit_code_.get();
    if (reader_.joinable()) reader_.join();
    if (!failure_.empty()) throw std::runtime_error(failure_);
    return rc;
  }

 private:
  void fail(const std::string& why) {
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = why;
    cv_.notify_all();
  }
  void read_loop() {
    while (auto m = client_t_->read()) {
      std::unique_lock lock(mu_);
      if (!m->error.empty()) {
        read_error_ = ": a malformed message: " + m->error;
        break;
      }
      json j = json::parse(m->body, nullptr, false);
      if (j.is_discarded()) {
        read_error_ = ": a message that is not JSON";
        break;
      }
      const bool answer = j.contains("id") && !j.contains("method");
      std::function<void(const json&)> handler;
      if (auto it = answer ? callbacks_.find(j["id"].dump()) : callbacks_.end(); it != callbacks_.end()) {
        handler = std::move(it->second);
        callbacks_.erase(it);
      } else if (on_message_) {
        handler = on_message_;
      }
      if (handler) {
        lock.unlock();
        try {
          handler(j);
        } catch (const std::exception& e) {  // reported by next() and exit_code(), not std::terminate
          fail(std::string("a callback threw: ") + e.what());
        }
        continue;
      }
      inbox_.push_back(std::move(j));
      cv_.notify_all();
    }
    std::lock_guard lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  int to_server_[2]{-1, -1}, from_server_[2]{-1, -1};
  std::unique_ptr<Transport> server_t_, client_t_;
  std::unique_ptr<Server> server_;
  std::future<int> exit_code_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<json> inbox_;
  std::map<std::string, OnResponse> callbacks_;  // by id.dump()
  std::function<void(const json&)> on_message_;
  int calls_ = 0;
  bool ended_ = false;
  std::string read_error_;
  std::string failure_;  // a callback's exception or the server's: thrown by next() and exit_code()
};

// (threads, VmRSS in KiB) of this process: the server runs in-process.
inline std::pair<int, long> proc_status() {
  std::ifstream in("/proc/self/status");
  int threads = 0;
  long rss = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stol(line.substr(6));
  }
  return {threads, rss};
}

#ifdef MOELSP_TEST_DATA
// The reference model's options (tests/data; a missing file is an error, never a skip).
inline json model_options() {
  const std::string model = std::string(MOELSP_TEST_DATA) + "/reference/qwen3moe-ref.gguf";
  if (!std::filesystem::exists(model)) throw std::runtime_error("test data file missing: " + model);
  return {{"model", model},
          {"threads", 2},
          {"contextSize", 1024},
          {"completion", {{"maxTokens", 8}, {"timeBudgetMs", 5000}}}};
}
#endif

// Waits for moelsp/status with state ready (throws on error).
inline void wait_ready(Client& c) {
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "moelsp/status") {
      const std::string st = m["params"]["state"];
      if (st == "error") throw std::runtime_error("the model did not load: " + m["params"].dump());
      if (st == "ready") return;
    }
  }
}

}  // namespace moelsp::test
