// The prompt cache on disk (`--prompt-cache DIR`): the KV blocks of long
// prompts written to files, so that a later process — a new agent session, a
// restarted server or editor — maps a stored prefix instead of computing it.
// An agent's system prompt and tools are 8-30k tokens: minutes of prefill
// for a 30B MoE on a laptop CPU, against well under a second to read them.
//
// Names. A block is named as the pool names it (kv.h): the chained hash of
// the model file's fingerprint, the row format (KV type, block size, row
// sizes) and every token up to its last. A file holds a run of consecutive
// blocks of one chain; its header carries the row format, the name of the
// block before the run, and each block's name, tokens and checksum. Which
// file holds a block does not matter, so servers of the same model share a
// directory, and a prompt is found block by block across files.
//
// Trust. Nothing is used on the hash alone: a block's tokens must equal the
// prompt's and its checksum its rows. A file whose header does not parse or
// whose rows fail their checksum is deleted (and those tokens computed); a
// file of another model or row format is left alone and never read.
//
// Writes happen on a helper thread once a prompt is done: the scheduler
// retains the prompt's blocks not yet on disk (the pool never rewrites a
// referenced block) while the writes hold at most an eighth of the pool, and
// copies their rows past that, so a slow disk never leaves a request short of
// blocks. The helper writes them to a uniquely named temporary file, renames
// it into place without replacing a file of that name (another server's,
// with the same blocks), and hands the blocks back. Blocks already queued are
// not queued again. Restores happen on the scheduler
// thread as a request starts, before it maps its prefix: the rows are read
// straight into free blocks of the pool, which are then published as if they
// had been computed.
//
// Size: the directory is kept under `max_bytes` by deleting the least
// recently used files (their modification time; a restore touches what it
// reads).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/kv.h"

namespace moelsp {

class PromptCache {
 public:
  // `post` runs a function on the pool's thread (the scheduler's) soon: the
  // writer hands finished blocks back through it. Creates `dir` if needed;
  // throws std::runtime_error naming it when it cannot.
  PromptCache(const PromptCacheOptions& opt, const BlockPool& pool, std::function<void(std::function<void()>)> post);
  ~PromptCache();  // finishes the writes already queued
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // Blocks held from eviction between restore() and the sequence's map_prefix().
  class Holds {
   public:
    explicit Holds(BlockPool& pool) : pool_(&pool) {}
    ~Holds();
    Holds(const Holds&) = delete;
    Holds& operator=(const Holds&) = delete;
    void add(int32_t b) { blocks_.push_back(b); }

   private:
    BlockPool* pool_;
    std::vector<int32_t> blocks_;
  };

  // Loads into `pool` the stored blocks that continue what the pool already
  // holds of `prompt` (whole blocks within its first `max_tokens`), published
  // and held in `holds`; returns the tokens loaded from disk.
  int restore(BlockPool& pool, std::span<const TokenId> prompt, int max_tokens, Holds& holds);
  // After a prompt is done: queues the write of its full blocks that are not
  // on disk yet (prompts of at least min_tokens). Scheduler thread.
  void store(const KvSequence& seq);

  PromptCacheStats stats() const;
  const PromptCacheOptions& options() const { return opt_; }
  // Waits until the queued writes are on disk (tests, benchmarks).
  void flush();

 private:
  struct File;   // a file's header as read or written
  struct Write;  // a queued write
  struct Loc {
    size_t file;
    int index;  // block within the file
  };

  int restore_locked(BlockPool& pool, std::span<const TokenId> prompt, int max_tokens, Holds& holds);
  void store_locked(const KvSequence& seq);
  void scan();                      // (re)reads the directory's headers; mu_ held
  bool rescan_due();                // the directory changed since the last scan; mu_ held
  bool read_header(File& f) const;  // false: damaged (or another format version)
  bool load_block(int fd, const File& f, int index, BlockPool& pool, int32_t b) const;  // rows, then checksum
  void refuse(size_t file, const char* why);  // deletes a damaged file and forgets its blocks; mu_ held
  void remove_file(size_t file);              // deletes it and forgets its blocks; mu_ held
  void hand_over(Write& w);                   // retains w's blocks or copies their rows; mu_ held
  void writer();
  std::vector<uint8_t> header_of(const Write& w, File& f) const;
  void write(Write& w);
  bool add_file(File f, bool read_it);  // mu_ held
  void evict();                         // least recently used files until under max_bytes; mu_ held

  PromptCacheOptions opt_;
  KvLayout layout_;
  uint64_t root_;
  std::function<void(std::function<void()>)> post_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::vector<File> files_;  // index: Loc::file (dead entries keep their slot until the next scan)
  std::unordered_map<uint64_t, Loc> by_name_;
  int64_t dir_mtime_ns_ = -1;
  std::deque<Write> queue_;
  bool writing_ = false, stop_ = false;
  std::unordered_set<uint64_t> pending_;  // names of the blocks queued or being written
  int64_t retained_ = 0;                  // pool blocks held by queued writes
  PromptCacheStats stats_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace moelsp
