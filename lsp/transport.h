// JSON-RPC over LSP's base protocol: "Content-Length: N\r\n" headers (a
// Content-Type header is tolerated), a blank line, N bytes of UTF-8 JSON.
//
// The reader never trusts its input: a header block that is malformed or
// announces an absurd size is reported and skipped, and reading resumes at the
// next header, so one bad message cannot wedge the server.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

namespace moelsp::lsp {

class Transport {
 public:
  static constexpr size_t kMaxHeaderBytes = 8192;
  static constexpr size_t kMaxBodyBytes = size_t(64) << 20;

  Transport(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}

  struct Message {
    std::string body;   // the JSON text (not yet parsed)
    std::string error;  // non-empty: a framing problem; body is empty
  };
  // Blocks for the next message; nullopt at end of input.
  std::optional<Message> read();

  // Frames and writes one message; thread-safe. False when the peer is gone.
  bool write(const std::string& json_body);

 private:
  // Buffered byte reads from in_.
  bool fill();
  std::optional<std::string> read_line();  // without the line terminator; nullopt at EOF

  int in_, out_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  std::mutex write_mu_;
};

}  // namespace moelsp::lsp
