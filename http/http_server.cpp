// HTTP/1.1 on Boost.Beast. The acceptor runs on one io_context thread; each
// connection gets a thread of its own (at most max_connections) with its own
// io_context, on which every read and write runs as one asynchronous
// operation under a deadline (beast::tcp_stream::expires_after): a client
// that stalls or trickles bytes loses its connection after io_timeout_s for
// the whole request, and holds only its own thread meanwhile. Generation
// runs on a thread of its own while the connection's thread writes the
// streamed tokens (api.cpp's pump), so a slow reader never holds the
// engine; a failed write, or a client seen gone while its request runs
// (streamed or not), cancels the generation. Beyond max_connections the
// acceptor's thread still answers /health. Stopping closes idle
// connections at once and lets busy ones send their last answer.
#include "http_server.h"

// GCC 12 with sanitizers warns that Beast's parser (boost::optional in
// basic_parser::content_length) "may be used uninitialized": a false positive
// inside the library, which -Werror would turn into a failed build.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <list>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "api.h"
#include "engine/hw.h"

namespace moelsp::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

using Clock = std::chrono::steady_clock;

// A connection: its socket on an io_context of its own, so one operation at
// a time can run to completion (or its deadline) on the calling thread.
struct Conn {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  int fd = -1;

  Conn(const tcp::socket::protocol_type& proto, tcp::socket::native_handle_type handle) : fd(handle) {
    stream.socket().assign(proto, handle);
  }
  template <class Start>
  beast::error_code run_until(Clock::time_point deadline, Start&& start) {
    beast::error_code result = net::error::would_block;
    stream.expires_at(deadline);
    start([&result](beast::error_code ec, std::size_t) { result = ec; });
    ioc.restart();
    ioc.run();
    if (result == beast::error::timeout) {  // Beast has closed the socket: its number may be reused
      std::lock_guard lock(mu_);
      fd = -1;
    }
    return result;
  }
  template <class Start>
  beast::error_code run(int seconds, Start&& start) {
    return run_until(Clock::now() + std::chrono::seconds(seconds), std::forward<Start>(start));
  }

  // Whether the client has closed or reset the connection, without reading
  // anything: a pipelined next request stays in the socket for serve().
  bool client_gone() {
    std::lock_guard lock(mu_);
    if (fd < 0) return true;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  // Shutdown's two steps: connections waiting for a request are closed at
  // once; one serving a request finishes it (its generation was cancelled)
  // and is closed after its answer, or by abort() after a grace period.
  bool begin_request() {
    std::lock_guard lock(mu_);
    busy_ = !aborted_;
    return busy_;
  }
  void end_request() {
    std::lock_guard lock(mu_);
    busy_ = false;
  }
  void abort_if_idle() {
    std::lock_guard lock(mu_);
    if (!busy_) abort_locked();
  }
  // From any thread: whatever the connection is doing ends with an error.
  void abort() {
    std::lock_guard lock(mu_);
    abort_locked();
  }

 private:
  void abort_locked() {
    aborted_ = true;
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  std::mutex mu_;
  bool busy_ = false, aborted_ = false;
};

// Writes to the stream of SSE events need this long at most: a client that
// stops reading a stream is dropped (and its generation cancelled).
constexpr int kEventWriteTimeoutS = 5;

// Server-sent events; chunked on HTTP/1.1, raw until close on HTTP/1.0.
class SseStream final : public EventStream {
 public:
  SseStream(Conn& c, unsigned version, const std::string& cors) : c_(c), chunked_(version >= 11) {
    bhttp::response<bhttp::empty_body> res{bhttp::status::ok, version};
    res.set(bhttp::field::server, "moelsp");
    res.set(bhttp::field::content_type, "text/event-stream");
    res.set(bhttp::field::cache_control, "no-cache");
    if (!cors.empty()) res.set(bhttp::field::access_control_allow_origin, cors);
    res.keep_alive(false);  // the stream ends with the connection
    res.chunked(chunked_);
    bhttp::response_serializer<bhttp::empty_body> sr{res};
    ok_ = !c_.run(kEventWriteTimeoutS, [&](auto h) { bhttp::async_write_header(c_.stream, sr, h); });
  }
  bool send_event(const std::string& name, const std::string& data) override {
    if (!ok_) return false;
    const std::string event = (name.empty() ? "" : "event: " + name + "\n") + "data: " + data + "\n\n";
    if (chunked_)
      ok_ = !c_.run(kEventWriteTimeoutS,
                    [&](auto h) { net::async_write(c_.stream, bhttp::make_chunk(net::buffer(event)), h); });
    else ok_ = !c_.run(kEventWriteTimeoutS, [&](auto h) { net::async_write(c_.stream, net::buffer(event), h); });
    return ok_;
  }
  bool ok() const override { return ok_; }
  void finish() {
    if (ok_ && chunked_)
      c_.run(kEventWriteTimeoutS, [&](auto h) { net::async_write(c_.stream, bhttp::make_chunk_last(), h); });
  }

 private:
  Conn& c_;
  bool chunked_;
  bool ok_ = false;
};

}  // namespace

struct HttpServer::Impl {
  Api& api;
  ServerOptions opt;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  struct Slot {
    std::thread thread;
    std::shared_ptr<Conn> conn;  // null once the thread has finished
  };
  std::list<Slot> conns;
  std::atomic<int> live{0};

