// SentencePiece tokenizer: we serialise a ModelProto from the GGUF vocabulary
// (Debian ships no .proto, so a ~40-line protobuf encoder does it) and let
// libsentencepiece run BPE. Field numbers are sentencepiece_model.proto's;
// with the settings below, libsentencepiece 0.1.97 reproduces llama.cpp's ids
// exactly (its test vectors in tests/test_tokenizer_vocab.cpp, and random
// valid UTF-8 compared against llama.cpp when this was written).
//
// Two things libsentencepiece does differently from llama.cpp are handled here:
// invalid UTF-8 (it maps bad bytes to U+FFFD; llama.cpp emits byte tokens) and
// the dummy-prefix space (llama.cpp adds it per text fragment, after special
// tokens, so we add it ourselves and keep add_dummy_prefix off in the proto).
#include <sentencepiece_processor.h>

#include <cstring>

#include <fmt/format.h>

#include "vocab.h"
#include "word_cache.h"

namespace moelsp::tok {
namespace {

// ---- a minimal protobuf writer --------------------------------------------
class Proto {
 public:
  void varint_field(uint32_t field, uint64_t x) {
    key(field, 0);
    varint(x);
  }
  void int_field(uint32_t field, int64_t x) { varint_field(field, uint64_t(x)); }  // negatives: 10 bytes
  void float_field(uint32_t field, float x) {
    key(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    for (int i = 0; i < 4; ++i) out_ += char((bits >> (8 * i)) & 0xff);
  }
  void bytes_field(uint32_t field, std::string_view s) {
    key(field, 2);
    varint(s.size());
    out_ += s;
  }
  const std::string& str() const { return out_; }

 private:
  void key(uint32_t field, uint32_t wire) { varint((uint64_t(field) << 3) | wire); }
  void varint(uint64_t x) {
    while (x >= 0x80) {
      out_ += char((x & 0x7f) | 0x80);
      x >>= 7;
    }
    out_ += char(x);
  }
  std::string out_;
};

// sentencepiece's SentencePiece.Type
enum : int { kSpNormal = 1, kSpUnknown = 2, kSpControl = 3, kSpByte = 6 };

std::string build_model_proto(const Vocab& v, bool* byte_fallback) {
  TokenId unk = v.special.unk;
  if (!v.valid(unk) || !(v.attr[unk] & kAttrUnknown)) {
    unk = kNoToken;
    for (size_t i = 0; i < v.size(); ++i)
      if (v.attr[i] & kAttrUnknown) {
        unk = TokenId(i);
        break;
      }
  }
  if (unk == kNoToken) fail(v, "SentencePiece vocabulary has no unknown token");

  int n_bytes = 0;
  Proto model;
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t a = v.attr[i];
    int type = kSpNormal;
    if (TokenId(i) == unk) type = kSpUnknown;
    else if (a & (kAttrControl | kAttrUnknown)) type = kSpControl;
    else if (a & kAttrByte) type = kSpByte, ++n_bytes;
    // user-defined tokens are split out before sentencepiece runs: NORMAL here.
    if (!seen.emplace(v.text[i], i).second)
      fail(v, fmt::format("tokens {} and {} have the same text '{}'", seen[v.text[i]], i, v.text[i]));
    Proto piece;
    piece.bytes_field(1, v.text[i]);
    piece.float_field(2, v.score[i]);
    piece.varint_field(3, uint64_t(type));
    model.bytes_field(1, piece.str());
  }
  *byte_fallback = n_bytes == 256;

  Proto trainer;
  trainer.varint_field(3, 2);  // model_type = BPE
  trainer.varint_field(4, v.size());
  trainer.varint_field(35, *byte_fallback ? 1 : 0);
  trainer.int_field(40, unk);
  trainer.int_field(41, -1);  // bos/eos/pad: we add specials ourselves
  trainer.int_field(42, -1);
  trainer.int_field(43, -1);
  trainer.bytes_field(44, "");  // unk_surface: <unk> decodes to nothing, as in llama.cpp
  model.bytes_field(2, trainer.str());

