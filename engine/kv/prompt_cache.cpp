#include "engine/prompt_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace moelsp {

namespace fs = std::filesystem;

// File layout (little-endian, as the machine writes it):
//   Fixed        the header below
//   u64[n]       each block's name (its chained hash)
//   u64[n]       each block's checksum over its rows
//   i32[n × bs]  the blocks' tokens
//   …            zeros to a 4 KiB boundary
//   rows         block after block; in a block, layer after layer
//                (block_bytes each), as BlockPool keeps them
struct Fixed {
  char magic[8];
  uint32_t version;
  uint32_t kv_type;
  uint64_t root;  // BlockPool::root_hash(): model fingerprint and row format
  int32_t n_layer, k_dim, v_dim, block_size;
  uint64_t parent;  // the name of the block before the first one (root: none)
  int32_t n_blocks;
  uint32_t pad;
  uint64_t header_sum;  // over the fixed part (this field 0) and the arrays after it
};
static_assert(sizeof(Fixed) == 64);
constexpr char kMagic[8] = {'M', 'O', 'E', 'L', 'S', 'P', 'K', 'V'};
constexpr uint32_t kVersion = 1;
constexpr size_t kAlign = 4096;
constexpr int kMaxQueued = 2;  // writes waiting behind the one in progress

struct PromptCache::File {
  std::string path;
  int64_t bytes = 0, mtime_ns = 0;
  bool ours = false;  // this model and row format (else counted for the size bound only)
  bool dead = false;  // deleted since the last scan
  uint64_t parent = 0;
  std::vector<uint64_t> names, sums;
  std::vector<TokenId> tokens;
  size_t rows_offset = 0;
};

struct PromptCache::Write {
  BlockPool* pool = nullptr;
  uint64_t parent = 0;
  std::vector<uint64_t> names;
  std::vector<TokenId> tokens;
  std::vector<int32_t> blocks;  // retained until written (zero-copy), or
  std::vector<uint8_t> rows;    // the blocks' rows copied: block after block, layer after layer

  // Block k's rows of layer il, wherever they are.
  const uint8_t* row(int k, int il, const KvLayout& l) const {
    if (blocks.empty()) return rows.data() + (size_t(k) * size_t(l.n_layer) + size_t(il)) * l.block_bytes();
    return pool->row(il, blocks[size_t(k)], 0);
  }
};

namespace {

// A 64-bit checksum, four lanes of multiply-rotate over 32-byte stripes
// (the xxHash64 round): several GB/s, so verifying rows costs little next to
// reading them.
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t lane(uint64_t acc, uint64_t in) { return rotl(acc + in * kP2, 31) * kP1; }

uint64_t checksum(const uint8_t* p, size_t n, uint64_t seed) {
  uint64_t v[4] = {seed + kP1 + kP2, seed + kP2, seed, seed - kP1};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + size_t(k) * 8, 8);
      v[k] = lane(v[k], w);
    }
  uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18) + n;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  return h ^ (h >> 33);
}

template <class T>
uint64_t checksum_of(const std::vector<T>& v, uint64_t seed) {
  return checksum(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T), seed);
}

// Over the fixed part (its header_sum taken as 0) and the arrays after it.
uint64_t header_sum(Fixed h, const std::vector<uint64_t>& names, const std::vector<uint64_t>& sums,
                    const std::vector<TokenId>& tokens) {
  h.header_sum = 0;
  return checksum_of(
      tokens, checksum_of(sums, checksum_of(names, checksum(reinterpret_cast<const uint8_t*>(&h), sizeof h, 0))));
}

size_t arrays_bytes(int n_blocks, int block_size) {
  return size_t(n_blocks) * (16 + size_t(block_size) * sizeof(TokenId));
}

size_t rows_offset(int n_blocks, int block_size) {
  return (sizeof(Fixed) + arrays_bytes(n_blocks, block_size) + kAlign - 1) / kAlign * kAlign;
}

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

