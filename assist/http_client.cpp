// HTTP/1.1 (and over TLS) with Boost.Beast. Each connection owns an
// io_context; the calling thread runs one asynchronous operation at a time on
// it to completion, which is how Beast's tcp_stream deadlines apply (its
// synchronous calls have none, and SO_RCVTIMEO is swallowed by Asio's
// blocking reads, which poll again). A cancel from another thread is posted
// to that io_context, so the socket is closed on the thread that uses it.
#include "assist/http_client.h"

// GCC 12 with sanitizers warns that Beast's parser (boost::optional in
// basic_parser::content_length) "may be used uninitialized": a false positive
// inside the library, which -Werror would turn into a failed build.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <openssl/evp.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <spdlog/spdlog.h>

namespace moelsp::assist {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

struct Url {
  bool tls = false;
  std::string host, port, base;
};

Url parse_url(const std::string& u) {
  Url url;
  std::string rest;
  if (u.rfind("https://", 0) == 0) {
    url.tls = true;
    rest = u.substr(8);
  } else if (u.rfind("http://", 0) == 0) {
    rest = u.substr(7);
  } else {
    throw std::runtime_error(u + ": must start with http:// or https://");
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    url.base = rest.substr(slash);
    rest.resize(slash);
    while (!url.base.empty() && url.base.back() == '/') url.base.pop_back();
  }
  // [::1]:8080, host:8080, host
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) throw std::runtime_error(u + ": unclosed [");
    url.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    url.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
  }
  url.port = !port.empty() ? port : url.tls ? "443" : "80";
  if (url.host.empty()) throw std::runtime_error(u + ": no host");
  if (url.port.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error(u + ": the port must be a number");
  return url;
}

}  // namespace

// One connection: its own io_context, a TCP stream, and TLS over it for https.
struct Conn {
  net::io_context io;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buf;  // bytes read past the previous answer stay here

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  // Runs one asynchronous operation to completion on this thread.
  template <class Start>
  beast::error_code run(Start start) {
    beast::error_code out = net::error::operation_aborted;
    start([&out](beast::error_code ec, auto&&...) { out = ec; });
    io.restart();
    io.run();
    return out;
  }
  template <class F>
  beast::error_code with_stream(F f) {
    return secure ? f(*secure) : f(*plain);
  }
  void close() {
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }
};

struct HttpClient::Impl {
  HttpClientOptions opt;
  Url url;
  std::optional<Url> proxy;
  std::string proxy_auth;  // Proxy-Authorization, from the proxy URL's user:password
  std::optional<ssl::context> tls_ctx;
  std::mutex mu;
  std::deque<std::unique_ptr<Conn>> idle;
  std::atomic<size_t> opened{0};

  std::chrono::seconds timeout() const { return std::chrono::seconds(opt.timeout_s); }

