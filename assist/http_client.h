// A small HTTP/1.1 client for the remote backend: POST a JSON body, read the
// answer as it streams. http:// and https:// (OpenSSL through Boost.Asio,
// certificates verified against the system's CAs or a given PEM file, host
// name checked, SNI sent). Idle keep-alive connections are reused; every
// connect, write and read has a deadline; a request is retried once on a new
// connection only where that is safe — the connection could not be made, or
// a reused one turned out closed before the server answered a byte.
// Boost.Beast and OpenSSL stay in http_client.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "assist/backend.h"

namespace moelsp::assist {

struct HttpClientOptions {
  std::string url;  // http[s]://host[:port][/base path]
  // An HTTP proxy (http://host:port): https goes through a CONNECT tunnel,
  // http as absolute-form requests. Empty: none (see proxy_from_env).
  std::string proxy = {};
  std::string api_key = {};  // Authorization: Bearer
  int timeout_s = 30;        // connect, TLS handshake, and each write or read
  std::string ca_file = {};  // PEM; empty: the system's CAs
  bool verify_tls = true;
  size_t max_idle = 4;  // keep-alive connections kept for reuse
};

class HttpClient {
 public:
  // Parses the URL and sets up TLS; throws std::runtime_error naming the problem.
  explicit HttpClient(HttpClientOptions opt);
  ~HttpClient();

  struct Head {
    int status = 0;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> fields;  // every header, as received
    // A header's value ("" when absent); the name in any case.
    std::string field(std::string_view name) const;
  };
  struct Request {
    std::string method = "GET";
    std::string target;  // path and query, after the URL's base path
    std::vector<std::pair<std::string, std::string>> fields;
    std::string body;  // sent when not empty (a content type among `fields`)
  };
  // Any request; the answer as post() gives it.
  std::string send(const Request& req, const std::function<void(const Head&)>& on_head,
                   const std::function<bool(std::string_view)>& on_data, Ticket& ticket);
  // POSTs `body` (JSON) to base path + `path`. on_head gets the status line's
  // code and content type, on_data each piece of the body as it arrives and
  // returns false to stop reading (that connection is closed, not reused).
  // Returns "" or the error. ticket.cancel() closes the connection at once.
  std::string post(const std::string& path, const std::string& body, const std::function<void(const Head&)>& on_head,
                   const std::function<bool(std::string_view)>& on_data, Ticket& ticket);

  bool tls() const;
  // The origin this client talks to: scheme://host[:port] (no base path).
  std::string origin() const;
  // Connections opened so far (tests: keep-alive reuses them).
  size_t connections_opened() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The proxy the environment names for `url`, as curl reads it: HTTPS_PROXY
// (https_proxy) for https, HTTP_PROXY (http_proxy) for http, none when the
// host matches NO_PROXY (no_proxy: comma-separated host names or domain
// suffixes, `*` for all). "" when none.
std::string proxy_from_env(const std::string& url);

}  // namespace moelsp::assist
