// The vocabulary shared by both tokenizer families: token texts, attributes,
// scores, special ids, and the list of texts split out of raw text before the
// model's own algorithm runs (control / user-defined tokens).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer.h"

namespace moelsp::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct Vocab {
  std::string file;   // for error messages
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<uint32_t> attr;
  StringIdMap text_to_id;
  SpecialTokens special;
  std::vector<TokenId> eog;
  std::vector<TokenId> partition_tokens;  // control/user-defined/unknown, longest text first
  bool add_space_prefix = false;          // SentencePiece's dummy prefix

  TokenId find(std::string_view s) const {
    auto it = text_to_id.find(s);
    return it == text_to_id.end() ? kNoToken : it->second;
  }
  size_t size() const { return text.size(); }
  bool valid(TokenId id) const { return id >= 0 && size_t(id) < text.size(); }
};

// Reads the vocabulary, attributes and special ids; throws TokenizerError.
Vocab load_vocab(const gguf::File& f);

// Encodes one fragment of raw text (no special tokens inside) into ids.
class FragmentEncoder {
 public:
  virtual ~FragmentEncoder() = default;
  // `after_special` is true at the start of the text and after a special token
  // (SentencePiece then adds its dummy-prefix space, as llama.cpp does).
  virtual void encode(std::string_view text, bool after_special, std::vector<TokenId>& out) const = 0;
  // The bytes a NORMAL token stands for.
  virtual std::string decode_normal(const std::string& text) const = 0;
};

std::unique_ptr<FragmentEncoder> make_spm_encoder(const Vocab& v);
std::unique_ptr<FragmentEncoder> make_bpe_encoder(const Vocab& v, const gguf::File& f);

[[noreturn]] void fail(const Vocab& v, const std::string& problem);

}  // namespace moelsp::tok
