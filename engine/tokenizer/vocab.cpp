#include "vocab.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "engine/gguf.h"

namespace moelsp::tok {

void fail(const Vocab& v, const std::string& problem) {
  throw TokenizerError(fmt::format("{}: tokenizer: {}", v.file, problem));
}

namespace {

// GGUF tokenizer.ggml.token_type values.
enum : int32_t {
  kTypeUndefined = 0,
  kTypeNormal = 1,
  kTypeUnknown = 2,
  kTypeControl = 3,
  kTypeUserDefined = 4,
  kTypeUnused = 5,
  kTypeByte = 6
};

uint32_t attr_from_type(int32_t t) {
  switch (t) {
    case kTypeUnknown: return kAttrUnknown;
    case kTypeUnused: return kAttrUnused;
    case kTypeNormal: return kAttrNormal;
    case kTypeControl: return kAttrControl;
    case kTypeUserDefined: return kAttrUserDefined;
    case kTypeByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// Texts that llama.cpp treats as special whatever the file says; we follow it so
// that ids and end-of-generation agree with the peer.
constexpr std::array kEotTexts{"<|eot_id|>",
                               "<|im_end|>",
                               "<|end|>",
                               "<end_of_turn>",
                               "<|endoftext|>",
                               "<|end_of_text|>",
                               "<EOT>",
                               "_<EOT>",
                               "[EOT]",
                               "<\xef\xbd\x9c"
                               "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                               "<end_of_utterance>"};
constexpr std::array kFimPreTexts{"<|fim_prefix|>",
                                  "<fim-prefix>",
                                  "<fim_prefix>",
                                  "<\xef\xbd\x9c"
                                  "fim\xe2\x96\x81"
                                  "begin\xef\xbd\x9c>",
                                  "<PRE>",
                                  "\xe2\x96\x81<PRE>",
                                  "<|code_prefix|>",
                                  "<|prefix|>"};
constexpr std::array kFimSufTexts{"<|fim_suffix|>",
                                  "<fim-suffix>",
                                  "<fim_suffix>",
                                  "<\xef\xbd\x9c"
                                  "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                  "<SUF>",
                                  "\xe2\x96\x81<SUF>",
                                  "<|code_suffix|>",
                                  "<|suffix|>"};
constexpr std::array kFimMidTexts{"<|fim_middle|>",
                                  "<fim-middle>",
                                  "<fim_middle>",
                                  "<\xef\xbd\x9c"
                                  "fim\xe2\x96\x81"
                                  "end\xef\xbd\x9c>",
                                  "<MID>",
                                  "\xe2\x96\x81<MID>",
                                  "<|code_middle|>",
                                  "<|middle|>"};
constexpr std::array kFimPadTexts{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::array kFimRepTexts{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array kFimSepTexts{"<|file_sep|>"};
constexpr std::array kEogTexts{"<|eot_id|>",
                               "<|im_end|>",
                               "<|end|>",
                               "<|return|>",
                               "<|call|>",
                               "<|flush|>",
                               "<|calls|>",
                               "<end_of_turn>",
                               "<|endoftext|>",
                               "</s>",
                               "<|eom_id|>",
                               "<EOT>",
                               "_<EOT>",
                               "[EOT]",
                               "[EOS]",
                               "<|end_of_text|>",
                               "<end_of_utterance>",
                               "<eos>",
                               "<turn|>",
                               "<\xef\xbd\x9c"
                               "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};

template <size_t N>
bool one_of(std::string_view s, const std::array<const char*, N>& xs) {
  return std::any_of(xs.begin(), xs.end(), [&](const char* x) { return s == x; });
}

// tokenizer.ggml.model (llama or gpt2) and .pre.
void read_kind(const gguf::File& f, Vocab& v) {
  try {
    v.model = f.get<std::string>("tokenizer.ggml.model");
  } catch (const gguf::GgufError&) {
    fail(v, "no tokenizer.ggml.model key: the file carries no tokenizer");
  }
  v.pre = f.get_or<std::string>("tokenizer.ggml.pre", "");
  if (v.model != "llama" && v.model != "gpt2") {
    if (v.model == "bert")
      fail(v,
           "tokenizer model 'bert' (WordPiece) is not supported: moelsp serves generative "
           "code models, which use 'llama' (SentencePiece) or 'gpt2' (byte-level BPE)");
    fail(v, fmt::format("unknown tokenizer model '{}' (supported: llama, gpt2)", v.model));
  }
}

// The tokens' text, scores and attributes, and the text → id map.
void read_tokens(const gguf::File& f, Vocab& v) {
  v.text = f.get_array<std::string>("tokenizer.ggml.tokens");
  const size_t n = v.text.size();
  if (n == 0) fail(v, "tokenizer.ggml.tokens is empty");
  if (n > size_t(INT32_MAX)) fail(v, "vocabulary too large");
  if (f.has("tokenizer.ggml.scores")) {
    v.score = f.get_array<float>("tokenizer.ggml.scores");
    if (v.score.size() < n)
      fail(v, fmt::format("tokenizer.ggml.scores has {} entries for {} tokens", v.score.size(), n));
    v.score.resize(n);
  } else {
    v.score.assign(n, 0.0f);
  }
  v.attr.assign(n, kAttrNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    auto types = f.get_array<int32_t>("tokenizer.ggml.token_type");
    if (types.size() < n)
      fail(v, fmt::format("tokenizer.ggml.token_type has {} entries for {} tokens", types.size(), n));
    for (size_t i = 0; i < n; ++i) v.attr[i] = attr_from_type(types[i]);
  }
  v.text_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.text[i].empty()) v.text[i] = fmt::format("[EMPTY_{}]", i);  // as llama.cpp names them
    v.text_to_id[v.text[i]] = TokenId(i);                             // a later duplicate wins, as in llama.cpp
  }
}

// The special tokens: the family's defaults, then the file's keys.
void read_special_tokens(const gguf::File& f, Vocab& v) {
  const size_t n = v.text.size();
  SpecialTokens& s = v.special;
  if (v.model == "llama") {
    s.bos = 1;
    s.eos = 2;
    s.unk = 0;
    s.add_bos = true;
    v.add_space_prefix = f.get_or<bool>("tokenizer.ggml.add_space_prefix", true);
  } else {
    const bool llama3_like = v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "llama-bpe" || v.pre == "falcon3" ||
                             v.pre == "tekken" || v.pre == "pixtral";
    s.add_bos = llama3_like;
  }
  if (v.pre == "glm4" || v.pre == "chatglm-bpe") s.bos = kNoToken;
  struct KeyId {
    const char* key;
    TokenId* id;
  };
  const KeyId keys[] = {
      {"tokenizer.ggml.bos_token_id", &s.bos},         {"tokenizer.ggml.eos_token_id", &s.eos},
      {"tokenizer.ggml.eot_token_id", &s.eot},         {"tokenizer.ggml.eom_token_id", &s.eom},
      {"tokenizer.ggml.unknown_token_id", &s.unk},     {"tokenizer.ggml.seperator_token_id", &s.sep},
      {"tokenizer.ggml.padding_token_id", &s.pad},     {"tokenizer.ggml.mask_token_id", &s.mask},
      {"tokenizer.ggml.prefix_token_id", &s.fim_pre},  {"tokenizer.ggml.suffix_token_id", &s.fim_suf},
      {"tokenizer.ggml.middle_token_id", &s.fim_mid},  {"tokenizer.ggml.fim_pre_token_id", &s.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &s.fim_suf}, {"tokenizer.ggml.fim_mid_token_id", &s.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &s.fim_pad}, {"tokenizer.ggml.fim_rep_token_id", &s.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &s.fim_sep},
  };
  for (const auto& k : keys) {
    if (*k.id >= 0 && size_t(*k.id) >= n) *k.id = kNoToken;  // a default out of range
    // Some converters write "no such token" as -1: treat a negative id as unset.
    if (auto id = f.get_opt<int64_t>(k.key)) {
      if (*id < 0) {
        *k.id = kNoToken;
        continue;
      }
      if (uint64_t(*id) >= n) fail(v, fmt::format("{} = {} is outside the vocabulary of {} tokens", k.key, *id, n));
      *k.id = TokenId(*id);
    }
  }
  s.add_bos = f.get_or<bool>("tokenizer.ggml.add_bos_token", s.add_bos);
  s.add_eos = f.get_or<bool>("tokenizer.ggml.add_eos_token", s.add_eos);
  if (auto order = f.get_opt<std::string>("moelsp.fim_order")) {
    if (*order != "psm" && *order != "spm")
      fail(v, fmt::format("moelsp.fim_order is \"{}\"; expected \"psm\" or \"spm\"", *order));
    s.fim_spm = *order == "spm";
  }
}

// EOT / FIM tokens recognised by their text where the file gave no id (made
// control tokens), and the unused control tokens marked.
void detect_special_by_text(Vocab& v) {
  const size_t n = v.text.size();
  SpecialTokens& s = v.special;
  auto detect = [&](TokenId& id, const auto& texts) {
    if (id != kNoToken) return;
    for (size_t i = 0; i < n; ++i)
      if (one_of(v.text[i], texts)) {
        id = TokenId(i);
        v.attr[i] |= kAttrControl;
        return;
      }
  };
  detect(s.eot, kEotTexts);
  detect(s.eom, std::array{"<|eom_id|>"});
  detect(s.fim_pre, kFimPreTexts);
  detect(s.fim_suf, kFimSufTexts);
  detect(s.fim_mid, kFimMidTexts);
  detect(s.fim_pad, kFimPadTexts);
  detect(s.fim_rep, kFimRepTexts);
  detect(s.fim_sep, kFimSepTexts);

  for (size_t i = 0; i < n; ++i)
    if ((v.attr[i] & kAttrControl) && v.text[i].find("unused") != std::string::npos) v.attr[i] |= kAttrUnused;
}

// The end-of-generation set: the FIM pad/repo/separator tokens, tokens whose
// text ends a turn in some family, EOS, EOT and EOM.
void collect_eog(Vocab& v) {
  const size_t n = v.text.size();
  const SpecialTokens& s = v.special;
  auto add_eog = [&](TokenId id) {
    if (id != kNoToken && std::find(v.eog.begin(), v.eog.end(), id) == v.eog.end()) v.eog.push_back(id);
  };
  add_eog(s.fim_pad);
  add_eog(s.fim_rep);
  add_eog(s.fim_sep);
  for (size_t i = 0; i < n; ++i)
    if (one_of(v.text[i], kEogTexts)) {
      add_eog(TokenId(i));
      v.attr[i] |= kAttrControl;
    }
  add_eog(s.eos);
  add_eog(s.eot);
  add_eog(s.eom);

  // gpt-oss's harmony format (o200k_harmony) ends a turn with <|return|> or
  // <|call|>; its <|end|> closes one channel's message inside the answer
  // (analysis, then final), so it must not end generation, and it and the
  // channel markers are rendered as text for the chat layer to parse
  // (engine/harmony.h). llama.cpp does the same.
  const auto in_eog = [&](TokenId id) {
    return id != kNoToken && std::find(v.eog.begin(), v.eog.end(), id) != v.eog.end();
  };
  const TokenId end = v.find("<|end|>");
  if (in_eog(end) && ((in_eog(v.find("<|return|>")) && in_eog(v.find("<|call|>"))) ||
                      (in_eog(v.find("<|calls|>")) && in_eog(v.find("<|flush|>"))))) {
    v.eog.erase(std::find(v.eog.begin(), v.eog.end(), end));
    v.attr[size_t(end)] = kAttrUserDefined;
  }
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (const TokenId id = v.find(t); id != kNoToken) v.attr[size_t(id)] = kAttrUserDefined;
  std::sort(v.eog.begin(), v.eog.end());
}

}  // namespace

Vocab load_vocab(const gguf::File& f) {
  Vocab v;
  v.file = f.path();
  read_kind(f, v);
  read_tokens(f, v);
  read_special_tokens(f, v);
  detect_special_by_text(v);
  collect_eog(v);
  // Tokens the pre-tokenizer splits out before anything else, longest first.
  const size_t n = v.text.size();
  for (size_t i = 0; i < n; ++i)
    if (v.attr[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.partition_tokens.push_back(TokenId(i));
  std::stable_sort(v.partition_tokens.begin(), v.partition_tokens.end(),
                   [&](TokenId a, TokenId b) { return v.text[a].size() > v.text[b].size(); });
  return v;
}

}  // namespace moelsp::tok