  // A new connection, TLS handshake done; nullptr and `err` on failure.
  std::unique_ptr<Conn> connect(std::string& err) {
    auto c = std::make_unique<Conn>();
    if (url.tls) c->secure.emplace(c->io, *tls_ctx);
    else c->plain.emplace(c->io);
    const Url& hop = proxy ? *proxy : url;  // the first hop: the proxy, when there is one
    const std::string via = proxy ? " (the proxy " + hop.host + ":" + hop.port + ")" : "";
    tcp::resolver resolver(c->io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(hop.host, hop.port, ec);
    if (ec) {
      err = "cannot resolve " + hop.host + via + ": " + ec.message();
      return nullptr;
    }
    c->lowest().expires_after(timeout());
    ec = c->run([&](auto h) { c->lowest().async_connect(endpoints, std::move(h)); });
    if (ec) {
      err = "cannot connect to " + hop.host + ":" + hop.port + via + ": " + ec.message();
      return nullptr;
    }
    if (proxy && url.tls && !tunnel(*c, err)) return nullptr;
    if (c->secure) {
      // SNI, and the certificate must name the host.
      if (!SSL_set_tlsext_host_name(c->secure->native_handle(), url.host.c_str())) {
        err = "TLS: cannot set the server name";
        return nullptr;
      }
      if (opt.verify_tls) c->secure->set_verify_callback(ssl::host_name_verification(url.host));
      c->lowest().expires_after(timeout());
      ec = c->run([&](auto h) { c->secure->async_handshake(ssl::stream_base::client, std::move(h)); });
      if (ec) {
        err = "TLS handshake with " + url.host + ":" + url.port + " failed: " + ec.message();
        if (opt.verify_tls && ec.category() == net::error::get_ssl_category())
          err += " (the certificate is checked against " +
                 (opt.ca_file.empty() ? std::string("the system's CAs") : "backend.caFile " + opt.ca_file) + ")";
        return nullptr;
      }
    }
    ++opened;
    return c;
  }

  // CONNECT host:port through the proxy: TLS then runs inside the tunnel.
  bool tunnel(Conn& c, std::string& err) {
    const std::string authority = url.host + ":" + url.port;
    bhttp::request<bhttp::empty_body> req{bhttp::verb::connect, authority, 11};
    req.set(bhttp::field::host, authority);
    req.set(bhttp::field::user_agent, "moelsp");
    if (!proxy_auth.empty()) req.set(bhttp::field::proxy_authorization, proxy_auth);
    c.lowest().expires_after(timeout());
    beast::error_code ec = c.run([&](auto h) { bhttp::async_write(c.lowest(), req, std::move(h)); });
    bhttp::response_parser<bhttp::empty_body> parser;
    parser.skip(true);  // a CONNECT answer has no body
    if (!ec) ec = c.run([&](auto h) { bhttp::async_read_header(c.lowest(), c.buf, parser, std::move(h)); });
    if (ec) {
      err = "the proxy " + proxy->host + ":" + proxy->port + " did not open a tunnel to " + authority + ": " +
            ec.message();
      return false;
    }
    if (parser.get().result_int() != 200) {
      err = "the proxy " + proxy->host + ":" + proxy->port + " refused a tunnel to " + authority + ": HTTP " +
            std::to_string(parser.get().result_int());
      return false;
    }
    return true;
  }

  std::unique_ptr<Conn> take_idle() {
    std::lock_guard lock(mu);
    if (idle.empty()) return nullptr;
    auto c = std::move(idle.back());
    idle.pop_back();
    return c;
  }

  void give_back(std::unique_ptr<Conn> c) {
    std::lock_guard lock(mu);
    idle.push_back(std::move(c));
    while (idle.size() > opt.max_idle) idle.pop_front();
  }

  enum class Outcome { Done, Failed, Stale };

  // One attempt on `c`. Stale: the reused connection was closed before the
  // server answered anything (safe to send again on a new one).
  Outcome exchange(Conn& c, bool reused, const Request& r, const std::function<void(const Head&)>& on_head,
                   const std::function<bool(std::string_view)>& on_data, Ticket& ticket, std::string& err, bool& keep) {
    keep = false;
    ticket.on_cancel([&c] { net::post(c.io, [&c] { c.close(); }); });
    struct Unhook {
      Ticket& t;
      ~Unhook() { t.on_cancel(nullptr); }
    } unhook{ticket};
    // Through a proxy, plain http names the whole URL (absolute form).
    const std::string prefix =
        proxy && !url.tls ? "http://" + url.host + (url.port == "80" ? "" : ":" + url.port) : std::string();
    bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(r.method), prefix + url.base + r.target, 11};
    req.set(bhttp::field::host, url.port == (url.tls ? "443" : "80") ? url.host : url.host + ":" + url.port);
    req.set(bhttp::field::user_agent, "moelsp");
    if (!opt.api_key.empty()) req.set(bhttp::field::authorization, "Bearer " + opt.api_key);
    for (const auto& [k, v] : r.fields) req.set(k, v);
    if (!prefix.empty() && !proxy_auth.empty()) req.set(bhttp::field::proxy_authorization, proxy_auth);
    req.keep_alive(true);
    req.body() = r.body;
    if (!r.body.empty() || r.method == "POST") req.prepare_payload();
    c.lowest().expires_after(timeout());
    beast::error_code ec =
        c.with_stream([&](auto& s) { return c.run([&](auto h) { bhttp::async_write(s, req, std::move(h)); }); });
    if (ticket.cancelled()) return Outcome::Done;
    if (ec) {
      err = "sending the request: " + ec.message();
      return reused ? Outcome::Stale : Outcome::Failed;
    }
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);
    c.lowest().expires_after(timeout());
    ec = c.with_stream(
        [&](auto& s) { return c.run([&](auto h) { bhttp::async_read_header(s, c.buf, parser, std::move(h)); }); });
    if (ticket.cancelled()) return Outcome::Done;
    if (ec) {
      err = "reading the answer: " + ec.message();
      const bool nothing = ec == bhttp::error::end_of_stream || ec == net::error::eof ||
                           ec == net::error::connection_reset || ec == ssl::error::stream_truncated;
      return reused && nothing ? Outcome::Stale : Outcome::Failed;
    }
    Head head{int(parser.get().result_int()), std::string(parser.get()[bhttp::field::content_type]), {}};
    for (const auto& f : parser.get()) head.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
    on_head(head);
    char chunk[8192];
    bool go_on = true;
    while (!parser.is_done() && go_on) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      c.lowest().expires_after(timeout());
      ec = c.with_stream(
          [&](auto& s) { return c.run([&](auto h) { bhttp::async_read(s, c.buf, parser, std::move(h)); }); });
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ticket.cancelled()) return Outcome::Done;
      const size_t got = sizeof chunk - parser.get().body().size;
      if (got) go_on = on_data(std::string_view(chunk, got));
      if (ec) {
        err = "reading the answer: " + ec.message();
        return Outcome::Failed;
      }
    }
    keep = parser.is_done() && parser.keep_alive();  // read to its end: the next request can follow
    return Outcome::Done;
  }
};

