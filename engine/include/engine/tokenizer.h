// Tokenizers built from a GGUF file's tokenizer.ggml.* metadata.
//
//   tokenizer.ggml.model = "llama" → SentencePiece (libsentencepiece does the BPE;
//                                     we build its ModelProto from the vocabulary)
//   tokenizer.ggml.model = "gpt2"  → byte-level BPE with a PCRE2 pre-tokenizer chosen
//                                     by tokenizer.ggml.pre
//
// Ids match llama.cpp's for the same file (tests/test_tokenizer_vocab.cpp checks
// its test vectors). Decoding is the plain concatenation of token pieces, so
// code survives a round trip; we do not apply HF's "clean up tokenization spaces".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp {

namespace gguf {
class File;
}

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

// Token attributes (bit flags), derived from tokenizer.ggml.token_type and from
// the texts that llama.cpp recognises as control tokens.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
};

struct SpecialTokens {
  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  TokenId sep = kNoToken, pad = kNoToken, mask = kNoToken, linefeed = kNoToken;
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  bool add_bos = false, add_eos = false;
  // The model was trained to read FIM prompts in suffix-prefix-middle order
  // (<fim_prefix><fim_suffix> suffix <fim_middle> prefix): the GGUF key
  // "moelsp.fim_order" = "spm", which moelsp's own default model sets. Other
  // models get prefix-suffix-middle, the order every FIM model knows.
  bool fim_spm = false;
};

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EncodeOptions {
  bool add_special = false;    // add BOS/EOS where the model asks for them
  bool parse_special = false;  // recognise control tokens written in the text (e.g. "<|im_end|>")
};

struct DecodeOptions {
  bool render_special = false;      // print control tokens' text instead of dropping them
  bool strip_leading_space = true;  // SentencePiece: drop the space the encoder prepended
};

class Tokenizer {
 public:
  // Throws TokenizerError (naming the file and the problem) for a missing or
  // inconsistent vocabulary, or an unsupported model / pre-tokenizer.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  virtual ~Tokenizer();

  std::vector<TokenId> encode(std::string_view text, EncodeOptions opt = {}) const;
  std::string decode(std::span<const TokenId> ids, DecodeOptions opt = {}) const;
  // The bytes one token stands for (may be part of a UTF-8 sequence).
  std::string piece(TokenId id, bool render_special = false) const;

  size_t n_vocab() const;
  const std::string& token_text(TokenId id) const;  // as stored in the vocabulary
  uint32_t attr(TokenId id) const;
  TokenId find(std::string_view text) const;  // exact vocabulary text, or kNoToken
  bool is_eog(TokenId id) const;              // end of generation (EOS, EOT, EOM, …)
  const std::vector<TokenId>& eog_ids() const;
  const SpecialTokens& special() const;
  const std::string& model() const;  // "llama" or "gpt2"
  const std::string& pre() const;    // pre-tokenizer name ("" for llama)

  struct Impl;

 protected:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of tokens into text without ever emitting half of a UTF-8
// sequence: bytes of an incomplete sequence are held until it completes.
// Invalid bytes are passed through as U+FFFD so the output is always valid UTF-8.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok, DecodeOptions opt = {});
  std::string push(TokenId id);  // text that is complete after this token
  std::string flush();           // an unfinished character left at the end becomes one U+FFFD

 private:
  const Tokenizer& tok_;
  DecodeOptions opt_;
  bool first_ = true;
  std::string pending_;
};

// Validate UTF-8: the length of the longest valid prefix of `s`.
size_t valid_utf8_prefix(std::string_view s);

}  // namespace moelsp