bool read_all(int fd, void* dst, size_t n, off_t at) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, at);
    if (r <= 0) return false;
    p += r, n -= size_t(r), at += r;
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n, off_t at) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t r = pwrite(fd, p, n, at);
    if (r <= 0) return false;
    p += r, n -= size_t(r), at += r;
  }
  return true;
}

// One block's rows, layer after layer, as the checksum and the file see them.
template <class RowOf>
uint64_t block_sum(const KvLayout& l, const RowOf& row_of) {
  uint64_t h = 0;
  for (int il = 0; il < l.n_layer; ++il) h = checksum(row_of(il), l.block_bytes(), h);
  return h;
}

}  // namespace

PromptCache::Holds::~Holds() {
  for (const int32_t b : blocks_) pool_->release(b);
}

PromptCache::PromptCache(const PromptCacheOptions& opt, const BlockPool& pool,
                         std::function<void(std::function<void()>)> post)
    : opt_(opt), layout_(pool.layout()), root_(pool.root_hash()), post_(std::move(post)) {
  std::error_code ec;
  fs::create_directories(opt_.dir, ec);
  if (!fs::is_directory(opt_.dir))
    throw std::runtime_error(fmt::format("prompt cache: cannot create the directory {}{}", opt_.dir,
                                         ec ? ": " + ec.message() : std::string()));
  if (access(opt_.dir.c_str(), W_OK) != 0)
    throw std::runtime_error(fmt::format("prompt cache: the directory {} is not writable", opt_.dir));
  {
    std::lock_guard lock(mu_);
    scan();
    spdlog::info("prompt cache {}: {} files of this model, {:.1f} of {:.0f} MiB used", opt_.dir, stats_.files,
                 double(stats_.bytes) / double(1 << 20), double(opt_.max_bytes) / double(1 << 20));
  }
  thread_ = std::thread([this] { writer(); });
}

PromptCache::~PromptCache() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PromptCache::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---------------------------------------------------------------------------
// The index: every file's header, and where each block name is.

bool PromptCache::rescan_due() {
  struct stat st {};
  if (stat(opt_.dir.c_str(), &st) != 0) return false;
  return mtime_ns(st) != dir_mtime_ns_;
}

bool PromptCache::read_header(File& f) const {
  const int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Fixed h{};
  const bool magic = read_all(fd, &h, sizeof h, 0) && std::memcmp(h.magic, kMagic, 8) == 0;
  if (magic && h.version != kVersion) {
    close(fd);  // another build's format: left alone, counted for the size bound
    f.ours = false;
    return true;
  }
  bool ok = magic && h.n_blocks > 0 && h.block_size > 0 && h.n_layer > 0 && h.block_size <= (1 << 16) &&
            h.n_blocks <= (1 << 24);
  if (ok) {
    f.ours = h.root == root_ && h.kv_type == uint32_t(layout_.type) && h.n_layer == layout_.n_layer &&
             h.k_dim == layout_.k_dim && h.v_dim == layout_.v_dim && h.block_size == layout_.block_size;
    const size_t n = size_t(h.n_blocks), bs = size_t(h.block_size);
    // The arrays must fit in the file before anything is sized from them.
    if (sizeof h + arrays_bytes(h.n_blocks, h.block_size) > uint64_t(f.bytes)) {
      close(fd);
      return false;
    }
    f.names.resize(n), f.sums.resize(n), f.tokens.resize(n * bs);
    ok = read_all(fd, f.names.data(), n * 8, sizeof h) && read_all(fd, f.sums.data(), n * 8, off_t(sizeof h + n * 8)) &&
         read_all(fd, f.tokens.data(), n * bs * sizeof(TokenId), off_t(sizeof h + n * 16));
    ok = ok && h.header_sum == header_sum(h, f.names, f.sums, f.tokens);
    f.parent = h.parent;
    f.rows_offset = rows_offset(h.n_blocks, h.block_size);
    // Rows of another format have another size: only ours can be checked for length.
    if (ok && f.ours) ok = uint64_t(f.bytes) >= f.rows_offset + n * layout_.block_bytes() * size_t(layout_.n_layer);
  }
  close(fd);
  if (!f.ours) f.names.clear(), f.sums.clear(), f.tokens.clear();
  return ok;
}

