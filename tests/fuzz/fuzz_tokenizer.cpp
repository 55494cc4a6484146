// libFuzzer target: the tokenizers on arbitrary bytes (invalid UTF-8
// included), with special-token parsing on and off, and the decoder on the
// ids they give. One BPE vocabulary (deepseek-coder) and one SentencePiece
// (llama-spm), loaded once.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

namespace {
std::unique_ptr<moelsp::Tokenizer> bpe, spm;

std::unique_ptr<moelsp::Tokenizer> load(const char* name) {
  const auto f = moelsp::gguf::File::open(std::string(MOELSP_TEST_DATA) + "/vocab/" + name);
  return moelsp::Tokenizer::from_gguf(f);
}
}  // namespace

// Loading the vocabularies takes seconds under ASan: here, outside the
// per-input timeout (the first input would otherwise time out).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bpe = load("ggml-vocab-deepseek-coder.gguf");
  spm = load("ggml-vocab-llama-spm.gguf");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto* t : {bpe.get(), spm.get()}) {
    for (bool special : {false, true}) {
      const auto ids = t->encode(text, {.add_special = special, .parse_special = special});
      std::string back;
      for (auto id : ids) back += t->piece(id);
    }
  }
  return 0;
}
