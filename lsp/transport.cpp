#include "transport.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace moelsp::lsp {

bool Transport::fill() {
  if (eof_) return false;
  // Drop what was consumed once it is half the buffer (each byte moves at
  // most once more), and give memory back after a burst: 300 MiB of
  // back-to-back messages must not keep 300 MiB resident afterwards.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  if (buf_.capacity() > (size_t(8) << 20) && buf_.size() < buf_.capacity() / 4) buf_.shrink_to_fit();
  char tmp[65536];
  for (;;) {
    const ssize_t n = ::read(in_, tmp, sizeof tmp);
    if (n > 0) {
      buf_.append(tmp, size_t(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    eof_ = true;
    return false;
  }
}

std::optional<std::string> Transport::read_line() {
  std::string line;
  for (;;) {
    const size_t nl = buf_.find('\n', pos_);
    if (nl != std::string::npos) {
      line.append(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    line.append(buf_, pos_, std::string::npos);
    pos_ = buf_.size();
    if (line.size() > kMaxHeaderBytes) return line;  // caller reports it as malformed
    if (!fill()) return line.empty() ? std::nullopt : std::optional<std::string>(line);
  }
}

namespace {

// One header line into the block's state: Content-Length read, other
// headers (Content-Type) ignored, a malformed line or value named.
void header_line(const std::string& line, long long& length, std::string& problem) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) {
    problem = "malformed header line '" + line.substr(0, 80) + "'";
    return;
  }
  std::string name = line.substr(0, colon), value = line.substr(colon + 1);
  for (auto& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  while (!value.empty() && value.front() == ' ') value.erase(0, 1);
  if (name != "content-length") return;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno || v < 0) problem = "invalid Content-Length '" + value + "'";
  else length = v;
}

}  // namespace

std::optional<Transport::Message> Transport::read() {
  for (;;) {
    // Header block.
    long long length = -1;
    std::string problem;
    size_t header_bytes = 0;
    bool any = false;
    for (;;) {
      auto line = read_line();
      if (!line) return std::nullopt;
      if (line->empty()) {
        if (any) break;
        continue;  // stray blank lines between messages
      }
      // Resynchronise after garbage: a Content-Length header anywhere in a
      // line starts a new header block there.
      if (const size_t at = line->find("Content-Length:"); at != std::string::npos && (at > 0 || !problem.empty())) {
        line->erase(0, at);
        problem.clear();
        header_bytes = 0;
        length = -1;
      }
      any = true;
      header_bytes += line->size();
      if (header_bytes > kMaxHeaderBytes) {
        problem = "header block larger than 8 KiB";
        continue;
      }
      header_line(*line, length, problem);
    }
    if (problem.empty() && length < 0) problem = "missing Content-Length header";
    if (problem.empty() && size_t(length) > kMaxBodyBytes)
      problem = "Content-Length " + std::to_string(length) + " exceeds the 64 MiB limit";
    if (!problem.empty()) {
      // Skip a body we were told the size of, if it is sane; otherwise resume at the next header.
      if (length > 0 && size_t(length) <= kMaxBodyBytes) {
        while (buf_.size() - pos_ < size_t(length))
          if (!fill()) break;
        pos_ = std::min(buf_.size(), pos_ + size_t(length));
      }
      return Message{"", problem};
    }
    while (buf_.size() - pos_ < size_t(length))
      if (!fill()) return Message{"", "truncated body: end of input before " + std::to_string(length) + " bytes"};
    Message m{buf_.substr(pos_, size_t(length)), ""};
    pos_ += size_t(length);
    return m;
  }
}

bool Transport::write(const std::string& body) {
  const std::string msg = "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::lock_guard lock(write_mu_);
  size_t off = 0;
  while (off < msg.size()) {
    const ssize_t n = ::write(out_, msg.data() + off, msg.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

}  // namespace moelsp::lsp
