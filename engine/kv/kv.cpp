#include "engine/kv.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace moelsp {

const char* to_string(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
    case KvType::Q8_0: return "q8_0";
  }
  return "?";
}

KvType kv_type_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0})
    if (lower == to_string(t)) return t;
  throw std::invalid_argument(fmt::format("unknown KV cache type '{}' (f16, bf16, f32, q8_0)", name));
}

kernels::DType to_dtype(KvType t) {
  switch (t) {
    case KvType::F32: return kernels::DType::F32;
    case KvType::F16: return kernels::DType::F16;
    case KvType::BF16: return kernels::DType::BF16;
    case KvType::Q8_0: return kernels::DType::Q8_0;
  }
  return kernels::DType::F32;
}

size_t KvLayout::row_bytes() const {
  const auto d = to_dtype(type);
  const auto k = kernels::row_bytes(d, uint64_t(k_dim)), v = kernels::row_bytes(d, uint64_t(v_dim));
  if (!k || !v)
    throw std::invalid_argument(fmt::format("KV type {} needs row sizes that are multiples of {} (k {}, v {})",
                                            to_string(type), kernels::traits(d).block_size, k_dim, v_dim));
  return size_t(*k + *v);
}

size_t KvLayout::block_bytes() const { return row_bytes() * size_t(block_size); }

PagedRows PagedRows::at(int64_t e) const {
  PagedRows r = *this;
  const auto off = kernels::row_bytes(type, uint64_t(e));
  if (!off) throw std::invalid_argument("PagedRows::at: offset inside a quantization block");
  r.base += *off;
  return r;
}

PagedRows PagedRows::contiguous(const float* p, int64_t ld) {
  static const int32_t kZero = 0;
  PagedRows r;
  r.base = reinterpret_cast<const uint8_t*>(p);
  r.row_bytes = size_t(ld) * sizeof(float);
  r.block_bytes = 0;
  r.blocks = &kZero;
  r.block_size = 1 << 30;
  r.type = kernels::DType::F32;
  return r;
}

// ---------------------------------------------------------------------------
// BlockPool

namespace {

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 of the running state and the next word
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t BlockPool::chain(uint64_t parent, std::span<const TokenId> tokens) {
  uint64_t h = mix(parent, tokens.size());
  for (TokenId t : tokens) h = mix(h, uint64_t(uint32_t(t)));
  return h;
}

BlockPool::BlockPool(const KvLayout& layout, int64_t n_blocks, uint64_t fingerprint, bool prefix_cache)
    : layout_(layout), prefix_cache_(prefix_cache) {
  if (layout.n_layer <= 0 || layout.k_dim <= 0 || layout.v_dim < 0 || layout.block_size <= 0 || n_blocks <= 0)
    throw std::invalid_argument(fmt::format("bad KV layout: {} layers, k {}, v {}, block {}, {} blocks", layout.n_layer,
                                            layout.k_dim, layout.v_dim, layout.block_size, n_blocks));
  bytes_ = layout_.block_bytes() * size_t(n_blocks) * size_t(layout_.n_layer);
  // Anonymous memory, reserved without committing: a pool sized for the
  // worst case costs RAM only for the rows actually written. A large pool
  // starts on a 2 MiB boundary with transparent huge pages: a token's rows
  // touch every layer's region, and on 4 KiB pages a decode step took a page
  // fault every other token in each layer, each ~10-20 µs on this VM (most of
  // it in the hypervisor), on the thread the others wait for: 11.6 µs of every
  // layer of a qwen3moe-mid decode step (~8 % of it) went to storing K and V.
  // The cost: up to 2 MiB per layer's region committed at its first row,
  // instead of 4 KiB.
  constexpr size_t kHuge = size_t(2) << 20;
  const bool huge = bytes_ >= kHuge;
  const size_t span = huge ? (bytes_ + kHuge - 1) / kHuge * kHuge : bytes_;  // the tail's page is huge too
  map_bytes_ = span + (huge ? kHuge : 0);
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(fmt::format("cannot reserve {:.1f} MiB for the KV cache", double(bytes_) / (1 << 20)));
  map_ = p;
  data_ = static_cast<uint8_t*>(p);
  if (huge) {
    data_ += (kHuge - reinterpret_cast<uintptr_t>(p) % kHuge) % kHuge;
    madvise(data_, span, MADV_HUGEPAGE);
  }
  root_ = mix(mix(mix(fingerprint, uint64_t(layout.type)), uint64_t(layout.block_size)),
              uint64_t(layout.k_dim) << 32 | uint64_t(layout.v_dim));
  meta_.resize(size_t(n_blocks));
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) {
    free_.push_back(int32_t(b));
    meta_[size_t(b)].in_free = true;
  }
  stats_.blocks_total = n_blocks;
  stats_.bytes = bytes_;
}