void PromptCache::scan() {
  struct stat st {};
  if (stat(opt_.dir.c_str(), &st) == 0) dir_mtime_ns_ = mtime_ns(st);
  std::unordered_map<std::string, File> known;  // headers already read, by path (a file is never rewritten in place)
  for (File& f : files_)
    if (!f.dead) known.emplace(f.path, std::move(f));
  files_.clear();
  by_name_.clear();
  stats_.files = stats_.bytes = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(opt_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".tmp-")) {  // a write that never finished (its process died): gone after an hour
      std::error_code ec2;
      if (now - e.last_write_time(ec2) > std::chrono::hours(1)) fs::remove(e.path(), ec2);
      continue;
    }
    if (!name.ends_with(".kvc") || stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    File f;
    if (auto it = known.find(e.path().string()); it != known.end() && it->second.bytes == st.st_size) {
      f = std::move(it->second);
    } else {
      f.path = e.path().string();
      f.bytes = st.st_size;
      if (!read_header(f)) {
        spdlog::warn("prompt cache: {} is damaged (its header does not check out); deleted", f.path);
        fs::remove(f.path, ec);
        ++stats_.files_refused;
        continue;
      }
    }
    f.mtime_ns = mtime_ns(st);
    stats_.bytes += f.bytes;
    if (f.ours) {
      ++stats_.files;
      for (size_t i = 0; i < f.names.size(); ++i) by_name_.emplace(f.names[i], Loc{files_.size(), int(i)});
    }
    files_.push_back(std::move(f));
  }
}

void PromptCache::refuse(size_t file, const char* why) {
  spdlog::warn("prompt cache: {} is damaged ({}); deleted, its tokens are computed", files_[file].path, why);
  ++stats_.files_refused;
  remove_file(file);
}

void PromptCache::remove_file(size_t i) {
  File& f = files_[i];
  std::error_code ec;
  fs::remove(f.path, ec);
  f.dead = true;
  stats_.bytes -= f.bytes;
  if (!f.ours) return;
  --stats_.files;
  for (const uint64_t n : f.names)
    if (auto it = by_name_.find(n); it != by_name_.end() && it->second.file == i) by_name_.erase(it);
}

void PromptCache::evict() {
  if (uint64_t(stats_.bytes) <= opt_.max_bytes) return;
  std::vector<size_t> order;
  for (size_t i = 0; i < files_.size(); ++i)
    if (!files_[i].dead) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return files_[a].mtime_ns < files_[b].mtime_ns; });
  for (const size_t i : order) {
    if (uint64_t(stats_.bytes) <= opt_.max_bytes) break;
    remove_file(i);
  }
}

// ---------------------------------------------------------------------------
// Restoring (the scheduler thread).

bool PromptCache::load_block(int fd, const File& f, int index, BlockPool& pool, int32_t b) const {
  const size_t bb = layout_.block_bytes();
  std::vector<iovec> iov(size_t(layout_.n_layer));
  for (int il = 0; il < layout_.n_layer; ++il) iov[size_t(il)] = {pool.row(il, b, 0), bb};
  const size_t want = bb * iov.size();
  off_t at = off_t(f.rows_offset + size_t(index) * want);
  // preadv may stop short; the rest is read layer by layer.
  const ssize_t r = preadv(fd, iov.data(), int(iov.size()), at);
  if (r < 0) return false;
  if (size_t(r) < want) {
    size_t done = size_t(r);
    for (const iovec& v : iov) {
      const size_t skip = std::min(done, v.iov_len);
      done -= skip;
      if (skip < v.iov_len &&
          !read_all(fd, static_cast<uint8_t*>(v.iov_base) + skip, v.iov_len - skip, at + off_t(skip)))
        return false;
      at += off_t(v.iov_len);
    }
  }
  return block_sum(layout_, [&](int il) { return pool.row(il, b, 0); }) == f.sums[size_t(index)];
}