HttpClient::HttpClient(HttpClientOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->url = parse_url(opt.url);
  if (!opt.proxy.empty()) {
    // http://user:password@host:port: the credentials go into
    // Proxy-Authorization (Basic), never into a message.
    std::string proxy = opt.proxy;
    const size_t scheme = proxy.find("://"), at = proxy.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
      const std::string creds = proxy.substr(scheme + 3, at - scheme - 3);
      proxy.erase(scheme + 3, at - scheme - 2);
      std::string b64(4 * ((creds.size() + 2) / 3) + 1, '\0');
      const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                    reinterpret_cast<const unsigned char*>(creds.data()), int(creds.size()));
      b64.resize(size_t(std::max(0, n)));
      impl_->proxy_auth = "Basic " + b64;
    }
    impl_->proxy = parse_url(proxy);
    if (impl_->proxy->tls) throw std::runtime_error("proxy " + proxy + ": only http:// proxies are supported");
  }
  if (impl_->url.tls) {
    auto& ctx = impl_->tls_ctx.emplace(ssl::context::tls_client);
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                    ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    beast::error_code ec;
    if (!opt.ca_file.empty()) {
      ctx.load_verify_file(opt.ca_file, ec);
      if (ec) throw std::runtime_error("backend.caFile " + opt.ca_file + ": " + ec.message());
    } else {
      ctx.set_default_verify_paths(ec);
      if (ec) throw std::runtime_error("TLS: the system's CA certificates cannot be read: " + ec.message());
    }
    ctx.set_verify_mode(opt.verify_tls ? ssl::verify_peer : ssl::verify_none);
    if (!opt.verify_tls) spdlog::warn("backend {}: certificate verification is off (backend.verifyTls)", opt.url);
  }
  impl_->opt = std::move(opt);
}

HttpClient::~HttpClient() = default;

bool HttpClient::tls() const { return impl_->url.tls; }

std::string HttpClient::origin() const {
  const Url& u = impl_->url;
  const bool default_port = u.port == (u.tls ? "443" : "80");
  return (u.tls ? "https://" : "http://") + u.host + (default_port ? "" : ":" + u.port);
}

std::string HttpClient::Head::field(std::string_view name) const {
  for (const auto& [k, v] : fields)
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return v;
  return "";
}

std::string proxy_from_env(const std::string& url) {
  const auto env = [](const char* upper, const char* lower) {
    const char* v = std::getenv(lower);
    if (!v || !*v) v = std::getenv(upper);
    return std::string(v ? v : "");
  };
  const bool tls = url.rfind("https://", 0) == 0;
  std::string proxy = tls ? env("HTTPS_PROXY", "https_proxy") : env("HTTP_PROXY", "http_proxy");
  if (proxy.empty()) return "";
  if (proxy.find("://") == std::string::npos) proxy = "http://" + proxy;
  const std::string host = parse_url(url).host;
  const std::string no_proxy = env("NO_PROXY", "no_proxy");
  for (size_t at = 0; at <= no_proxy.size();) {
    size_t end = no_proxy.find(',', at);
    if (end == std::string::npos) end = no_proxy.size();
    std::string entry = no_proxy.substr(at, end - at);
    at = end + 1;
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (const size_t colon = entry.rfind(':');
        colon != std::string::npos && entry.find(']') == std::string::npos && entry.find(':') == colon)
      entry.resize(colon);  // host:port: the host
    if (!entry.empty() && entry.front() == '.') entry.erase(0, 1);
    if (entry.empty()) continue;
    if (entry == "*" || host == entry ||
        (host.size() > entry.size() && host.ends_with(entry) && host[host.size() - entry.size() - 1] == '.'))
      return "";
  }
  return proxy;
}
size_t HttpClient::connections_opened() const { return impl_->opened; }

std::string HttpClient::post(const std::string& path, const std::string& body,
                             const std::function<void(const Head&)>& on_head,
                             const std::function<bool(std::string_view)>& on_data, Ticket& ticket) {
  return send({.method = "POST",
               .target = path,
               .fields = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream, application/json"}},
               .body = body},
              on_head, on_data, ticket);
}

std::string HttpClient::send(const Request& r, const std::function<void(const Head&)>& on_head,
                             const std::function<bool(std::string_view)>& on_data, Ticket& ticket) {
  std::string err;
  // A reused connection the server has closed meanwhile (its keep-alive
  // timeout) fails before any answer: send again on a new one. A failed
  // connect is tried once more after a short pause. Nothing is retried once
  // the server may have started on the request.
  for (int attempt = 0; attempt < 3 && !ticket.cancelled(); ++attempt) {
    std::unique_ptr<Conn> c = attempt == 0 ? impl_->take_idle() : nullptr;
    const bool reused = c != nullptr;
    if (!c) {
      c = impl_->connect(err);
      if (!c) {
        if (attempt > 0) return err;
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        continue;
      }
    }
    err.clear();
    bool keep = false;
    const Impl::Outcome out = impl_->exchange(*c, reused, r, on_head, on_data, ticket, err, keep);
    if (keep && !ticket.cancelled()) impl_->give_back(std::move(c));
    if (out == Impl::Outcome::Stale) continue;
    return ticket.cancelled() ? "" : err;
  }
  return ticket.cancelled() ? "" : err;
}

}  // namespace moelsp::assist
