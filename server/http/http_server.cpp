// HTTP/1.1 on Boost.Beast. The acceptor runs on one io_context thread; each
// connection gets a thread of its own (at most max_connections), reading
// and writing synchronously with socket timeouts, so a stalled client holds
// only its own thread and only for io_timeout_s. Generation blocks that
// thread; its tokens are written as they come (server-sent events, chunked),
// and a failed write cancels the generation.
#include "http_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "api.h"

namespace moelsp::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

// Server-sent events over a chunked response on a blocking socket.
class SseStream final : public EventStream {
 public:
  SseStream(tcp::socket& s, unsigned version, const std::string& cors) : s_(s) {
    bhttp::response<bhttp::empty_body> res{bhttp::status::ok, version};
    res.set(bhttp::field::server, "moelsp");
    res.set(bhttp::field::content_type, "text/event-stream");
    res.set(bhttp::field::cache_control, "no-cache");
    if (!cors.empty()) res.set(bhttp::field::access_control_allow_origin, cors);
    res.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> sr{res};
    beast::error_code ec;
    bhttp::write_header(s_, sr, ec);
    ok_ = !ec;
  }
  bool send(const std::string& data) override {
    if (!ok_) return false;
    const std::string event = "data: " + data + "\n\n";
    beast::error_code ec;
    net::write(s_, bhttp::make_chunk(net::buffer(event)), ec);
    ok_ = !ec;
    return ok_;
  }
  void finish() {
    if (!ok_) return;
    beast::error_code ec;
    net::write(s_, bhttp::make_chunk_last(), ec);
  }

 private:
  tcp::socket& s_;
  bool ok_ = false;
};

void set_timeouts(tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

struct HttpServer::Impl {
  Api& api;
  ServerOptions opt;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::list<std::pair<std::thread, std::shared_ptr<tcp::socket>>> conns;
  std::atomic<int> live{0};

  Impl(Api& a, ServerOptions o) : api(a), opt(std::move(o)) {}

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (stopping) return;
      if (!ec) start(std::move(s));
      accept();
    });
  }

  void start(tcp::socket s) {
    auto sock = std::make_shared<tcp::socket>(std::move(s));
    std::lock_guard lock(mu);
    // Reap finished connections' threads.
    for (auto it = conns.begin(); it != conns.end();) {
      if (!it->second) {
        it->first.join();
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    if (live >= opt.max_connections) {
      bhttp::response<bhttp::string_body> res{bhttp::status::service_unavailable, 11};
      res.set(bhttp::field::retry_after, "1");
      res.set(bhttp::field::content_type, "application/json");
      res.body() = R"({"error":{"message":"too many connections","type":"server_error","code":"busy"}})";
      res.prepare_payload();
      beast::error_code ignored;
      set_timeouts(*sock, 2);
      bhttp::write(*sock, res, ignored);
      return;
    }
    ++live;
    conns.emplace_back();
    auto slot = std::prev(conns.end());
    slot->second = sock;
    slot->first = std::thread([this, sock, slot] {
      serve(*sock);
      beast::error_code ignored;
      sock->shutdown(tcp::socket::shutdown_both, ignored);
      sock->close(ignored);
      --live;
      std::lock_guard done(mu);
      slot->second.reset();  // done: the next accept joins this thread
    });
  }

  void serve(tcp::socket& s) {
    set_timeouts(s, opt.io_timeout_s);
    beast::flat_buffer buf;
    while (!stopping) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(std::uint32_t(opt.max_header));
      parser.body_limit(opt.max_body);
      beast::error_code ec;
      bhttp::read(s, buf, parser, ec);
      if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) return;
      if (ec) {
        // Oversized or malformed: a clear answer, then close.
        const bool too_big = ec == bhttp::error::body_limit;
        const bool header_big = ec == bhttp::error::header_limit;
        if (ec == net::error::would_block || ec == net::error::timed_out || ec == net::error::try_again) return;
        write_simple(s, too_big ? 413 : header_big ? 431 : 400,
                     too_big     ? "the request body is larger than the limit"
                     : header_big ? "the request header is larger than the limit"
                                 : "malformed HTTP request: " + ec.message(),
                     11, false);
        return;
      }
      auto& req = parser.get();
      HttpRequest r;
      r.method = std::string(req.method_string());
      r.target = std::string(req.target());
      r.body = std::move(req.body());
      r.authorization = std::string(req[bhttp::field::authorization]);
      const bool keep = req.keep_alive();
      if (r.method == "OPTIONS" && !opt.cors_origin.empty()) {
        bhttp::response<bhttp::string_body> res{bhttp::status::no_content, req.version()};
        res.set(bhttp::field::access_control_allow_origin, opt.cors_origin);
        res.set(bhttp::field::access_control_allow_headers, "Authorization, Content-Type");
        res.set(bhttp::field::access_control_allow_methods, "GET, POST, OPTIONS");
        res.keep_alive(keep);
        res.prepare_payload();
        bhttp::write(s, res, ec);
        if (ec || !keep) return;
        continue;
      }
      std::unique_ptr<SseStream> sse;
      const HttpResponse out = api.handle(r, [&]() -> EventStream* {
        sse = std::make_unique<SseStream>(s, req.version(), opt.cors_origin);
        return sse.get();
      });
      if (sse) {  // streamed: end the chunked body; the connection closes (simplest for SSE clients)
        sse->finish();
        return;
      }
      bhttp::response<bhttp::string_body> res{bhttp::status(out.status), req.version()};
      res.set(bhttp::field::server, "moelsp");
      res.set(bhttp::field::content_type, out.content_type);
      if (!opt.cors_origin.empty()) res.set(bhttp::field::access_control_allow_origin, opt.cors_origin);
      for (const auto& [k, v] : out.headers) res.set(k, v);
      res.body() = out.body;
      res.keep_alive(keep);
      res.prepare_payload();
      bhttp::write(s, res, ec);
      if (ec || !keep) return;
    }
  }

  void write_simple(tcp::socket& s, int status, const std::string& message, unsigned version, bool keep) {
    bhttp::response<bhttp::string_body> res{bhttp::status(status), version};
    res.set(bhttp::field::content_type, "application/json");
    res.body() = R"({"error":{"message":")" + message + R"(","type":"invalid_request_error","code":null}})";
    res.keep_alive(keep);
    res.prepare_payload();
    beast::error_code ignored;
    bhttp::write(s, res, ignored);
  }
};

HttpServer::HttpServer(Api& api, ServerOptions opt) : impl_(std::make_unique<Impl>(api, std::move(opt))) {
  Impl& m = *impl_;
  beast::error_code ec;
  const auto addr = net::ip::make_address(m.opt.host, ec);
  if (ec) throw std::runtime_error("--host " + m.opt.host + ": not an IP address (" + ec.message() + ")");
  const tcp::endpoint ep{addr, static_cast<unsigned short>(m.opt.port)};
  m.acceptor.open(ep.protocol());
  m.acceptor.set_option(net::socket_base::reuse_address(true));
  m.acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) + ": " + ec.message());
  m.acceptor.listen(net::socket_base::max_listen_connections);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run() {
  impl_->accept();
  impl_->io.run();
  // Stopped: end the generations in flight, close the connections, join.
  impl_->api.cancel_all();
  std::list<std::pair<std::thread, std::shared_ptr<tcp::socket>>> conns;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& c : impl_->conns) {
      beast::error_code ignored;
      if (c.second) c.second->shutdown(tcp::socket::shutdown_both, ignored);
    }
    conns.splice(conns.end(), impl_->conns);
  }
  for (auto& c : conns) c.first.join();
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