int PromptCache::restore(BlockPool& pool, std::span<const TokenId> prompt, int max_tokens, Holds& holds) {
  // A failure here (memory, a device copy) costs the request its restored
  // prefix, never the server: it computes those tokens instead.
  try {
    return restore_locked(pool, prompt, max_tokens, holds);
  } catch (const std::exception& e) {
    spdlog::warn("prompt cache: restoring a prompt failed ({}); its tokens are computed", e.what());
    return 0;
  }
}

void PromptCache::store(const KvSequence& seq) {
  try {
    store_locked(seq);
  } catch (const std::exception& e) {
    spdlog::warn("prompt cache: storing a prompt failed ({}); it stays only in memory", e.what());
  }
}

int PromptCache::restore_locked(BlockPool& pool, std::span<const TokenId> prompt, int max_tokens, Holds& holds) {
  std::lock_guard lock(mu_);
  if (rescan_due()) scan();
  if (by_name_.empty()) return 0;
  const size_t bs = size_t(layout_.block_size);
  const size_t want = std::min(prompt.size(), size_t(std::max(0, max_tokens))) / bs;
  uint64_t parent = pool.root_hash();
  std::unordered_map<size_t, int> fds;
  int loaded = 0;
  for (size_t i = 0; i < want; ++i) {
    const auto toks = prompt.subspan(i * bs, bs);
    const uint64_t name = BlockPool::chain(parent, toks);
    // What the pool has (computed, or restored by an earlier request) is held
    // so that loading cannot evict it, and the chain goes on past it.
    if (const int32_t b = pool.lookup(parent, toks); b >= 0) {
      holds.add(b);
      parent = name;
      continue;
    }
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) break;
    const auto [file, index] = it->second;
    const File& f = files_[file];
    const uint64_t before = index == 0 ? f.parent : f.names[size_t(index) - 1];
    if (before != parent ||
        !std::equal(toks.begin(), toks.end(), f.tokens.begin() + std::ptrdiff_t(size_t(index) * bs)))
      break;
    auto fd = fds.find(file);
    if (fd == fds.end()) fd = fds.emplace(file, open(f.path.c_str(), O_RDONLY | O_CLOEXEC)).first;
    if (fd->second < 0) break;  // deleted by another process since the scan
    const int32_t b = pool.allocate();
    if (b < 0) break;
    if (!load_block(fd->second, f, index, pool, b)) {
      pool.release(b);  // never published: back to the free list
      refuse(file, "a block's rows fail their checksum");
      break;
    }
    if (KvMirror* m = pool.mirror())
      for (int il = 0; il < layout_.n_layer; ++il) m->write_block(b, il, pool.row(il, b, 0));
    if (!pool.publish(b, parent, toks)) {
      pool.release(b);
      break;
    }
    holds.add(b);
    parent = name;
    ++loaded;
  }
  for (const auto& [file, fd] : fds) {
    if (fd < 0) continue;
    futimens(fd, nullptr);  // used now: last in line for eviction
    struct stat st {};
    if (fstat(fd, &st) == 0) files_[file].mtime_ns = mtime_ns(st);
    close(fd);
  }
  stats_.blocks_restored += loaded;
  return loaded * int(bs);
}

// ---------------------------------------------------------------------------
// Storing: planned on the scheduler thread, written on the helper thread.