BlockPool::~BlockPool() {
  if (map_) munmap(map_, map_bytes_);
}

int32_t BlockPool::allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
    meta_[size_t(b)].in_free = false;
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    meta_[size_t(b)].in_lru = false;
    forget(b);
    ++stats_.evictions;
  } else {
    return -1;
  }
  meta_[size_t(b)].refs = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  Meta& m = meta_[size_t(b)];
  if (m.in_free) throw std::logic_error(fmt::format("KV block {} retained while free", b));
  if (m.in_lru) {
    lru_.erase(m.lru_it);
    m.in_lru = false;
  }
  ++m.refs;
}

void BlockPool::release(int32_t b) {
  Meta& m = meta_[size_t(b)];
  if (m.refs <= 0) throw std::logic_error(fmt::format("KV block {} released with refcount {}", b, m.refs));
  if (--m.refs > 0) return;
  if (m.published) {
    m.lru_it = lru_.insert(lru_.end(), b);
    m.in_lru = true;
  } else {
    free_.push_back(b);
    m.in_free = true;
  }
}

int32_t BlockPool::lookup(uint64_t parent, std::span<const TokenId> tokens) {
  if (!prefix_cache_) return -1;
  const auto it = by_hash_.find(chain(parent, tokens));
  if (it == by_hash_.end()) return -1;
  const Meta& m = meta_[size_t(it->second)];
  if (m.parent != parent || !std::equal(tokens.begin(), tokens.end(), m.tokens.begin(), m.tokens.end())) return -1;
  retain(it->second);
  return it->second;
}

bool BlockPool::publish(int32_t b, uint64_t parent, std::span<const TokenId> tokens) {
  if (!prefix_cache_) return false;
  Meta& m = meta_[size_t(b)];
  if (m.published) return false;
  const uint64_t h = chain(parent, tokens);
  if (!by_hash_.emplace(h, b).second) return false;
  by_parent_.emplace(parent, b);
  m.published = true;
  m.hash = h;
  m.parent = parent;
  m.tokens.assign(tokens.begin(), tokens.end());
  return true;
}

bool BlockPool::publish_partial(int32_t b, uint64_t parent, std::span<const TokenId> tokens) {
  Meta& m = meta_[size_t(b)];
  if (!prefix_cache_ || m.published || m.refs != 1 || tokens.empty()) return false;
  int shared = 0;
  const int32_t have = best_child(parent, tokens, &shared);
  if (have >= 0 && size_t(shared) == tokens.size()) return false;  // nothing new
  by_parent_.emplace(parent, b);
  m.published = m.partial = true;
  m.parent = parent;
  m.tokens.assign(tokens.begin(), tokens.end());
  return true;
}

void BlockPool::forget(int32_t b) {
  Meta& m = meta_[size_t(b)];
  if (!m.published) return;
  if (!m.partial) by_hash_.erase(m.hash);
  m.partial = false;
  const auto [lo, hi] = by_parent_.equal_range(m.parent);
  for (auto it = lo; it != hi; ++it)
    if (it->second == b) {
      by_parent_.erase(it);
      break;
    }
  m.published = false;
  m.tokens.clear();
}

int32_t BlockPool::best_child(uint64_t parent, std::span<const TokenId> tokens, int* shared) const {
  int32_t best = -1;
  *shared = 0;
  if (!prefix_cache_) return -1;
  const auto [lo, hi] = by_parent_.equal_range(parent);
  for (auto it = lo; it != hi; ++it) {
    const Meta& m = meta_[size_t(it->second)];
    const size_t n = std::min(tokens.size(), m.tokens.size());
    int k = 0;
    while (size_t(k) < n && m.tokens[size_t(k)] == tokens[size_t(k)]) ++k;
    if (k > *shared) *shared = k, best = it->second;
  }
  return best;
}

void BlockPool::unpublish(int32_t b) {
  Meta& m = meta_[size_t(b)];
  if (!m.published) return;
  if (m.refs != 1) throw std::logic_error(fmt::format("KV block {} unpublished with {} references", b, m.refs));
  forget(b);
}

