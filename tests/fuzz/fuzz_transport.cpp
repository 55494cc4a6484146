// libFuzzer target: the LSP base protocol (framing) and the server's message
// dispatch on arbitrary bytes: the input is what a client writes to moelsp's
// stdin. The server runs with no model it can load (MOELSP_MODEL points
// nowhere), so every request is parsed and answered without an engine.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fcntl.h>

#include <spdlog/spdlog.h>

#include "lsp/server.h"
#include "lsp/transport.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a warning per malformed message would drown the fuzzer's own output
  setenv("MOELSP_MODEL", "/nonexistent/fuzz.gguf", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int in = memfd_create("fuzz.in", 0);
  const int out = open("/dev/null", O_WRONLY);
  if (in < 0 || out < 0) return 0;
  if (write(in, data, size) == ssize_t(size) && lseek(in, 0, SEEK_SET) == 0) {
    moelsp::lsp::Transport t(in, out);
    moelsp::lsp::ServerOptions opt;
    opt.flags.model = "/nonexistent/fuzz.gguf";
    moelsp::lsp::Server server(t, opt);
    (void)server.run();
  }
  close(in);
  close(out);
  return 0;
}