  Proto norm;
  norm.bytes_field(1, "identity");
  norm.varint_field(3, 0);  // add_dummy_prefix: done per fragment by us
  norm.varint_field(4, 0);  // remove_extra_whitespaces
  norm.varint_field(5, 1);  // escape_whitespaces: ' ' → U+2581
  model.bytes_field(3, norm.str());
  return model.str();
}

// Length of a well-formed UTF-8 sequence at s[0] (1–4), or 0 if it is not one
// (stray continuation, truncated, overlong, surrogate or > U+10FFFF).
size_t utf8_seq_len(std::string_view s) {
  const auto c0 = uint8_t(s[0]);
  if (c0 < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c0 & 0xe0) == 0xc0) len = 2, cp = c0 & 0x1f;
  else if ((c0 & 0xf0) == 0xe0) len = 3, cp = c0 & 0x0f;
  else if ((c0 & 0xf8) == 0xf0) len = 4, cp = c0 & 0x07;
  else return 0;
  if (s.size() < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((uint8_t(s[i]) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (uint8_t(s[i]) & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

// The length llama.cpp gives a symbol starting with this byte.
size_t lead_len(uint8_t c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

class SpmEncoder final : public FragmentEncoder {
 public:
  explicit SpmEncoder(const Vocab& v) : v_(v) {
    const std::string proto = build_model_proto(v, &byte_fallback_);
    const auto status = sp_.LoadFromSerializedProto(proto);
    if (!status.ok()) fail(v, "sentencepiece rejected the vocabulary: " + status.ToString());
    for (int b = 0; b < 256; ++b) byte_token_[b] = v.find(fmt::format("<0x{:02X}>", b));
    // Chunking: a merge can only cross the point before a space if some piece
    // holds "▁" after a non-"▁" character. Vocabularies trained with
    // split_by_whitespace (llama, phi-3, ours) have none, so text can be cut
    // before each space that follows a non-space and the chunks encoded (and
    // cached) independently with identical results.
    static constexpr std::string_view kSpace = "\xe2\x96\x81";
    split_at_spaces_ = true;
    for (const auto& t : v.text)
      for (size_t p = t.find(kSpace, 1); p != std::string::npos && split_at_spaces_; p = t.find(kSpace, p + 1))
        if (p < 3 || t.compare(p - 3, 3, kSpace) != 0) split_at_spaces_ = false;
  }

  void encode(std::string_view text, bool after_special, std::vector<TokenId>& out) const override {
    std::string buf;
    if (v_.add_space_prefix && after_special) buf = " ";
    buf += text;
    size_t i = 0;
    while (i < buf.size() && utf8_seq_len(std::string_view(buf).substr(i)))
      i += utf8_seq_len(std::string_view(buf).substr(i));
    if (i == buf.size()) return encode_valid(buf, out);

    // Malformed UTF-8. llama.cpp escapes spaces to U+2581 first, then cuts the
    // text into symbols whose length the lead byte announces; a symbol that is
    // not a character becomes byte tokens (possibly including bytes of a
    // following U+2581). Do the same; valid runs still go to sentencepiece.
    std::string esc;
    for (char c : buf) esc += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
    const std::string_view s = esc;
    size_t run = 0;
    i = 0;
    while (i < s.size()) {
      if (const size_t n = utf8_seq_len(s.substr(i))) {
        i += n;
        continue;
      }
      encode_valid(s.substr(run, i - run), out);
      const size_t bad = std::min(lead_len(uint8_t(s[i])), s.size() - i);
      for (size_t k = 0; k < bad; ++k) push_byte(uint8_t(s[i + k]), out);
      i += bad;
      run = i;
    }
    encode_valid(s.substr(run), out);
  }

  std::string decode_normal(const std::string& text) const override {
    // U+2581 (▁) → ' '
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  }

 private:
  void encode_valid(std::string_view s, std::vector<TokenId>& out) const {
    if (!split_at_spaces_) return encode_chunk(s, out);
    size_t begin = 0;
    for (size_t i = 1; i < s.size(); ++i)
      if (s[i] == ' ' && s[i - 1] != ' ') {
        encode_cached(s.substr(begin, i - begin), out);
        begin = i;
      }
    encode_cached(s.substr(begin), out);
  }

  void encode_cached(std::string_view chunk, std::vector<TokenId>& out) const {
    if (chunk.empty() || cache_.lookup(chunk, out)) return;
    const size_t at = out.size();
    encode_chunk(chunk, out);
    cache_.store(chunk, out.data() + at, out.size() - at);
  }

  void encode_chunk(std::string_view s, std::vector<TokenId>& out) const {
    if (s.empty()) return;
    std::vector<int> ids;
    const auto status = sp_.Encode(s, &ids);
    if (!status.ok()) throw TokenizerError("sentencepiece: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  void push_byte(uint8_t b, std::vector<TokenId>& out) const {
    if (byte_token_[b] != kNoToken) out.push_back(byte_token_[b]);
    else if (v_.special.unk != kNoToken) out.push_back(v_.special.unk);
  }

  const Vocab& v_;
  sentencepiece::SentencePieceProcessor sp_;
  bool byte_fallback_ = false;
  bool split_at_spaces_ = false;
  TokenId byte_token_[256];
  WordCache cache_;
};

}  // namespace

std::unique_ptr<FragmentEncoder> make_spm_encoder(const Vocab& v) { return std::make_unique<SpmEncoder>(v); }

}  // namespace moelsp::tok