void PromptCache::store_locked(const KvSequence& seq) {
  const auto& names = seq.block_hashes();
  const size_t bs = size_t(layout_.block_size);
  if (names.size() * bs < size_t(opt_.min_tokens) || names.empty()) return;
  BlockPool& pool = seq.pool();
  std::lock_guard lock(mu_);
  if (rescan_due()) scan();
  std::vector<Write> runs;
  std::set<size_t> used;  // files that already hold some of these blocks
  for (size_t i = 0; i < names.size(); ++i) {
    if (auto it = by_name_.find(names[i]); it != by_name_.end()) {
      used.insert(it->second.file);
      continue;
    }
    if (pending_.count(names[i])) continue;  // queued or being written by an earlier store
    if (runs.empty() || i == 0 || runs.back().names.back() != names[i - 1]) {  // a new run
      runs.emplace_back();
      runs.back().pool = &pool;
      runs.back().parent = i == 0 ? pool.root_hash() : names[i - 1];
    }
    Write& w = runs.back();
    w.names.push_back(names[i]);
    w.blocks.push_back(seq.blocks()[i]);
    w.tokens.insert(w.tokens.end(), seq.tokens().begin() + std::ptrdiff_t(i * bs),
                    seq.tokens().begin() + std::ptrdiff_t((i + 1) * bs));
  }
  for (const size_t file : used) {  // still in use: last in line for eviction
    File& f = files_[file];
    if (utimensat(AT_FDCWD, f.path.c_str(), nullptr, 0) == 0) {
      struct stat st {};
      if (stat(f.path.c_str(), &st) == 0) f.mtime_ns = mtime_ns(st);
    }
  }
  if (runs.empty()) return;
  if (queue_.size() + runs.size() > size_t(kMaxQueued)) {
    ++stats_.writes_skipped;  // the next turn's prompt holds these blocks too
    return;
  }
  for (Write& w : runs) {
    if (uint64_t(w.names.size() * layout_.block_bytes() * size_t(layout_.n_layer)) > opt_.max_bytes) continue;
    hand_over(w);
    pending_.insert(w.names.begin(), w.names.end());
    queue_.push_back(std::move(w));
  }
  cv_.notify_one();
}

// The writer reads the pool's blocks in place while they hold a small share of
// the pool (retained: the pool never rewrites a referenced block); past that
// share their rows are copied, so that a request never finds the pool short
// of blocks because a write is slow. Rows that live on the device (a KV
// mirror) are read from there.
void PromptCache::hand_over(Write& w) {
  BlockPool& pool = *w.pool;
  const int64_t n = int64_t(w.blocks.size());
  KvMirror* m = pool.mirror();
  if (retained_ + n <= pool.n_blocks() / 8) {
    for (const int32_t b : w.blocks) {
      pool.retain(b);
      if (m)
        for (int il = 0; il < layout_.n_layer; ++il) m->read_block(b, il, pool.row(il, b, 0));
    }
    retained_ += n;
    return;
  }
  const size_t bb = layout_.block_bytes();
  w.rows.resize(size_t(n) * size_t(layout_.n_layer) * bb);
  for (size_t k = 0; k < size_t(n); ++k)
    for (int il = 0; il < layout_.n_layer; ++il) {
      uint8_t* dst = w.rows.data() + (k * size_t(layout_.n_layer) + size_t(il)) * bb;
      if (m) m->read_block(w.blocks[k], il, dst);
      else std::memcpy(dst, pool.row(il, w.blocks[k], 0), bb);
    }
  w.blocks.clear();
}

void PromptCache::writer() {
  for (;;) {
    Write w;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, everything written
      w = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    write(w);
    const int64_t held = int64_t(w.blocks.size());
    post_([pool = w.pool, blocks = std::move(w.blocks)] {
      for (const int32_t b : blocks) pool->release(b);
    });
    {
      std::lock_guard lock(mu_);
      retained_ -= held;
      for (const uint64_t n : w.names) pending_.erase(n);
      writing_ = false;
    }
    idle_.notify_all();
  }
}

