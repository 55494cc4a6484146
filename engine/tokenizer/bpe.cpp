// Byte-level BPE (tokenizer.ggml.model = "gpt2").
//
//   text → sanitise UTF-8 (bad bytes → U+FFFD, as llama.cpp does)
//        → pre-tokenise: each regex of the model's list splits every current
//          piece into matches and the gaps between them (llama.cpp's semantics)
//        → map bytes to GPT-2's printable code points → merge pairs by rank
//        → look the symbols up in the vocabulary.
// Regexes run in PCRE2 with UTF + UCP so \p{L}, \p{N}, \s follow Unicode.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <queue>

#include <fmt/format.h>

#include "engine/gguf.h"
#include "vocab.h"
#include "word_cache.h"

namespace moelsp::tok {
namespace {

// ---- pre-tokenizer regexes by tokenizer.ggml.pre ----------------------------
// The lists (and their order) are the models' own pre-tokenizers as written in
// their tokenizer.json, in the form llama.cpp uses (case-insensitive
// contractions spelled out).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer {
  std::vector<const char*> names;
  std::vector<const char*> regexes;
  bool ignore_merges = false;  // a word that is itself a token is not split (llama3)
};

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "roberta-bpe", "mellum", "trillion", "gigachat", "a.x-4.0"},
       {kGpt2}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "dbrx", "smaug-bpe", "midm-2.0", "lfm2"},
       {kLlama3},
       true},
      {{"glm4", "chatglm-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "kormo"}, {kQwen2}},
      {{"qwen35"}, {kQwen35}},
      {{"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
        "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", R"(\p{N})"}},
      {{"deepseek-llm"},
       {R"([\r\n])",
        // \s?[A-Za-z and the Latin/Greek/Cyrillic/... letter ranges of DeepSeek-LLM's tokenizer.json]+
        "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf\xc7\x84-"
        "\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-"
        "\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-\xd4\xaf\xd4\xb1-"
        "\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-"
        "\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-"
        "\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-"
        "\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-"
        "\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-"
        "\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-"
        "\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-"
        "\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-"
        "\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-"
        "\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-"
        "\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80-"
        "\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-"
        "\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-"
        "\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-"
        "\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-"
        "\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
        "\\s?[!-/"
        ":-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+",
        R"(\s+$)", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", R"(\p{N}+)"}},
      {{"deepseek-v3", "hunyuan-dense"},
       {R"(\p{N}{1,3})", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"falcon"},
       {R"([\p{P}\$\+<=>\^~\|`]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"([0-9][0-9][0-9])"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2}},
      {{"seed-coder"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"default", ""},
       {R"([\p{P}\$\+<=>\^~\|]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
  };
  return table;
}

// ---- GPT-2 byte ↔ code point mapping ---------------------------------------
struct ByteMap {
  std::array<std::string, 256> byte_to_utf8;
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      byte_to_utf8[b] =
          cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
      cp_to_byte[cp] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

// llama.cpp's lenient decoder: the lead byte fixes the length, continuation
// bytes are checked, anything else is one U+FFFD per bad byte. We additionally
// replace surrogates and code points past U+10FFFF so PCRE2 sees valid UTF-8.
std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; ok && k < len; ++k) {
      if ((uint8_t(s[i + k]) & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3f);
    }
    if (!ok) {
      append_utf8(out, 0xfffd);
      ++i;
      continue;
    }
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) cp = 0xfffd;
    append_utf8(out, cp);
    i += len;
  }
  return out;
}

size_t utf8_char_len(uint8_t c) {
  return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
}

// llama.cpp runs a pattern without \p{..} through std::wregex after replacing
// every non-ASCII whitespace character of the text by U+000B, so such a
// character never matches a literal range like [　-。] or [ࠀ-一] there (it still
// matches \s). We get the same ids by rewriting each non-negated bracket class
// that holds non-ASCII characters as (?:(?!\s)[...]).
std::string exclude_whitespace_from_literal_classes(std::string_view pat) {
  if (pat.find("\\p{") != std::string_view::npos) return std::string(pat);
  std::string out;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      out += pat.substr(i, 2);
      ++i;
      continue;
    }
    if (pat[i] != '[') {
      out += pat[i];
      continue;
    }
    size_t j = i + 1;
    if (j < pat.size() && pat[j] == '^') ++j;
    if (j < pat.size() && pat[j] == ']') ++j;  // a leading ] is literal
    while (j < pat.size() && pat[j] != ']') j += pat[j] == '\\' ? 2 : 1;
    const std::string_view cls = pat.substr(i, j + 1 - i);
    const bool non_ascii = std::any_of(cls.begin(), cls.end(), [](char c) { return uint8_t(c) >= 0x80; });
    if (non_ascii && cls[1] != '^') out += "(?:(?!\\s)" + std::string(cls) + ")";
    else out += cls;
    i = j;
  }
  return out;
}

// ---- PCRE2 wrapper ------------------------------------------------------------
class Regex {
 public:
  Regex(const char* raw_pattern, const Vocab& v) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string pattern = exclude_whitespace_from_literal_classes(raw_pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(v, fmt::format("pre-tokenizer regex failed to compile at {}: {}", err_off, reinterpret_cast<char*>(msg)));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits `piece` (at absolute offset `base` of the text) into matches and the
  // gaps between them, appending [begin, end) ranges.
  void split(std::string_view text, size_t base, size_t len, pcre2_match_data* md,
             std::vector<std::pair<size_t, size_t>>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + base);
    size_t pos = 0, prev = 0;
    while (pos < len) {
      const int rc = jit_ ? pcre2_jit_match(code_, subject, len, pos, 0, md, nullptr)
                          : pcre2_match(code_, subject, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;  // no further match (or a resource limit: keep the rest as one gap)
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step one character
        pos = b + utf8_char_len(uint8_t(text[base + b]));
        continue;
      }
      if (b > prev) out.emplace_back(base + prev, base + b);
      out.emplace_back(base + b, base + e);
      pos = prev = e;
    }
    if (prev < len) out.emplace_back(base + prev, base + len);
  }

  pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

struct MatchData {
  explicit MatchData(const pcre2_code* c) : md(pcre2_match_data_create_from_pattern(c, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
  pcre2_match_data* md;
};

// ---- BPE ------------------------------------------------------------------------
class BpeEncoder final : public FragmentEncoder {
 public:
  BpeEncoder(const Vocab& v, const gguf::File& f) : v_(v) {
    const PreTokenizer* pre = nullptr;
    for (const auto& p : pre_tokenizers())
      for (const char* name : p.names)
        if (v.pre == name) pre = &p;
    if (!pre)
      fail(v, fmt::format("unknown pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}", v.pre, supported_list()));
    ignore_merges_ = pre->ignore_merges;
    for (const char* r : pre->regexes) regexes_.push_back(std::make_unique<Regex>(r, v));

    if (!f.has("tokenizer.ggml.merges")) fail(v, "BPE vocabulary without tokenizer.ggml.merges");
    const auto merges = f.get_array<std::string>("tokenizer.ggml.merges");
    ranks_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t sp = merges[i].find(' ', 1);
      if (sp == std::string::npos) fail(v, fmt::format("merge {} ('{}') has no space", i, merges[i]));
      ranks_.emplace(merges[i], int(i));  // the first occurrence wins
    }
  }

  void encode(std::string_view raw, bool, std::vector<TokenId>& out) const override {
    const std::string text = sanitize_utf8(raw);
    std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}}, next;
    for (const auto& re : regexes_) {
      MatchData md(re->code());
      next.clear();
      for (auto [b, e] : pieces) re->split(text, b, e - b, md.md, next);
      pieces.swap(next);
    }
    std::string word;
    for (auto [b, e] : pieces) {
      word.clear();
      for (size_t i = b; i < e; ++i) word += byte_map().byte_to_utf8[uint8_t(text[i])];
      if (!cache_.lookup(word, out)) {
        const size_t at = out.size();
        encode_word(word, out);
        cache_.store(word, out.data() + at, out.size() - at);
      }
    }
  }

  std::string decode_normal(const std::string& text) const override {
    std::string out;
    const auto& m = byte_map().cp_to_byte;
    for (size_t i = 0; i < text.size();) {
      const size_t len = std::min(utf8_char_len(uint8_t(text[i])), text.size() - i);
      uint32_t cp = len == 1 ? uint8_t(text[i]) : uint8_t(text[i]) & (0x7f >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (uint8_t(text[i + k]) & 0x3f);
      auto it = m.find(cp);
      if (it != m.end()) out += char(it->second);
      else out.append(text, i, len);  // not a byte-level token text: keep it as it is
      i += len;
    }
    return out;
  }

 private:
  static std::string supported_list() {
    std::string s;
    for (const auto& p : pre_tokenizers())
      for (const char* n : p.names)
        if (*n) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
  }

  int rank(std::string_view left, std::string_view right) const {
    key_.assign(left);
    key_ += ' ';
    key_ += right;
    auto it = ranks_.find(key_);
    return it == ranks_.end() ? -1 : it->second;
  }

  // Merge the lowest-ranked adjacent pair until none is left (llama.cpp's order:
  // by rank, ties to the leftmost).
  void encode_word(const std::string& word, std::vector<TokenId>& out) const {
    if (ignore_merges_) {
      if (TokenId id = v_.find(word); id != kNoToken) {
        out.push_back(id);
        return;
      }
    }
    struct Sym {
      size_t off, len;
      int prev, next;
    };
    std::vector<Sym> syms;
    for (size_t i = 0; i < word.size();) {
      const size_t len = std::min(utf8_char_len(uint8_t(word[i])), word.size() - i);
      syms.push_back({i, len, int(syms.size()) - 1, -1});
      i += len;
    }
    for (size_t i = 0; i + 1 < syms.size(); ++i) syms[i].next = int(i + 1);

    struct Bigram {
      int rank, left, right;
      size_t len;  // total length when queued; a changed length means the entry is stale
      bool operator<(const Bigram& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Bigram> queue;
    auto push = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const std::string_view ls(word.data() + syms[l].off, syms[l].len);
      const std::string_view rs(word.data() + syms[r].off, syms[r].len);
      const int k = rank(ls, rs);
      if (k >= 0) queue.push({k, l, r, syms[l].len + syms[r].len});
    };
    for (size_t i = 0; i + 1 < syms.size(); ++i) push(int(i), int(i + 1));
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Sym& l = syms[bg.left];
      Sym& r = syms[bg.right];
      if (l.len == 0 || r.len == 0 || l.next != bg.right || l.len + r.len != bg.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = bg.left;
      push(l.prev, bg.left);
      push(bg.left, l.next);
    }
    for (int i = 0; i >= 0 && !syms.empty(); i = syms[i].next) {
      const std::string_view s(word.data() + syms[i].off, syms[i].len);
      if (TokenId id = v_.find(s); id != kNoToken) {
        out.push_back(id);
        continue;
      }
      // Not in the vocabulary (a broken merge list): fall back to single characters.
      for (size_t k = 0; k < s.size();) {
        const size_t len = std::min(utf8_char_len(uint8_t(s[k])), s.size() - k);
        if (TokenId id = v_.find(s.substr(k, len)); id != kNoToken) out.push_back(id);
        k += len;
      }
    }
  }

  const Vocab& v_;
  WordCache cache_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
  StringIdMap ranks_;
  static thread_local std::string key_;
};

thread_local std::string BpeEncoder::key_;

}  // namespace

std::unique_ptr<FragmentEncoder> make_bpe_encoder(const Vocab& v, const gguf::File& f) {
  return std::make_unique<BpeEncoder>(v, f);
}

}  // namespace moelsp::tok
