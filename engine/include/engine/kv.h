// The paged KV cache: a pool of fixed-size blocks, per-sequence
// block tables, and a prefix cache of full blocks.
//
// A block holds `block_size` consecutive token positions of one sequence for
// every layer. Per token and layer a row stores what attention will read
// again: K then V per kv head for GQA models, or only the normalised latent
// and the roped shared key [c | k_pe] for MLA (v_dim = 0). Rows are F16 by
// default (BF16, F32, or Q8_0 blocks of 32 as options).
//
// Prefix cache: a full block is named by a chained hash of (its parent's hash,
// its tokens), with the model and the row format folded into the root, so a
// block's name says everything that produced its contents. A new sequence maps
// the longest run of cached blocks matching its prompt and computes only the
// rest. Blocks nobody references stay cached and are evicted least recently
// used when the pool runs dry. Only full blocks are shared, and a shared block
// is never written: a sequence that must rewrite part of one (truncation into
// it) copies it first.
//
// Not thread-safe: the engine's scheduler thread owns a pool; the forward
// pass's workers only read rows through the pointers it hands them.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_type.h"
#include "engine/tokenizer.h"
#include "kernels/types.h"

namespace moelsp {

kernels::DType to_dtype(KvType t);

struct KvLayout {
  int n_layer = 0;
  int k_dim = 0, v_dim = 0;  // elements per token and layer (MLA: latent + rope, 0)
  int block_size = 16;       // tokens per block
  KvType type = KvType::F16;
  size_t row_bytes() const;    // one token of one layer
  size_t block_bytes() const;  // block_size rows of one layer
  size_t bytes_per_token() const { return row_bytes() * size_t(n_layer); }
};

// Rows of one layer read through a block table: position p is row p % block_size
// of block blocks[p / block_size]. Also describes a plain contiguous f32 array
// (one block holding every row), so attention has one code path.
struct PagedRows {
  const uint8_t* base = nullptr;  // block 0 of this layer, plus the byte offset of the part (K or V)
  size_t block_bytes = 0, row_bytes = 0;
  const int32_t* blocks = nullptr;
  int block_size = 1;
  kernels::DType type = kernels::DType::F32;

  const uint8_t* row(int64_t pos) const {
    return base + size_t(blocks[pos / block_size]) * block_bytes + size_t(pos % block_size) * row_bytes;
  }
  // Element offset `e` within each row, in bytes (e must start a block of the type).
  PagedRows at(int64_t e) const;
  static PagedRows contiguous(const float* p, int64_t ld);
};

struct KvPoolStats {
  int64_t blocks_total = 0, blocks_in_use = 0, blocks_cached = 0, blocks_free = 0;
  int64_t evictions = 0;
  int64_t lookup_tokens = 0, hit_tokens = 0;  // prefix-cache lookups: tokens asked for, tokens found
  size_t bytes = 0;                           // the pool's reserved size
};

// The prompt cache on disk (engine/prompt_cache.h): where, how large, what is stored.
struct PromptCacheOptions {
  std::string dir;                         // empty: no prompt cache
  uint64_t max_bytes = uint64_t(8) << 30;  // the directory's size bound, all models together
  int min_tokens = 1024;                   // shorter prompts are not stored
};

struct PromptCacheStats {
  int64_t files = 0, bytes = 0;  // this model's files in the directory (bytes: of every file there)
  int64_t blocks_written = 0, blocks_restored = 0;
  int64_t files_refused = 0;   // damaged files deleted
  int64_t writes_skipped = 0;  // prompts not stored because the writer was behind
};

// A second copy of a pool's rows kept elsewhere (the device forward pass's
// cache in GPU memory, engine/device/): it holds the rows of the same block
// ids, so the block tables, prefix sharing and eviction above serve it
// unchanged; only copying a block's rows must happen on its side too.
class KvMirror {
 public:
  virtual ~KvMirror() = default;
  virtual void copy_block(int32_t from, int32_t to) = 0;
  // One layer's rows of block b (block_bytes) to and from host memory: the
  // prompt cache on disk (prompt_cache.h) stores and restores through them.
  virtual void read_block(int32_t b, int layer, uint8_t* dst) = 0;
  virtual void write_block(int32_t b, int layer, const uint8_t* src) = 0;
};

class BlockPool {
 public:
  // `n_blocks` blocks of the layout; `fingerprint` names the model (it seeds
  // the chained hashes). The memory is reserved, not touched: pages are
  // committed as rows are written.
  BlockPool(const KvLayout& layout, int64_t n_blocks, uint64_t fingerprint, bool prefix_cache = true);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvLayout& layout() const { return layout_; }
  int64_t n_blocks() const { return int64_t(meta_.size()); }
  bool prefix_cache() const { return prefix_cache_; }
  // Blocks allocate() can still return (free + cached-unreferenced).
  int64_t available() const { return int64_t(free_.size() + lru_.size()); }

  // A block with refcount 1: a free one, else the least recently used cached
  // one (evicted from the prefix cache); -1 when every block is referenced.
  int32_t allocate();
  void retain(int32_t b);
  // Refcount − 1; at 0 a published block joins the cache (most recently used
  // end), an unpublished one the free list.
  void release(int32_t b);
  int refs(int32_t b) const { return meta_[size_t(b)].refs; }
  // Blocks whose rows someone may read: referenced or cached. A mirror made
  // after rows were written on the host side (restored from disk) copies these.
  std::vector<int32_t> live_blocks() const;