  Impl(Api& a, ServerOptions o) : api(a), opt(std::move(o)) {}

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (stopping) return;
      if (!ec) {
        try {
          start(std::move(s));
        } catch (const std::exception& e) {  // e.g. out of file descriptors for its io_context
          spdlog::warn("http: cannot serve a connection: {}", e.what());
        }
      } else std::this_thread::sleep_for(std::chrono::milliseconds(50));  // e.g. out of file descriptors: no busy loop
      accept();
    });
  }

  void start(tcp::socket s) {
    std::unique_lock lock(mu);
    for (auto it = conns.begin(); it != conns.end();) {  // reap finished connections' threads
      if (!it->conn) {
        it->thread.join();
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    if (live >= opt.max_connections) {
      lock.unlock();
      overflow(std::move(s));
      return;
    }
    beast::error_code ec;
    const auto proto = s.local_endpoint(ec).protocol();
    const auto handle = s.release();
    std::shared_ptr<Conn> conn;
    try {
      conn = std::make_shared<Conn>(proto, handle);
    } catch (...) {
      ::close(handle);
      throw;
    }
    ++live;
    conns.emplace_back();
    auto slot = std::prev(conns.end());
    slot->conn = conn;
    try {
      slot->thread = std::thread([this, conn, slot] {
        try {
          serve(*conn);
        } catch (const std::exception& e) {
          spdlog::error("http connection: {}", e.what());
        }
        --live;
        std::lock_guard done(mu);  // (abort() reads the socket under it: close it here too)
        close(*conn);
        slot->conn.reset();  // the next accept joins this thread
      });
    } catch (const std::system_error& e) {  // no thread to be had: refuse this one
      --live;
      slot->conn.reset();
      conns.erase(slot);
      spdlog::warn("http: cannot start a connection thread: {}", e.what());
      close(*conn);
    }
  }

  // Beyond max_connections, on the acceptor's thread and without blocking
  // it: the request's header is read (2 s at most), /health is answered as
  // usual and anything else gets 503 with Retry-After. A storm of
  // connections never hides whether the server is up; at most another
  // max_connections are held this way, the rest closed at once.
  struct Overflow {
    beast::tcp_stream stream;
    beast::flat_buffer buf;
    bhttp::request_parser<bhttp::empty_body> parser;
    bhttp::response<bhttp::string_body> res;
    explicit Overflow(tcp::socket s) : stream(std::move(s)) {}
  };
  std::atomic<int> overflowing{0};

  void overflow(tcp::socket s) {
    if (overflowing >= opt.max_connections) return;  // `s` closes here
    ++overflowing;
    auto o = std::make_shared<Overflow>(std::move(s));
    o->parser.header_limit(std::uint32_t(opt.max_header));
    o->stream.expires_after(std::chrono::seconds(2));
    bhttp::async_read_header(o->stream, o->buf, o->parser, [this, o](beast::error_code ec, std::size_t) {
      if (ec) {
        --overflowing;
        return;
      }
      const auto& req = o->parser.get();
      const std::string target(req.target());
      const std::string path = target.substr(0, target.find('?'));
      HttpResponse out;
      if (path == "/health" || path == "/v1/health") {
        HttpRequest r;
        r.method = "GET";
        r.target = target;
        r.host = std::string(req[bhttp::field::host]);
        out = api.handle(r, [] { return nullptr; });
      } else {
        out.status = 503;
        out.body = error_json("too many connections: " + std::to_string(opt.max_connections) + " are open",
                              "server_error", "too_many_connections");
        out.headers.push_back({"Retry-After", "1"});
      }
      o->res = response(out, req.version(), false);
      bhttp::async_write(o->stream, o->res, [this, o](beast::error_code, std::size_t) {
        beast::error_code ignored;
        o->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
        --overflowing;
      });
    });
  }

  // An Api answer as Beast's response, with the CORS origin when set.
  bhttp::response<bhttp::string_body> response(const HttpResponse& out, unsigned version, bool keep) const {
    bhttp::response<bhttp::string_body> res{bhttp::status(out.status), version};
    res.set(bhttp::field::server, "moelsp");
    res.set(bhttp::field::content_type, out.content_type);
    if (!opt.cors_origin.empty()) res.set(bhttp::field::access_control_allow_origin, opt.cors_origin);
    for (const auto& [k, v] : out.headers) res.set(k, v);
    res.body() = out.body;
    res.keep_alive(keep);
    res.prepare_payload();
    return res;
  }

  static void close(Conn& c) {
    beast::error_code ignored;
    c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    c.stream.socket().close(ignored);
  }

  // One connection's requests, in order, until it closes, errs or the
  // server stops. Each request — header, 100-continue and body — must
  // arrive within io_timeout_s of its first byte being awaited.
  void serve(Conn& c) {
    beast::flat_buffer buf;
    while (!stopping) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(std::uint32_t(opt.max_header));
      parser.body_limit(opt.max_body);
      const auto deadline = Clock::now() + std::chrono::seconds(opt.io_timeout_s);
      beast::error_code ec = c.run_until(deadline, [&](auto h) { bhttp::async_read_header(c.stream, buf, parser, h); });
      if (!ec && parser.get()[bhttp::field::expect] == "100-continue") {
        static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
        ec = c.run_until(deadline, [&](auto h) { net::async_write(c.stream, net::buffer(cont), h); });
      }
      if (!ec && !parser.is_done())
        ec = c.run_until(deadline, [&](auto h) { bhttp::async_read(c.stream, buf, parser, h); });
      if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
          ec == beast::error::timeout || ec == net::error::operation_aborted || ec == net::error::broken_pipe)
        return;
      if (!c.begin_request()) return;  // shutting down: this connection was closed meanwhile
      const size_t body_bytes = parser.get().body().size();
      const bool keep_going = answer(c, parser, ec);
      c.end_request();
      if (body_bytes >= kTrimBytes || buf.capacity() >= kTrimBytes) {
        // A large body leaves its copies behind (the buffer, the string,
        // the parsed JSON): give the memory back, as the LSP path does.
        buf.shrink_to_fit();
        release_freed_memory();
      }
      if (!keep_going || stopping) return;
    }
  }

  static constexpr size_t kTrimBytes = size_t(1) << 20;

  // Answers one request read (or failed to read, `ec`); false when the
  // connection is to close.
  bool answer(Conn& c, bhttp::request_parser<bhttp::string_body>& parser, beast::error_code ec) {
    if (ec) {  // oversized or malformed: a clear answer, then close
      const bool too_big = ec == bhttp::error::body_limit, header_big = ec == bhttp::error::header_limit;
      write_error(c,
                  too_big      ? 413
                  : header_big ? 431
                               : 400,
                  too_big      ? "the request body is larger than the limit"
                  : header_big ? "the request header is larger than the limit"
                               : "malformed HTTP request: " + ec.message(),
                  11, {});
      return false;
    }
    auto& req = parser.get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    const bool head = r.method == "HEAD";
    if (head) r.method = "GET";
    r.target = std::string(req.target());
    r.body = std::move(req.body());
    r.authorization = std::string(req[bhttp::field::authorization]);
    r.x_api_key = std::string(req["x-api-key"]);
    r.host = std::string(req[bhttp::field::host]);
    r.content_type = std::string(req[bhttp::field::content_type]);
    r.client_gone = [&c] { return c.client_gone(); };
    const bool keep = req.keep_alive() && !stopping;
    if (r.method == "OPTIONS" && !opt.cors_origin.empty()) {
      // A preflight: the headers asked for are allowed (Authorization and
      // Content-Type are what clients of this API send); "*" would not
      // cover Authorization (Fetch standard).
      const std::string asked(req[bhttp::field::access_control_request_headers]);
      bhttp::response<bhttp::string_body> res{bhttp::status::no_content, req.version()};
      res.set(bhttp::field::access_control_allow_origin, opt.cors_origin);
      res.set(bhttp::field::access_control_allow_headers,
              asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
      res.set(bhttp::field::access_control_allow_methods, "GET, POST, OPTIONS");
      res.set(bhttp::field::access_control_max_age, "600");
      res.keep_alive(keep);
      res.prepare_payload();
      return !c.run(opt.io_timeout_s, [&](auto h) { bhttp::async_write(c.stream, res, h); }) && keep;
    }
    std::unique_ptr<SseStream> sse;
    const HttpResponse out = api.handle(r, [&]() -> EventStream* {
      sse = std::make_unique<SseStream>(c, req.version(), opt.cors_origin);
      return sse.get();
    });
    if (sse) {
      sse->finish();
      return false;
    }
    auto res = response(out, req.version(), keep);  // HEAD: the GET's Content-Length, no body
    if (head) {
      bhttp::response_serializer<bhttp::string_body> sr{res};
      ec = c.run(opt.io_timeout_s, [&](auto h) { bhttp::async_write_header(c.stream, sr, h); });
    } else {
      ec = c.run(opt.io_timeout_s, [&](auto h) { bhttp::async_write(c.stream, res, h); });
    }
    return !ec && keep;
  }

  void write_error(Conn& c, int status, const std::string& message, unsigned version,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
    HttpResponse out;
    out.status = status;
    out.body = error_json(message, status == 503 ? "server_error" : "invalid_request_error");
    out.headers = headers;
    auto res = response(out, version, false);
    c.run(2, [&](auto h) { bhttp::async_write(c.stream, res, h); });
  }
};

