// libFuzzer target: `moelsp serve`'s HTTP layer on arbitrary bytes — Beast's
// request parser with our limits, keep-alive and pipelining, routing, and the
// API's JSON request bodies (OpenAI's and llama.cpp's endpoints, streaming
// or not) — served over a socketpair exactly as an accepted connection is.
// The model is the embedded default with a 64-token context, so a request
// that gets as far as generating finishes in milliseconds.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "assist/backend.h"
#include "assist/service.h"
#include "engine/default_model.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "http/api.h"
#include "http/http_server.h"

namespace {

struct World {
  moelsp::assist::Service service;
  std::unique_ptr<moelsp::http::Api> api;
  moelsp::http::ServerOptions opt;
};
World* world = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace moelsp;
  spdlog::set_level(spdlog::level::off);
  world = new World;
  const std::string path = default_model_path();
  auto model = std::shared_ptr<Model>(Model::load(path, {.threads = 1}));
  auto engine = std::make_unique<Engine>(model, EngineOptions{.n_ctx = 64});
  world->service.set_backend(std::make_shared<assist::EngineBackend>(std::move(engine)));
  world->api = std::make_unique<http::Api>(world->service, http::ApiOptions{});
  http::ModelState m;
  m.phase = http::ModelState::Phase::Ready;
  m.id = "moelsp-default";
  m.n_ctx = 64;
  m.file = path;
  world->api->set_model(m);
  world->opt.max_body = 4 << 20;  // room for the seeds nested 10^6 deep (tools/fuzz.sh)
  world->opt.io_timeout_s = 2;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  // The client: writes the input, half-closes, and reads every answer.
  std::thread client([&] {
    size_t off = 0;
    while (off < size) {
      // (MSG_NOSIGNAL: the server may close before reading a large input)
      const ssize_t n = send(sv[0], data + off, size - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += size_t(n);
    }
    shutdown(sv[0], SHUT_WR);
    char buf[65536];
    while (read(sv[0], buf, sizeof buf) > 0) {
    }
    close(sv[0]);
  });
  moelsp::http::serve_socket(*world->api, world->opt, sv[1]);  // closes sv[1]
  client.join();
  return 0;
}
