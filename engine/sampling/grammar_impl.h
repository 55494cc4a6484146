// The compiled grammar (engine/grammar.h): rules as runs of elements, each
// run one alternative ending in kEnd. Shared by the GBNF compiler
// (gbnf.cpp) and the matcher (grammar_match.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/grammar.h"

namespace moelsp {

using ByteSet = std::array<uint64_t, 4>;
inline bool has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
inline void set_range(ByteSet& s, unsigned lo, unsigned hi) {
  for (unsigned b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t(1) << (b & 63);
}

struct Grammar {
  enum Kind : uint8_t { kEnd, kBytes, kRef };
  struct Elem {
    Kind kind;
    uint32_t arg;  // kBytes: index into sets; kRef: rule id
  };
  std::vector<Elem> elems;                  // every alternative of every rule, each ending in kEnd
  std::vector<ByteSet> sets;                // the byte sets of kBytes elements
  std::vector<std::vector<uint32_t>> alts;  // rule id → the positions where its alternatives start
  std::vector<std::string> names;           // rule id → its name (generated rules: name-N)
  uint32_t root = 0;
  std::string source;
};

}  // namespace moelsp