void BlockPool::copy_block(int32_t from, int32_t to) {
  for (int il = 0; il < layout_.n_layer; ++il) std::memcpy(row(il, to, 0), row(il, from, 0), layout_.block_bytes());
  if (mirror_) mirror_->copy_block(from, to);
}

std::vector<int32_t> BlockPool::live_blocks() const {
  std::vector<int32_t> out;
  for (size_t b = 0; b < meta_.size(); ++b)
    if (meta_[b].refs > 0 || meta_[b].in_lru) out.push_back(int32_t(b));
  return out;
}

KvPoolStats BlockPool::stats() const {
  KvPoolStats s = stats_;
  s.blocks_free = int64_t(free_.size());
  s.blocks_cached = int64_t(lru_.size());
  s.blocks_in_use = s.blocks_total - s.blocks_free - s.blocks_cached;
  return s;
}

void BlockPool::check() const {
  size_t n_free = 0, n_lru = 0, n_pub = 0, n_whole = 0;
  for (size_t b = 0; b < meta_.size(); ++b) {
    const Meta& m = meta_[b];
    const auto fail = [&](const char* what) {
      throw std::logic_error(fmt::format("KV block {}: {} (refs {}, free {}, cached {}, published {})", b, what, m.refs,
                                         m.in_free, m.in_lru, m.published));
    };
    if (m.refs < 0) fail("negative refcount");
    if (m.in_free && m.in_lru) fail("both free and cached");
    if (m.refs > 0 && (m.in_free || m.in_lru)) fail("referenced but on a free or cached list");
    if (m.refs == 0 && !m.in_free && !m.in_lru) fail("unreferenced and on no list (leaked)");
    if (m.in_lru && !m.published) fail("cached without a name");
    if (m.in_free && m.published) fail("free but still named");
    if (m.partial && !m.published) fail("partial without being published");
    if (m.published) {
      ++n_pub;
      if (!m.partial) {
        ++n_whole;
        const auto it = by_hash_.find(m.hash);
        if (it == by_hash_.end() || it->second != int32_t(b)) fail("named but not in the hash map");
      }
    }
    n_free += m.in_free, n_lru += m.in_lru;
  }
  if (n_free != free_.size()) throw std::logic_error("free list length differs from the blocks marked free");
  if (n_lru != lru_.size()) throw std::logic_error("LRU list length differs from the blocks marked cached");
  if (n_whole != by_hash_.size()) throw std::logic_error("hash map holds blocks that are not published");
  if (n_pub != by_parent_.size()) throw std::logic_error("parent index holds blocks that are not published");
  for (const auto& [parent, b] : by_parent_)
    if (!meta_[size_t(b)].published || meta_[size_t(b)].parent != parent)
      throw std::logic_error(fmt::format("parent index entry for KV block {} is stale", b));
  std::vector<char> seen(meta_.size(), 0);
  for (int32_t b : free_)
    if (seen[size_t(b)]++) throw std::logic_error(fmt::format("KV block {} twice on the free list", b));
}

// ---------------------------------------------------------------------------
// KvSequence

int KvSequence::map_prefix(std::span<const TokenId> prompt, int max_tokens) {
  if (!blocks_.empty()) throw std::logic_error("map_prefix on a sequence that holds blocks");
  const int bs = pool_->layout().block_size;
  const int64_t want = std::min<int64_t>(int64_t(prompt.size()), max_tokens) / bs * bs;  // whole blocks
  uint64_t parent = pool_->root_hash();
  int mapped = 0;
  while (mapped + bs <= want) {
    const auto toks = prompt.subspan(size_t(mapped), size_t(bs));
    const int32_t b = pool_->lookup(parent, toks);
    if (b < 0) break;
    parent = BlockPool::chain(parent, toks);
    blocks_.push_back(b);
    hashes_.push_back(parent);
    tokens_.insert(tokens_.end(), toks.begin(), toks.end());
    mapped += bs;
  }
  // A cached block that continues the prompt for part of its length (an edit
  // inside it): its head is copied into a private block, so the request
  // recomputes from the first changed token rather than from the block start.
  const int64_t limit = std::min<int64_t>(int64_t(prompt.size()), max_tokens);
  if (mapped < limit) {
    int shared = 0;
    const auto rest = prompt.subspan(size_t(mapped), size_t(std::min<int64_t>(bs, limit - mapped)));
    const int32_t src = pool_->best_child(parent, rest, &shared);
    if (src >= 0 && shared > 0) {
      pool_->retain(src);  // kept from eviction while allocate() looks for room
      const int32_t b = pool_->allocate();
      if (b >= 0) {
        pool_->copy_block(src, b);
        blocks_.push_back(b);
        tokens_.insert(tokens_.end(), rest.begin(), rest.begin() + shared);
        mapped += shared;
      }
      pool_->release(src);
    }
  }
  pool_->count_lookup(limit, mapped);
  return mapped;
}