void serve_socket(Api& api, const ServerOptions& opt, int fd) {
  HttpServer::Impl impl(api, opt);
  // Any stream socket will do: Beast only reads and writes it.
  Conn c(tcp::v4(), fd);
  try {
    impl.serve(c);
  } catch (const std::exception& e) {
    spdlog::error("http connection: {}", e.what());
  }
  HttpServer::Impl::close(c);
}

HttpServer::HttpServer(Api& api, ServerOptions opt) : impl_(std::make_unique<Impl>(api, std::move(opt))) {
  Impl& m = *impl_;
  beast::error_code ec;
  const auto addr = net::ip::make_address(m.opt.host, ec);
  if (ec) throw std::runtime_error("--host " + m.opt.host + ": not an IP address (" + ec.message() + ")");
  const tcp::endpoint ep{addr, static_cast<unsigned short>(m.opt.port)};
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) + ": " + ec.message());
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run() {
  Impl& m = *impl_;
  m.accept();
  m.io.run();
  // Stopped: generations in flight end (a stream with a final error event
  // and [DONE], a waiting request with 503) and nothing new starts.
  // Connections waiting for a request close now; the others once they have
  // answered, or after a grace period.
  beast::error_code ignored;
  m.acceptor.close(ignored);
  m.api.cancel_all();
  const auto grace = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    {
      std::lock_guard lock(m.mu);  // (a finished thread closes its socket under it)
      for (auto& c : m.conns)
        if (c.conn) c.conn->abort_if_idle();
    }
    if (m.live == 0 || Clock::now() >= grace) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::list<Impl::Slot> conns;
  {
    std::lock_guard lock(m.mu);
    for (auto& c : m.conns)
      if (c.conn) c.conn->abort();
    conns.splice(conns.end(), m.conns);
  }
  for (auto& c : conns) c.thread.join();
}

void HttpServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  net::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  impl_->io.stop();
}

}  // namespace moelsp::http
