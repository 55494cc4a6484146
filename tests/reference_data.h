// The reference models' golden data (tests/data/reference: llama.cpp's
// logits for the same GGUF files, with their tolerance rules), shared by the
// CPU engine's and the device pass's checks.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_data.h"

namespace moelsp::test {

struct Ref {
  nlohmann::json doc;
  std::vector<float> prefill, decode;
  int n_vocab = 0, n_prompt = 0;
  const float* prefill_row(int r) const { return prefill.data() + size_t(r) * size_t(n_vocab); }
  const float* decode_row(int r) const { return decode.data() + size_t(r) * size_t(n_vocab); }
};

// A file of f32 values; n (when not 0) is how many it must hold.
inline std::vector<float> read_f32(const std::string& path, size_t n = 0) {
  const std::string s = read_file(path);
  if (n) REQUIRE(s.size() == n * sizeof(float));
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

inline Ref load_ref(const std::string& name) {
  Ref r;
  r.doc = nlohmann::json::parse(read_file(data_path("reference/" + name + ".json")));
  r.n_vocab = r.doc["n_vocab"];
  r.n_prompt = r.doc["n_prompt"];
  r.prefill = read_f32(data_path("reference/" + r.doc["prefill_logits"].get<std::string>()),
                       size_t(r.n_prompt) * size_t(r.n_vocab));
  r.decode = read_f32(data_path("reference/" + r.doc["decode_logits"].get<std::string>()), 16 * size_t(r.n_vocab));
  return r;
}

}  // namespace moelsp::test
