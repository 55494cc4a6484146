// The test client of the LSP tests: the real server in-process, talking
// over pipes through the real transport, and the reference model's options.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lsp/server.h"
#include "lsp/transport.h"
#include "test_data.h"

namespace moelsp::test {

using json = nlohmann::json;
using moelsp::lsp::Server;
using moelsp::lsp::ServerOptions;
using moelsp::lsp::Transport;

class Client {
 public:
  Client() {
    REQUIRE(pipe(to_server_) == 0);
    REQUIRE(pipe(from_server_) == 0);
    server_t_ = std::make_unique<Transport>(to_server_[0], from_server_[1]);
    client_t_ = std::make_unique<Transport>(from_server_[0], to_server_[1]);
    server_ = std::make_unique<Server>(*server_t_, ServerOptions{});
    exit_code_ = std::async(std::launch::async, [this] {
      const int rc = server_->run();
      server_.reset();  // joins the server's workers: nothing writes to the pipe after this
      if (!out_closed_.exchange(true)) close(from_server_[1]);
      return rc;
    });
  }
  ~Client() {
    close_input();
    if (exit_code_.valid()) exit_code_.wait();
    server_.reset();
    close(to_server_[0]);
    close(from_server_[0]);
  }

  void raw(const std::string& bytes) {
    REQUIRE(write(to_server_[1], bytes.data(), bytes.size()) == ssize_t(bytes.size()));
  }
  void send(const json& j) { client_t_->write(j.dump()); }
  void request(int id, const std::string& method, json params = json::object()) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
  }
  void notify(const std::string& method, json params = json::object()) {
    send({{"jsonrpc", "2.0"}, {"method", method}, {"params", params}});
  }
  // Next message that is a response (skipping notifications), within a timeout.
  json response(int timeout_ms = 20000) {
    for (;;) {
      const json m = next(timeout_ms);
      if (m.contains("id") && !m.contains("method")) return m;
    }
  }
  json next(int timeout_ms = 20000) {
    auto f = std::async(std::launch::async, [this] { return client_t_->read(); });
    if (f.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
      // Unblock the reader (end of input) so the failure is reported instead of hanging.
      if (!out_closed_.exchange(true)) close(from_server_[1]);
      f.wait();
      FAIL("no message from the server within " << timeout_ms << " ms");
    }
    auto m = f.get();
    REQUIRE(m.has_value());
    REQUIRE(m->error.empty());
    return json::parse(m->body);
  }
  void initialize(json init_options = json::object(), bool inline_support = true) {
    json caps = {{"textDocument", {{"completion", json::object()}}}};
    if (inline_support) caps["textDocument"]["inlineCompletion"] = json::object();
    request(1, "initialize", {{"capabilities", caps}, {"initializationOptions", init_options}});
    const json r = response();
    REQUIRE(r["id"] == 1);
    notify("initialized");
  }
  void close_input() {
    if (to_server_[1] >= 0) {
      close(to_server_[1]);
      to_server_[1] = -1;
    }
  }
  int exit_code() {
    close_input();
    return exit_code_.get();
  }

 private:
  int to_server_[2]{-1, -1}, from_server_[2]{-1, -1};
  std::unique_ptr<Transport> server_t_, client_t_;
  std::unique_ptr<Server> server_;
  std::future<int> exit_code_;
  std::atomic<bool> out_closed_{false};
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

inline json model_options() {
  return {{"model", moelsp::test::data_path("reference/qwen3moe-ref.gguf")},
          {"threads", 2},
          {"contextSize", 1024},
          {"completion", {{"maxTokens", 8}, {"timeBudgetMs", 5000}}}};
}

// Waits for moelsp/status with state ready (or fails on error).
inline void wait_ready(Client& c) {
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "moelsp/status") {
      const std::string st = m["params"]["state"];
      REQUIRE(st != "error");
      if (st == "ready") return;
    }
  }
}

}  // namespace moelsp::test
