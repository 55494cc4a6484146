// A bounded cache of "text chunk → token ids", shared by both tokenizer
// families.
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "vocab.h"

namespace moelsp::tok {

// Words repeat heavily in code (identifiers, keywords, indentation), and an
// editor re-sends nearly the same text on every keystroke: cache each word's
// merge result. Sharded to keep lock contention low across request threads;
// a shard that grows past its bound is simply cleared.
class WordCache {
 public:
  bool lookup(std::string_view w, std::vector<TokenId>& out) const {
    Shard& s = shard(w);
    std::lock_guard lock(s.mu);
    auto it = s.map.find(w);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::string_view w, const TokenId* ids, size_t n) const {
    if (w.size() > 64) return;  // long runs (e.g. whitespace, base64) rarely repeat
    Shard& s = shard(w);
    std::lock_guard lock(s.mu);
    if (s.map.size() >= kPerShard) s.map.clear();
    s.map.emplace(std::string(w), std::vector<TokenId>(ids, ids + n));
  }

 private:
  static constexpr size_t kShards = 16, kPerShard = 8192;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> map;
  };
  Shard& shard(std::string_view w) const { return shards_[StringHash{}(w) % kShards]; }
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace moelsp::tok