int KvSequence::blocks_needed(int n) const {
  const int bs = pool_->layout().block_size;
  const int need = (n_past() + n + bs - 1) / bs;
  return std::max(0, need - int(blocks_.size()));
}

bool KvSequence::reserve(int n) {
  const int need = blocks_needed(n);
  if (need > pool_->available()) return false;
  for (int i = 0; i < need; ++i) blocks_.push_back(pool_->allocate());
  return true;
}

void KvSequence::commit(std::span<const TokenId> toks) {
  const int bs = pool_->layout().block_size;
  if (n_past() + int(toks.size()) > capacity()) throw std::logic_error("KV commit beyond the reserved blocks");
  tokens_.insert(tokens_.end(), toks.begin(), toks.end());
  while (int(hashes_.size()) < n_past() / bs) {
    const size_t i = hashes_.size();
    const uint64_t parent = i == 0 ? pool_->root_hash() : hashes_.back();
    const auto span = std::span(tokens_).subspan(i * size_t(bs), size_t(bs));
    hashes_.push_back(BlockPool::chain(parent, span));
    pool_->publish(blocks_[i], parent, span);
  }
}

bool KvSequence::truncate(int n) {
  if (n >= n_past()) return true;
  const int bs = pool_->layout().block_size;
  n = std::max(0, n);
  const size_t keep = size_t((n + bs - 1) / bs);
  while (blocks_.size() > keep) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
  tokens_.resize(size_t(n));
  hashes_.resize(std::min(hashes_.size(), size_t(n / bs)));
  if (n % bs == 0) return true;
  // The last block keeps n % bs rows and will be written past them.
  int32_t& last = blocks_.back();
  if (pool_->refs(last) == 1) {
    pool_->unpublish(last);
    return true;
  }
  const int32_t copy = pool_->allocate();
  if (copy < 0) {
    pool_->release(last);
    blocks_.pop_back();
    tokens_.resize(size_t(n / bs * bs));
    return false;
  }
  pool_->copy_block(last, copy);
  pool_->release(last);
  last = copy;
  return true;
}

void KvSequence::clear() {
  // The partly filled last block is offered to the cache too: the next
  // keystroke's prompt usually continues into it.
  const int bs = pool_->layout().block_size, n = n_past();
  if (n % bs != 0 && size_t(n / bs) < blocks_.size() && hashes_.size() == size_t(n / bs)) {
    const uint64_t parent = hashes_.empty() ? pool_->root_hash() : hashes_.back();
    pool_->publish_partial(blocks_[size_t(n / bs)], parent, std::span(tokens_).subspan(size_t(n / bs * bs)));
  }
  // Released last block first, so the cache evicts a prefix's tail before its head.
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool_->release(*it);
  blocks_.clear();
  tokens_.clear();
  hashes_.clear();
}

PagedRows KvSequence::k_rows(int il) const {
  const KvLayout& L = pool_->layout();
  PagedRows r;
  r.base = pool_->layer_base(il);
  r.block_bytes = L.block_bytes();
  r.row_bytes = L.row_bytes();
  r.blocks = blocks_.data();
  r.block_size = L.block_size;
  r.type = to_dtype(L.type);
  return r;
}

PagedRows KvSequence::v_rows(int il) const { return k_rows(il).at(pool_->layout().k_dim); }

// ---------------------------------------------------------------------------
// KvCache

KvCache::KvCache(const KvLayout& layout, int n_ctx) : n_ctx_(n_ctx) {
  if (n_ctx <= 0) throw std::invalid_argument("context size must be positive");
  const int64_t n_blocks = (int64_t(n_ctx) + layout.block_size - 1) / layout.block_size;
  pool_ = std::make_unique<BlockPool>(layout, n_blocks, 0, false);
  seq_ = std::make_unique<KvSequence>(*pool_);
}

}  // namespace moelsp
