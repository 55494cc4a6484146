// `moelsp serve`'s transport: HTTP/1.1 over Boost.Beast, one thread per
// connection (bounded), the Api behind it. Beast stays in http_server.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace moelsp::http {

class Api;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (port() tells which)
  size_t max_body = 8u << 20;  // bytes; larger bodies get 413
  size_t max_header = 16u << 10;
  int max_connections = 64;  // beyond: 503 and close
  int io_timeout_s = 30;     // a client that stalls a read or write longer is dropped
  std::string cors_origin;   // empty: no CORS headers
};

// Serves HTTP on one connected stream socket until the peer closes it (or
// its deadline passes), then closes `fd`: what each accepted connection
// gets, without listening. For tests and fuzzing through a socketpair.
void serve_socket(Api& api, const ServerOptions& opt, int fd);

class HttpServer {
 public:
  HttpServer(Api& api, ServerOptions opt);  // binds and listens (throws with the reason)
  ~HttpServer();
  int port() const;
  // Serves until stop() (from a signal handler thread or another thread).
  void run();
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moelsp::http