// The header and arrays of a file of w's blocks, padded to the rows' offset.
std::vector<uint8_t> PromptCache::header_of(const Write& w, File& f) const {
  const int n = int(w.names.size());
  f.ours = true;
  f.parent = w.parent;
  f.names = w.names;
  f.tokens = w.tokens;
  f.rows_offset = rows_offset(n, layout_.block_size);
  for (int k = 0; k < n; ++k) f.sums.push_back(block_sum(layout_, [&](int il) { return w.row(k, il, layout_); }));
  Fixed h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.kv_type = uint32_t(layout_.type);
  h.root = root_;
  h.n_layer = layout_.n_layer, h.k_dim = layout_.k_dim, h.v_dim = layout_.v_dim, h.block_size = layout_.block_size;
  h.parent = w.parent;
  h.n_blocks = n;
  h.header_sum = header_sum(h, f.names, f.sums, f.tokens);
  std::vector<uint8_t> head(f.rows_offset, 0);
  std::memcpy(head.data(), &h, sizeof h);
  std::memcpy(head.data() + sizeof h, f.names.data(), size_t(n) * 8);
  std::memcpy(head.data() + sizeof h + size_t(n) * 8, f.sums.data(), size_t(n) * 8);
  std::memcpy(head.data() + sizeof h + size_t(n) * 16, f.tokens.data(), f.tokens.size() * sizeof(TokenId));
  return head;
}

void PromptCache::write(Write& w) {
  File f;
  const std::vector<uint8_t> head = header_of(w, f);
  // A unique temporary name (two caches of one process, or of two processes,
  // never share one), renamed into place without replacing: a file of the
  // same name written meanwhile by another server holds the same blocks, and
  // replacing it under a reader would make its rows fail their checksums.
  std::string tmp = fmt::format("{}/.tmp-XXXXXX", opt_.dir);
  f.path = fmt::format("{}/{:016x}-{:016x}.kvc", opt_.dir, w.names.front(), w.names.back());
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  bool ok = fd >= 0 && fchmod(fd, 0644) == 0 && write_all(fd, head.data(), head.size(), 0);
  const size_t bb = layout_.block_bytes();
  off_t at = off_t(f.rows_offset);
  for (int k = 0; ok && k < int(w.names.size()); ++k)
    for (int il = 0; ok && il < layout_.n_layer; ++il, at += off_t(bb))
      ok = write_all(fd, w.row(k, il, layout_), bb, at);
  if (fd >= 0) ok = close(fd) == 0 && ok;
  bool exists = false;
  int err = ok ? 0 : errno;
  if (ok && renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, f.path.c_str(), RENAME_NOREPLACE) != 0) {
    err = errno;
    exists = err == EEXIST;
    if (err == EINVAL && rename(tmp.c_str(), f.path.c_str()) == 0) err = 0;  // a file system without NOREPLACE
  }
  if (err != 0 || exists) {
    std::error_code ec;
    if (fd >= 0) fs::remove(tmp, ec);
    if (!exists) {
      spdlog::warn("prompt cache: cannot write {} ({}); the prompt stays only in memory", f.path, std::strerror(err));
      return;
    }  // else the other server's file: indexed from its own header
  }
  std::lock_guard lock(mu_);
  if (add_file(std::move(f), exists) && !exists) stats_.blocks_written += int64_t(w.names.size());
  evict();
}

// Indexes a file just written (or found written by another server: its header
// is read). False when it is gone, damaged, or already indexed by a scan that
// ran after the rename. mu_ held.
bool PromptCache::add_file(File f, bool read_it) {
  struct stat st {};
  if (stat(f.path.c_str(), &st) != 0) return false;
  for (const File& x : files_)
    if (!x.dead && x.path == f.path) return false;
  f.bytes = st.st_size;
  f.mtime_ns = mtime_ns(st);
  if (read_it && !read_header(f)) return false;
  stats_.bytes += f.bytes;
  if (f.ours) {
    ++stats_.files;
    for (size_t i = 0; i < f.names.size(); ++i) by_name_.emplace(f.names[i], Loc{files_.size(), int(i)});
  }
  files_.push_back(std::move(f));
  return true;
}

}  // namespace moelsp
