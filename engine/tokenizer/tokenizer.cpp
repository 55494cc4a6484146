// The family-independent part of tokenization: special tokens written in the
// text are split out first (llama.cpp's order: longest token text first, each
// token over all remaining text fragments), then each text fragment goes to the
// family's encoder. Decoding concatenates token pieces.
#include <algorithm>
#include <list>

#include <fmt/format.h>

#include "engine/gguf.h"
#include "vocab.h"

namespace moelsp {

struct Tokenizer::Impl {
  tok::Vocab vocab;
  std::unique_ptr<tok::FragmentEncoder> encoder;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->vocab = tok::load_vocab(file);
  } catch (const gguf::GgufError& e) {
    throw TokenizerError(fmt::format("tokenizer metadata: {}", e.what()));
  }
  impl->encoder =
      impl->vocab.model == "llama" ? tok::make_spm_encoder(impl->vocab) : tok::make_bpe_encoder(impl->vocab, file);
  // The newline token: what "\n" encodes to (a byte token for SentencePiece vocabularies).
  std::vector<TokenId> nl;
  impl->encoder->encode("\n", false, nl);
  if (!nl.empty()) impl->vocab.special.linefeed = nl[0];
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, EncodeOptions opt) const {
  const auto& v = impl_->vocab;
  struct Fragment {
    size_t off, len;
    TokenId token;  // kNoToken: raw text
  };
  std::list<Fragment> frags;
  if (!text.empty()) frags.push_back({0, text.size(), kNoToken});

  for (TokenId id : v.partition_tokens) {
    if (!opt.parse_special && (v.attr[id] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& t = v.text[id];
    for (auto it = frags.begin(); it != frags.end(); ++it) {
      if (it->token != kNoToken) continue;
      const size_t end = it->off + it->len;
      size_t pos = text.substr(0, end).find(t, it->off);
      if (pos == std::string_view::npos) continue;
      // Split this fragment at every occurrence: left text, token, rest.
      size_t start = it->off;
      auto at = it;
      while (pos != std::string_view::npos) {
        if (pos > start) frags.insert(at, {start, pos - start, kNoToken});
        frags.insert(at, {pos, t.size(), id});
        start = pos + t.size();
        pos = text.substr(0, end).find(t, start);
      }
      if (start < end) {
        at->off = start;
        at->len = end - start;
        it = at;
      } else {
        it = std::prev(frags.erase(at));
      }
    }
  }

  std::vector<TokenId> out;
  if (opt.add_special && v.special.add_bos && v.special.bos != kNoToken) out.push_back(v.special.bos);
  bool after_special = true;
  for (const auto& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
    } else {
      impl_->encoder->encode(text.substr(f.off, f.len), after_special, out);
      after_special = false;
    }
  }
  if (opt.add_special && v.special.add_eos && v.special.eos != kNoToken) out.push_back(v.special.eos);
  return out;
}

std::string Tokenizer::piece(TokenId id, bool render_special) const {
  const auto& v = impl_->vocab;
  if (!v.valid(id)) return {};
  const uint32_t a = v.attr[id];
  if (a & (kAttrControl | kAttrUnknown)) return render_special ? v.text[id] : std::string();
  if (a & kAttrUserDefined) return v.text[id];
  if (a & kAttrByte) {
    // "<0xAB>"
    const std::string& t = v.text[id];
    if (t.size() == 6 && t.starts_with("<0x")) return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
    return t;
  }
  if (a & kAttrNormal) return impl_->encoder->decode_normal(v.text[id]);
  return {};  // unused / undefined tokens decode to nothing, as in llama.cpp
}

std::string Tokenizer::decode(std::span<const TokenId> ids, DecodeOptions opt) const {
  std::string out;
  bool strip = opt.strip_leading_space && impl_->vocab.add_space_prefix;
  for (TokenId id : ids) {
    std::string p = piece(id, opt.render_special);
    if (p.empty()) continue;
    if (strip && p[0] == ' ') p.erase(0, 1);
    strip = false;
    out += p;
  }
  return out;
}

size_t Tokenizer::n_vocab() const { return impl_->vocab.size(); }
const std::string& Tokenizer::token_text(TokenId id) const {
  static const std::string empty;
  return impl_->vocab.valid(id) ? impl_->vocab.text[id] : empty;
}
uint32_t Tokenizer::attr(TokenId id) const { return impl_->vocab.valid(id) ? impl_->vocab.attr[id] : 0; }
TokenId Tokenizer::find(std::string_view text) const { return impl_->vocab.find(text); }
bool Tokenizer::is_eog(TokenId id) const {
  return std::binary_search(impl_->vocab.eog.begin(), impl_->vocab.eog.end(), id);
}
const std::vector<TokenId>& Tokenizer::eog_ids() const { return impl_->vocab.eog; }
const SpecialTokens& Tokenizer::special() const { return impl_->vocab.special; }
const std::string& Tokenizer::model() const { return impl_->vocab.model; }
const std::string& Tokenizer::pre() const { return impl_->vocab.pre; }

// ---- UTF-8 helpers and streaming -------------------------------------------

namespace {
// 0: not a lead byte; else the sequence length it announces.
size_t announced_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) return c >= 0xc2 ? 2 : 0;
  if ((c & 0xf0) == 0xe0) return 3;
  if ((c & 0xf8) == 0xf0) return c <= 0xf4 ? 4 : 0;
  return 0;
}

// Length of a complete valid sequence at s (0 if invalid, SIZE_MAX if it is a
// valid but incomplete prefix).
size_t seq_status(std::string_view s) {
  const auto c0 = uint8_t(s[0]);
  const size_t len = announced_len(c0);
  if (len == 0) return 0;
  for (size_t i = 1; i < len; ++i) {
    if (i >= s.size()) return SIZE_MAX;
    const auto c = uint8_t(s[i]);
    if ((c & 0xc0) != 0x80) return 0;
    if (i == 1) {  // overlong / surrogate / > U+10FFFF show in the second byte
      if (c0 == 0xe0 && c < 0xa0) return 0;
      if (c0 == 0xed && c > 0x9f) return 0;
      if (c0 == 0xf0 && c < 0x90) return 0;
      if (c0 == 0xf4 && c > 0x8f) return 0;
    }
  }
  return len;
}
}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = seq_status(s.substr(i));
    if (n == 0 || n == SIZE_MAX) break;
    i += n;
  }
  return i;
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, DecodeOptions opt) : tok_(tok), opt_(opt) {}

std::string StreamingDecoder::push(TokenId id) {
  const TokenId one[] = {id};
  DecodeOptions o = opt_;
  o.strip_leading_space = opt_.strip_leading_space && first_;
  const std::string p = tok_.decode(one, o);
  if (!p.empty()) first_ = false;
  pending_ += p;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const size_t n = seq_status(std::string_view(pending_).substr(i));
    if (n == SIZE_MAX) break;  // wait for the rest of this character
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(pending_, i, n);
      i += n;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDecoder::flush() {
  // pending_ only ever holds the valid beginning of one character: one U+FFFD.
  std::string out = pending_.empty() ? "" : "\xef\xbf\xbd";
  pending_.clear();
  return out;
}

}  // namespace moelsp
