#include "engine/harmony.h"

#include <algorithm>
#include <array>

namespace moelsp {
namespace {

constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>";
// What ends a message body: the end of one message, the start of the next,
// or the end of the turn (<|return|> and <|call|> also end generation, so
// they rarely reach the text).
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|start|>", "<|return|>", "<|call|>"};

// Length of the longest suffix of `s` that is a proper prefix of `marker`:
// text to hold back because the next piece could complete the marker.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

std::string HarmonyStream::push(std::string_view text) {
  buf_ += text;
  return step(false);
}

std::string HarmonyStream::finish() { return step(true); }

std::string HarmonyStream::step(bool at_end) {
  std::string out;
  if (mode_ == Mode::Unknown) {
    // Harmony answers open with a channel header; anything else is plain text.
    if (buf_.starts_with(kChannel)) {
      mode_ = Mode::Harmony;
    } else if (!at_end && kChannel.starts_with(buf_)) {
      return out;  // too short to tell
    } else {
      mode_ = Mode::Plain;
    }
  }
  if (mode_ == Mode::Plain) {
    out.swap(buf_);
    answer_ += out;
    return out;
  }
  while (!buf_.empty()) {
    if (part_ == Part::Header) {
      // Header: up to <|message|>; the channel's name follows <|channel|>.
      const size_t m = buf_.find(kMessage);
      if (m == std::string::npos) {
        if (at_end) buf_.clear();  // a header cut off by the token limit: nothing to show
        break;
      }
      header_ = buf_.substr(0, m);
      buf_.erase(0, m + kMessage.size());
      const size_t c = header_.find(kChannel);
      std::string channel = c == std::string::npos ? "" : header_.substr(c + kChannel.size());
      channel = channel.substr(0, channel.find_first_of(" <"));
      final_channel_ = channel == "final";
      part_ = Part::Body;
      continue;
    }
    // Body: up to the first marker that ends it.
    size_t e = std::string::npos, e_len = 0;
    for (std::string_view end : kBodyEnds)
      if (const size_t p = buf_.find(end); p < e) e = p, e_len = end.size();
    const bool complete = e != std::string::npos;
    size_t take = complete ? e : buf_.size();
    if (!complete && !at_end) {
      size_t hold = 0;
      for (std::string_view end : kBodyEnds) hold = std::max(hold, partial_suffix(buf_, end));
      take -= hold;
    }
    (final_channel_ ? out : reasoning_) += buf_.substr(0, take);
    if (!complete) {
      buf_.erase(0, take);
      break;
    }
    // The next message's header follows ("<|start|>assistant" stays in it as
    // its role, which the channel search skips).
    buf_.erase(0, e + e_len);
    if (!final_channel_ && !reasoning_.empty() && reasoning_.back() != '\n') reasoning_ += '\n';
    part_ = Part::Header;
  }
  answer_ += out;
  return out;
}

}  // namespace moelsp