  uint64_t root_hash() const { return root_; }
  static uint64_t chain(uint64_t parent, std::span<const TokenId> tokens);
  // The cached block named (parent, tokens), retained for the caller; -1 if none.
  int32_t lookup(uint64_t parent, std::span<const TokenId> tokens);
  // Among the cached children of `parent`, the one whose tokens share the
  // longest head with `tokens` (at least 1); -1 if none. Not retained.
  int32_t best_child(uint64_t parent, std::span<const TokenId> tokens, int* shared) const;
  // Publishes a full block under (parent, tokens); false (and nothing changes)
  // when another block already holds that content or the cache is off.
  bool publish(int32_t b, uint64_t parent, std::span<const TokenId> tokens);
  bool published(int32_t b) const { return meta_[size_t(b)].published; }
  // Offers a sequence's last, partly filled block (its only reference) to the
  // cache under its parent: found only by best_child (never by lookup, since
  // it is not a whole block), and always copied before use. False when a
  // cached child of `parent` already starts with these tokens.
  bool publish_partial(int32_t b, uint64_t parent, std::span<const TokenId> tokens);
  // Forgets b's name (before its rows are rewritten); b must be referenced only by the caller.
  void unpublish(int32_t b);
  void copy_block(int32_t from, int32_t to);  // every layer's rows (and the mirror's)
  // The rows' other copy; the pool owns it (it dies with the pool).
  void set_mirror(std::unique_ptr<KvMirror> m) { mirror_ = std::move(m); }
  KvMirror* mirror() const { return mirror_.get(); }
  void count_lookup(int64_t asked, int64_t hit) { stats_.lookup_tokens += asked, stats_.hit_tokens += hit; }

  uint8_t* row(int layer, int32_t block, int slot) {
    return layer_base(layer) + size_t(block) * layout_.block_bytes() + size_t(slot) * layout_.row_bytes();
  }
  uint8_t* layer_base(int layer) { return data_ + size_t(layer) * size_t(n_blocks()) * layout_.block_bytes(); }

  KvPoolStats stats() const;
  // Throws std::logic_error naming the first broken invariant: refcounts vs
  // the free and LRU lists, hash map vs published blocks. For tests.
  void check() const;

 private:
  struct Meta {
    int refs = 0;
    bool published = false, partial = false;  // partial: a cached, partly filled block (by_parent_ only)
    bool in_lru = false, in_free = false;
    uint64_t hash = 0, parent = 0;
    std::vector<TokenId> tokens;  // a published block's tokens (collisions are checked, never trusted)
    std::list<int32_t>::iterator lru_it;
  };
  KvLayout layout_;
  uint8_t* data_ = nullptr;  // in map_ (2 MiB-aligned for huge pages)
  size_t bytes_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  bool prefix_cache_;
  uint64_t root_;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // front: least recently used
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::unordered_multimap<uint64_t, int32_t> by_parent_;  // published blocks (whole or partial) by their parent's name
  void forget(int32_t b);                                 // drops b's name from both maps
  mutable KvPoolStats stats_;
  std::unique_ptr<KvMirror> mirror_;
};

// One sequence's block table and the tokens whose rows it holds.
class KvSequence {
 public:
  explicit KvSequence(BlockPool& pool) : pool_(&pool) {}
  ~KvSequence() { clear(); }
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  BlockPool& pool() const { return *pool_; }
  int n_past() const { return int(tokens_.size()); }
  const std::vector<TokenId>& tokens() const { return tokens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  // The chained hash (BlockPool::chain) of each full block, in order.
  const std::vector<uint64_t>& block_hashes() const { return hashes_; }
  int capacity() const { return int(blocks_.size()) * pool_->layout().block_size; }

  // On an empty sequence: maps the longest run of cached full blocks that
  // match `prompt`, then the head of a cached block that continues it partly
  // (copied into a block of its own, since it will be written past that
  // head), covering at most `max_tokens` tokens; returns the tokens mapped.
  int map_prefix(std::span<const TokenId> prompt, int max_tokens);
  // Blocks for n_past() + n tokens; false (and nothing allocated) when the pool cannot provide them.
  bool reserve(int n);
  int blocks_needed(int n) const;  // new blocks reserve(n) would take
  // Records that rows for `toks` (at positions n_past() onward) were written;
  // publishes the blocks this fills.
  void commit(std::span<const TokenId> toks);
  // Drops positions >= n, releasing whole blocks past it; a shared block that
  // would be written again is copied first. Returns false when that copy needs
  // a block the pool cannot give (the sequence is then cut to the block boundary).
  bool truncate(int n);
  void clear();  // releases every block

  // Rows of layer `il` where the next tokens go, and the rows to read.
  uint8_t* row(int il, int pos) {
    const int bs = pool_->layout().block_size;
    return pool_->row(il, blocks_[size_t(pos / bs)], pos % bs);
  }
  PagedRows k_rows(int il) const;
  PagedRows v_rows(int il) const;

 private:
  BlockPool* pool_;
  std::vector<int32_t> blocks_;
  std::vector<TokenId> tokens_;
  std::vector<uint64_t> hashes_;  // chained hash of each full block (published or not)
};

// A single sequence with a private pool sized for n_ctx tokens and no prefix
// sharing: what one-shot commands (generate, logits, perplexity, bench) use.
class KvCache {
 public:
  KvCache(const KvLayout& layout, int n_ctx);
  int n_ctx() const { return n_ctx_; }
  int n_past() const { return seq_->n_past(); }
  void truncate(int n) { seq_->truncate(n); }
  size_t bytes() const { return pool_->stats().bytes; }
  KvSequence& seq() { return *seq_; }
  const KvLayout& layout() const { return pool_->layout(); }

 private:
  int n_ctx_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<KvSequence> seq_;
};

}  // namespace moelsp
