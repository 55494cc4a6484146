// Causal multi-head attention over the KV cache (GQA: several query heads
// share one kv head). F32 throughout.
//
// Work is cut into (block of up to 16 query tokens) × (kv head) jobs: the
// block's tokens times the group's query heads (e.g. 16 × 8 = 128 rows) meet
// the kv head's keys in one scores kernel (kernels::scores: 4 rows × 4 keys
// per register tile, K read once per 4 rows) and its values in one P·V
// kernel (4 rows × 32 or 64 columns per tile), where a (token, head) at a
// time re-read K and V per row with scalar-width work. The block's last token sees pos0 + t1 keys; earlier
// rows' extra (future) scores are masked to probability 0, at most 15 keys of
// waste per row. Token blocks are visited in zigzag order (0, last, 1,
// last − 1, …) so the pool's contiguous job ranges carry equal causal work.
//
// Decode (one token block) has few such jobs: MLA's absorbed form has a
// single kv head, and every job splitting its query heads would read all of
// the cached rows again. There the keys are split into ranges instead
// (flash-decoding): each job reads its range once for all the group's heads
// and keeps an unnormalised softmax state (max m, sum l, Σ e^(s−m)·v), and the
// states are merged: out = Σ_c e^(m_c − M)·o_c / Σ_c e^(m_c − M)·l_c. A
// GQA decode step over rows that need widening goes further: its jobs are
// key ranges over all the kv heads at once (a share of them when the context
// is too short for enough ranges), so each reads whole stretches of
// consecutive cache rows rather than one head's slice of each (run_job_rows).
//
// Keys and values are read through the paged cache's block table
// (`PagedRows`): f32 rows in place, one block of consecutive rows at a time;
// the other types in chunks of positions with an online softmax over the
// chunks (run_job_widened, run_job_rows): F16 and Q8_0 rows read where they
// lie and widened in the kernels' registers, BF16 rows (or K and V of two
// types) widened into a buffer once per chunk. Q8_0 keys could meet
// int8-quantized queries in the int8 kernel, as llama.cpp's quantized cache
// does, but on the qwen3moe reference that made the logit error 0.69 instead
// of 0.064: the queries' outliers do not survive 8 bits.
//
// gpt-oss adds two things: a sliding window (query t sees keys t − window + 1
// … t; the job's key range starts there, so a windowed layer's cost does not
// grow with the context) and a per-head sink, a learned logit that joins the
// softmax's denominator only: l' = l + e^(sink − m), applied where each row is
// normalised (after merging the ranges in the split form).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "kernels/matmul.h"
#include "layers.h"

namespace moelsp::layers {
namespace {

constexpr int kBlock = 16;     // query tokens per job
constexpr int kMinSplit = 64;  // keys per range worth a job of its own
// The same for run_job_rows, whose ranges cover every kv head: a range reads
// whole consecutive cache rows (the hardware prefetcher's best case), where a
// share of the kv heads reads a 256-byte slice of each 2 KiB row and waits on
// memory row by row. So short contexts split the keys first, down to 16 keys
// a range: a qwen3moe-mid decode step's attention at 0-128 positions of
// context took 30 % less time (temporary timers: 30 → 21 µs a layer).
constexpr int kMinSplitRows = 16;

struct Job {
  int t0 = 0, t1 = 0;              // query tokens
  int g = 0, h0 = 0, heads = 0;    // (first) kv head, first query head, query heads
  int kv_heads = 1;                // kv heads g … g + kv_heads − 1 (run_job_rows)
  int64_t j_begin = 0, j_end = 0;  // keys
};

struct Scratch {
  std::vector<float> qb, s, kbuf, vbuf;
  std::vector<uint16_t> qh;       // BF16 keys: qb rounded once for the job's scores calls (kernels::round_rows_bf16)
  std::vector<PagedRows> kh, vh;  // chunks_in_place: each kv head's K and V rows
};

// The first key a job reads: a sliding window hides keys older than
// window − 1 positions before the job's first token, and they are never read.
int64_t first_key(const AttentionArgs& a, const Job& jb) {
  return a.window > 0 ? std::max<int64_t>(jb.j_begin, a.pos0 + jb.t0 + 1 - a.window) : jb.j_begin;
}

// The job's query rows, [rows][hd_k], gathered into sc.qb.
void gather_queries(const AttentionArgs& a, const Job& jb, Scratch& sc) {
  sc.qb.resize(size_t(jb.t1 - jb.t0) * size_t(jb.heads) * size_t(a.hd_k));
  for (int t = jb.t0; t < jb.t1; ++t)
    std::copy_n(a.q + t * a.ldq + int64_t(jb.h0) * a.hd_k, size_t(jb.heads) * size_t(a.hd_k),
                sc.qb.data() + size_t(t - jb.t0) * size_t(jb.heads) * size_t(a.hd_k));
}

// Of the n keys from position j0, those row r sees: [first, visible).
struct Visible {
  int64_t first, end;
};
Visible visible_keys(const AttentionArgs& a, const Job& jb, int r, int64_t j0, int64_t n) {
  const int64_t pos = a.pos0 + jb.t0 + r / jb.heads;  // the query's position: it sees keys ≤ pos
  const int64_t end = std::clamp<int64_t>(pos + 1 - j0, 0, n);
  return {a.window > 0 ? std::clamp<int64_t>(pos + 1 - a.window - j0, 0, end) : 0, end};
}

// One job's unnormalised softmax state for its rows r = (t − t0)·heads + i
// (token t, query head h0 + i): o[r][hd_v] = Σ_j e^(s_rj − m_r)·v_j and
// l[r] = Σ_j e^(s_rj − m_r) over the keys of the range that row r may see
// (m_r = −∞, l_r = 0 when it sees none of them). For f32 rows (an F32
// cache, MLA's expanded keys and values), read in place one cache block of
// consecutive rows at a time.
void run_job(const AttentionArgs& a, const Job& jb, Scratch& sc, float* o, float* m, float* l) {
  const int rows = (jb.t1 - jb.t0) * jb.heads;
  const int64_t jb0 = first_key(a, jb), je = std::min<int64_t>(jb.j_end, a.pos0 + jb.t1),
                n = std::max<int64_t>(0, je - jb0);
  const PagedRows K = a.k.at(int64_t(jb.g) * a.hd_k), V = a.v.at(int64_t(jb.g) * a.hd_v);
  gather_queries(a, jb, sc);
  // Scores [rows][n] = Q·Kᵀ, one cache block at a time.
  sc.s.resize(size_t(rows) * size_t(std::max<int64_t>(n, 1)));
  for (int64_t j0 = jb0; j0 < je;) {
    const int64_t j1 = std::min(je, (j0 / K.block_size + 1) * int64_t(K.block_size));
    // scores s[row][j] = q_row · key_j for the block's keys
    kernels::scores({.q = sc.qb.data(),
                     .ldq = a.hd_k,
                     .m = rows,
                     .k = K.row(j0),
                     .k_type = K.type,
                     .k_stride = K.row_bytes,
                     .n = j1 - j0,
                     .hd = a.hd_k,
                     .s = sc.s.data() + (j0 - jb0),
                     .lds = n});
    j0 = j1;
  }
  // e^(s − m) over each row's visible keys; later keys get 0.
  for (int r = 0; r < rows; ++r) {
    float* p = sc.s.data() + size_t(r) * size_t(n);
    const auto [first, visible] = visible_keys(a, jb, r, jb0, n);
    const float mx = kernels::scale_max(p + first, visible - first, a.scale, -INFINITY);
    const float sum = kernels::exp_shift_sum(p + first, visible - first, mx);  // 0 when it sees no key
    std::fill(p, p + first, 0.0f);
    std::fill(p + visible, p + n, 0.0f);
    m[r] = mx, l[r] = sum;
  }
  // o [rows][hd_v] = P·V, summed block by block.
  if (n == 0) std::fill(o, o + size_t(rows) * size_t(a.hd_v), 0.0f);
  for (int64_t j0 = jb0; j0 < je;) {
    const int64_t j1 = std::min(je, (j0 / V.block_size + 1) * int64_t(V.block_size));
    // o [rows][hd_v] (+)= p [rows][block's keys] · v [block's keys][hd_v]
    kernels::weighted_rows({.p = sc.s.data() + (j0 - jb0),
                            .ldp = n,
                            .m = rows,
                            .v = reinterpret_cast<const float*>(V.row(j0)),
                            .ldv = int64_t(V.row_bytes / sizeof(float)),
                            .n_v = j1 - j0,
                            .n = a.hd_v,
                            .y = o,
                            .ldy = a.hd_v,
                            .accumulate = j0 > jb0});
    j0 = j1;
  }
}

// run_job for caches whose rows are not f32. F16 and Q8_0 rows (below
// AVX-512: F16 only) are read where they lie (chunks_in_place, below); the
// others (BF16, or K and V of two types) have their keys widened to f32 once
// per chunk of up to kChunk positions (gathered across blocks), and when the
// values are the keys' own leading elements (MLA's absorbed form: attention
// over the latents) the widened chunk serves as the values too.
// The softmax is online: per chunk each row's max moves up, rescaling its
// sum and output so far by e^(m_old − m_new). The same state as run_job.
constexpr int kChunk = 64;

// Asks for the cache lines of rows [j0, j0 + n) of `r` (`bytes` each) ahead
// of their widening. A head's rows are a row of the cache apart (K and V of
// every kv head), so the hardware prefetchers see a short strided walk and
// each row waited for memory in turn: issuing a chunk's K and V lines at once
// took the widening of a qwen3moe-mid decode step's attention from 4.9 to
// 3.3 µs per job (64 keys).
void prefetch_rows(const PagedRows& r, int64_t j0, int64_t n, size_t bytes) {
  for (int64_t j = j0; j < j0 + n; ++j) {
    const char* p = reinterpret_cast<const char*>(r.row(j));
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
  }
}

// The rows of the next chunk, requested while the current chunk is computed:
// in address order (each position's K span, then its V span; adjacent in the
// cache's rows, so a block's rows are one run of consecutive lines), a share
// to each kernel call, which spreads its share over its tiles
// (kernels::LinesAhead). A decode step at depth streams its KV from memory,
// and what limits it is how many lines are in flight while the FMAs run:
//  - a kv head's share of the K lines, then of the V lines (the old order),
//    walks each 2 KiB row twice with 1 KiB gaps; a plain read in that order
//    ran at 21-37 GB/s where a sequential one ran at 35-58 (two threads, 320
//    MiB, this VM), and 45-58 in address order;
//  - a call's share requested at its start (64 lines at once) stalls the
//    core until miss buffers free up, so compute and memory add up; spread
//    over the tiles they overlap. Fastest of 8 alternating rounds at depth
//    8192, 20 layers (moelsp_bench_attention): F16 703 µs a layer spread,
//    935 at each call's start; Q8_0 600 against 710. Blocks that lie next to
//    each other joined into one call (fewer, larger shares) measured 755.
struct Ahead {
  const PagedRows *k = nullptr, *v = nullptr;
  size_t k_bytes = 0, v_bytes = 0;  // per position (v_bytes 0: the values are K's rows)
  // The lines still to request, as runs of consecutive addresses: a
  // position's K span and V span, and a block's consecutive positions, join
  // into one run (in the common case a chunk is one run per block it spans).
  struct Run {
    uintptr_t p, end;
  };
  Run runs[8] = {};
  int n_runs = 0, at = 0;
  size_t per_step = 0;     // lines a share holds at most
  int64_t j = 0, end = 0;  // positions not yet turned into runs

  void add(const uint8_t* p0, size_t bytes) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(p0) & ~uintptr_t(63),
                    e = (reinterpret_cast<uintptr_t>(p0) + bytes + 63) & ~uintptr_t(63);
    if (n_runs > at && runs[n_runs - 1].end >= p && runs[n_runs - 1].p <= p)
      runs[n_runs - 1].end = std::max(runs[n_runs - 1].end, e);
    else runs[n_runs++] = {p, e};
  }
  // Positions [j0, j1), in `steps` shares (what is left of the last
  // positions is requested first).
  void start(int64_t j0, int64_t j1, int steps) {
    flush();
    n_runs = at = 0, j = j0, end = j1;
    const size_t lines = size_t(std::max<int64_t>(0, j1 - j0)) * ((k_bytes + v_bytes) / 64 + 2);
    per_step = (lines + size_t(std::max(steps, 1)) - 1) / size_t(std::max(steps, 1));
  }
  // The next share for a kernel call to request (kernels::LinesAhead): up
  // to per_step lines, from one run.
  kernels::LinesAhead take() {
    if (at == n_runs) {  // the next positions' runs
      if (j >= end) return {};
      n_runs = at = 0;
      for (; j < end && n_runs < 6; ++j) {
        add(k->row(j), k_bytes);
        if (v_bytes) add(v->row(j), v_bytes);
      }
    }
    Run& r = runs[at];
    const int64_t lines = std::min<int64_t>(int64_t(per_step), int64_t(r.end - r.p) / 64);
    const kernels::LinesAhead out{reinterpret_cast<const uint8_t*>(r.p), lines};
    if ((r.p += uintptr_t(lines) * 64) >= r.end) ++at;
    return out;
  }
  // Requests what is left now.
  void flush() {
    per_step = ~size_t(0) >> 1;
    for (kernels::LinesAhead x = take(); x.lines > 0; x = take()) kernels::prefetch_lines(x);
  }
};

// One chunk of the online softmax: scores s [rows][nc] for keys c0 … c0 +
// nc − 1 become e^(s − m) over the keys each row sees (0 elsewhere); each
// row's max m moves up, rescaling its sum l and output o so far by
// e^(m_old − m_new).
void online_softmax(const AttentionArgs& a, const Job& jb, int rows, int64_t c0, int64_t nc, float* s, float* o,
                    float* m, float* l) {
  for (int r = 0; r < rows; ++r) {
    float* p = s + size_t(r) * size_t(nc);
    const auto [first, visible] = visible_keys(a, jb, r, c0, nc);
    const float mx = kernels::scale_max(p + first, visible - first, a.scale, m[r]);
    if (mx == -INFINITY) {  // sees none of this chunk's keys yet
      std::fill(p, p + nc, 0.0f);
      continue;
    }
    if (mx > m[r] && m[r] != -INFINITY) {  // rescale what the earlier chunks summed
      const float f = std::exp(m[r] - mx);
      l[r] *= f;
      float* orow = o + size_t(r) * size_t(a.hd_v);
      for (int c = 0; c < a.hd_v; ++c) orow[c] *= f;
    }
    m[r] = mx;
    const float sum = kernels::exp_shift_sum(p + first, visible - first, mx);
    std::fill(p, p + first, 0.0f);
    std::fill(p + visible, p + nc, 0.0f);
    l[r] += sum;
  }
}

// F16 and Q8_0 cache rows read where they lie: the scores and P·V widen each
// row in registers (kernels::scores on the rows, weighted_rows' v_f16 / v_q8;
// a Q8_0 value widens to d·q, exact in f32). The sums are those of the
// widening paths below, in the same order, so the results are the same bits.
// For a decode step at depth over a Q8_0 cache this halves the bytes read
// without the buffer pass the widening paths cost. Rows are contiguous
// within a block of the paged cache, so a chunk goes block by block:
// fn(s0, s1) for each block's rows.
template <class Fn>
void by_block(const PagedRows& r, int64_t c0, int64_t nc, const Fn& fn) {
  for (int64_t s0 = c0; s0 < c0 + nc;) {
    const int64_t s1 = std::min<int64_t>(c0 + nc, (s0 / r.block_size + 1) * r.block_size);
    fn(s0, s1);
    s0 = s1;
  }
}

// Bytes from a row's start to its element e (e starts a block of the type).
// Head sizes on whole blocks of the type are checked before any job runs
// (check_heads), so every head's offset is on a block's start.
size_t offset_of(const PagedRows& r, int64_t e) { return kernels::row_bytes(r.type, uint64_t(e)).value_or(0); }

// Rows read where they lie: F16 (the cache's default), Q8_0 and BF16 keys
// and values. Below AVX-512 the scores kernel widens Q8_0 rows into a buffer
// anyway (kernels::scores), and P·V would again: those go to the widening
// path, which widens MLA's shared rows once for both. BF16 rows are read in
// place where vdpbf16ps takes them as they are (Isa::Avx512Bf16), with q and
// the probabilities rounded to bf16 as they meet them.
bool in_place(kernels::DType t) {
  const kernels::Isa isa = kernels::isa_level();
  return t == kernels::DType::F16 || (t == kernels::DType::Q8_0 && isa >= kernels::Isa::Avx512Vnni) ||
         (t == kernels::DType::BF16 && isa >= kernels::Isa::Avx512Bf16);
}

// s [m][nc] = q [m][hd] · key_j for j in [c0, c0 + nc): the first hd elements of K's rows (K.at: a kv head's).
void scores_in_place(const PagedRows& K, int hd, int64_t c0, int64_t nc, const float* q, const uint16_t* q_bf16,
                     int64_t m, float* s, Ahead& ahead) {
  by_block(K, c0, nc, [&](int64_t s0, int64_t s1) {
    kernels::scores({.q = q,
                     .ldq = hd,
                     .m = m,
                     .k = K.row(s0),
                     .k_type = K.type,
                     .k_stride = K.row_bytes,
                     .n = s1 - s0,
                     .hd = hd,
                     .s = s + (s0 - c0),
                     .lds = nc,
                     .ahead = ahead.take(),
                     .q_bf16 = q_bf16});
  });
}

// o [m][hd_v] += p [m][nc] · v_j for j in [c0, c0 + nc): the first hd_v elements of V's rows.
void pv_in_place(const PagedRows& V, int hd_v, int64_t c0, int64_t nc, const float* p, int64_t m, float* o,
                 Ahead& ahead) {
  const bool q8 = V.type == kernels::DType::Q8_0, bf16 = V.type == kernels::DType::BF16;
  by_block(V, c0, nc, [&](int64_t s0, int64_t s1) {
    const uint8_t* row = V.row(s0);
    const auto* halves = reinterpret_cast<const uint16_t*>(row);
    kernels::weighted_rows({.p = p + (s0 - c0),
                            .ldp = nc,
                            .m = m,
                            .ldv = int64_t(V.row_bytes / 2),
                            .n_v = s1 - s0,
                            .n = hd_v,
                            .y = o,
                            .ldy = hd_v,
                            .accumulate = true,
                            .v_f16 = q8 || bf16 ? nullptr : halves,
                            .v_q8 = q8 ? row : nullptr,
                            .v_q8_stride = V.row_bytes,
                            .ahead = ahead.take(),
                            .v_bf16 = bf16 ? halves : nullptr});
  });
}

// Keys [j_lo, je) of F16 or Q8_0 rows in chunks of `chunk`, each chunk's
// scores, softmax and P·V: kv_heads kv heads side by side in each row, `group`
// query rows (of sc.qb, o) for each. The next chunk's rows are requested
// while this one is computed (Ahead: in address order, spread over the
// chunk's kernel calls, a block of one kv head's rows a call); the first
// chunk's are requested at once.
void chunks_in_place(const AttentionArgs& a, const Job& jb, Scratch& sc, const PagedRows& K, const PagedRows& V,
                     int64_t j_lo, int64_t je, int kv_heads, int group, int64_t chunk, size_t v_bytes, float* o,
                     float* m, float* l) {
  const int rows = kv_heads * group;
  sc.kh.clear(), sc.vh.clear();
  for (int gi = 0; gi < kv_heads; ++gi)
    sc.kh.push_back(K.at(int64_t(gi) * a.hd_k)), sc.vh.push_back(V.at(int64_t(gi) * a.hd_v));
  const uint16_t* qh = nullptr;  // BF16 keys: the queries rounded once, not in each call
  const int64_t qh_ld = kernels::bf16_row_stride(a.hd_k);
  if (K.type == kernels::DType::BF16) {
    sc.qh.resize(size_t(rows) * size_t(qh_ld));
    kernels::round_rows_bf16(sc.qb.data(), rows, a.hd_k, a.hd_k, sc.qh.data());
    qh = sc.qh.data();
  }
  Ahead ahead{.k = &K, .v = &V, .k_bytes = offset_of(K, int64_t(kv_heads) * a.hd_k), .v_bytes = v_bytes};
  ahead.start(j_lo, std::min(je, j_lo + chunk), 1);
  ahead.flush();
  for (int64_t c0 = j_lo; c0 < je; c0 += chunk) {
    const int64_t nc = std::min<int64_t>(chunk, je - c0);
    int runs = 0;  // kernel calls per kv head and pass
    by_block(K, c0, nc, [&](int64_t, int64_t) { ++runs; });
    ahead.start(c0 + nc, std::min(je, c0 + nc + chunk), 2 * kv_heads * runs);
    for (int gi = 0; gi < kv_heads; ++gi)  // s [group rows of kv head g + gi][nc] = q_row · key_j
      scores_in_place(sc.kh[size_t(gi)], a.hd_k, c0, nc, sc.qb.data() + size_t(gi) * size_t(group) * size_t(a.hd_k),
                      qh ? qh + size_t(gi) * size_t(group) * size_t(qh_ld) : nullptr, group,
                      sc.s.data() + size_t(gi) * size_t(group) * size_t(nc), ahead);
    online_softmax(a, jb, rows, c0, nc, sc.s.data(), o, m, l);
    for (int gi = 0; gi < kv_heads; ++gi)  // o [group rows][hd_v] += p [group rows][nc] · v [nc][hd_v]
      pv_in_place(sc.vh[size_t(gi)], a.hd_v, c0, nc, sc.s.data() + size_t(gi) * size_t(group) * size_t(nc), group,
                  o + size_t(gi) * size_t(group) * size_t(a.hd_v), ahead);
  }
}

void run_job_widened(const AttentionArgs& a, const Job& jb, Scratch& sc, float* o, float* m, float* l) {
  const int rows = (jb.t1 - jb.t0) * jb.heads;
  const int64_t j_lo = first_key(a, jb), je = std::min<int64_t>(jb.j_end, a.pos0 + jb.t1);
  const PagedRows K = a.k.at(int64_t(jb.g) * a.hd_k), V = a.v.at(int64_t(jb.g) * a.hd_v);
  const bool shared =
      V.base == K.base && V.blocks == K.blocks && V.row_bytes == K.row_bytes && V.type == K.type && a.hd_v <= a.hd_k;
  const size_t k_bytes = kernels::row_bytes(K.type, uint64_t(a.hd_k)).value_or(0),
               v_bytes = kernels::row_bytes(V.type, uint64_t(a.hd_v)).value_or(0);
  gather_queries(a, jb, sc);
  std::fill(o, o + size_t(rows) * size_t(a.hd_v), 0.0f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  sc.s.resize(size_t(rows) * size_t(kChunk));
  if (in_place(K.type) && V.type == K.type)  // MLA's latent rows, or one kv head's
    return chunks_in_place(a, jb, sc, K, V, j_lo, je, 1, rows, kChunk, shared ? 0 : v_bytes, o, m, l);
  sc.kbuf.resize(size_t(kChunk) * size_t(a.hd_k));
  if (!shared) sc.vbuf.resize(size_t(kChunk) * size_t(a.hd_v));
  for (int64_t c0 = j_lo; c0 < je; c0 += kChunk) {
    const int64_t nc = std::min<int64_t>(kChunk, je - c0);
    prefetch_rows(K, c0, nc, k_bytes);
    if (!shared) prefetch_rows(V, c0, nc, v_bytes);
    for (int64_t j = 0; j < nc; ++j)
      kernels::dequantize_row(K.type, K.row(c0 + j), sc.kbuf.data() + size_t(j) * size_t(a.hd_k), a.hd_k);
    // s [rows][nc] = q_row · key_j
    kernels::scores({.q = sc.qb.data(),
                     .ldq = a.hd_k,
                     .m = rows,
                     .k = sc.kbuf.data(),
                     .k_type = kernels::DType::F32,
                     .k_stride = size_t(a.hd_k) * sizeof(float),
                     .n = nc,
                     .hd = a.hd_k,
                     .s = sc.s.data(),
                     .lds = nc});
    online_softmax(a, jb, rows, c0, nc, sc.s.data(), o, m, l);
    const float* vp = sc.kbuf.data();
    int64_t ldv = a.hd_k;
    if (!shared) {
      for (int64_t j = 0; j < nc; ++j)
        kernels::dequantize_row(V.type, V.row(c0 + j), sc.vbuf.data() + size_t(j) * size_t(a.hd_v), a.hd_v);
      vp = sc.vbuf.data(), ldv = a.hd_v;
    }
    // o [rows][hd_v] += p [rows][nc] · v [nc][hd_v]
    kernels::weighted_rows({.p = sc.s.data(),
                            .ldp = nc,
                            .m = rows,
                            .v = vp,
                            .ldv = ldv,
                            .n_v = nc,
                            .n = a.hd_v,
                            .y = o,
                            .ldy = a.hd_v,
                            .accumulate = true});
  }
}

// run_job_widened for one query token over the keys of several kv heads at
// once (decode). Each position's K (then V) elements of heads g … g +
// kv_heads − 1 sit side by side in its cache row, so a chunk is read as
// stretches of consecutive rows and widened once for all those heads, with
// the rows kAhead positions on requested while the current ones widen. A job
// per kv head read 256 bytes 2 KiB apart per position instead, and waited on
// memory for each: on qwen3moe-mid (4 kv heads, F16 rows) widening took ~490
// TSC cycles per position (all heads) that way, 290 now, and tg512 went from
// 108-116 to 135-139 tokens/s. Rows r of the job: query heads h0 + r, of kv
// head g + r / group.
constexpr int kRowChunk = 32;  // positions per chunk (BF16: K and V widened, 2 × 64 KiB at 4 × 128 elements)
constexpr int kAhead = 8;      // positions requested ahead (4 and 16 measured the same)

void run_job_rows(const AttentionArgs& a, const Job& jb, Scratch& sc, float* o, float* m, float* l) {
  const int rows = jb.heads, group = jb.heads / jb.kv_heads;
  const int64_t j_lo = first_key(a, jb), je = std::min<int64_t>(jb.j_end, a.pos0 + jb.t1);
  const PagedRows K = a.k.at(int64_t(jb.g) * a.hd_k), V = a.v.at(int64_t(jb.g) * a.hd_v);
  const int64_t kw = int64_t(jb.kv_heads) * a.hd_k, vw = int64_t(jb.kv_heads) * a.hd_v;  // elements per row
  const size_t k_bytes = kernels::row_bytes(K.type, uint64_t(kw)).value_or(0),
               v_bytes = kernels::row_bytes(V.type, uint64_t(vw)).value_or(0);
  gather_queries(a, jb, sc);  // [rows][hd_k]
  std::fill(o, o + size_t(rows) * size_t(a.hd_v), 0.0f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  sc.s.resize(size_t(rows) * size_t(kRowChunk));
  // F16 and Q8_0 rows are read where they lie (scores_in_place,
  // pv_in_place); other types are widened, every chunk of rows into kbuf / vbuf
  // (32 rows × 4 kv heads × 128, 2 × 64 KiB), and read back.
  if (in_place(K.type) && V.type == K.type)
    return chunks_in_place(a, jb, sc, K, V, j_lo, je, jb.kv_heads, group, kRowChunk, v_bytes, o, m, l);
  prefetch_rows(K, j_lo, std::min<int64_t>(kAhead, je - j_lo), k_bytes);
  prefetch_rows(V, j_lo, std::min<int64_t>(kAhead, je - j_lo), v_bytes);
  sc.kbuf.resize(size_t(kRowChunk) * size_t(kw));
  sc.vbuf.resize(size_t(kRowChunk) * size_t(vw));
  for (int64_t c0 = j_lo; c0 < je; c0 += kRowChunk) {
    const int64_t nc = std::min<int64_t>(kRowChunk, je - c0);
    // kbuf [nc][kv_heads·hd_k], vbuf [nc][kv_heads·hd_v]
    for (int64_t j = 0; j < nc; ++j) {
      if (c0 + j + kAhead < je) {
        prefetch_rows(K, c0 + j + kAhead, 1, k_bytes);
        prefetch_rows(V, c0 + j + kAhead, 1, v_bytes);
      }
      kernels::dequantize_row(K.type, K.row(c0 + j), sc.kbuf.data() + size_t(j) * size_t(kw), kw);
      kernels::dequantize_row(V.type, V.row(c0 + j), sc.vbuf.data() + size_t(j) * size_t(vw), vw);
    }
    for (int gi = 0; gi < jb.kv_heads; ++gi)  // s [group rows of kv head g + gi][nc] = q_row · key_j
      kernels::scores({.q = sc.qb.data() + size_t(gi) * size_t(group) * size_t(a.hd_k),
                       .ldq = a.hd_k,
                       .m = group,
                       .k = sc.kbuf.data() + size_t(gi) * size_t(a.hd_k),
                       .k_type = kernels::DType::F32,
                       .k_stride = size_t(kw) * sizeof(float),
                       .n = nc,
                       .hd = a.hd_k,
                       .s = sc.s.data() + size_t(gi) * size_t(group) * size_t(nc),
                       .lds = nc});
    online_softmax(a, jb, rows, c0, nc, sc.s.data(), o, m, l);
    for (int gi = 0; gi < jb.kv_heads; ++gi)  // o [group rows][hd_v] += p [group rows][nc] · v [nc][hd_v]
      kernels::weighted_rows({.p = sc.s.data() + size_t(gi) * size_t(group) * size_t(nc),
                              .ldp = nc,
                              .m = group,
                              .v = sc.vbuf.data() + size_t(gi) * size_t(a.hd_v),
                              .ldv = vw,
                              .n_v = nc,
                              .n = a.hd_v,
                              .y = o + size_t(gi) * size_t(group) * size_t(a.hd_v),
                              .ldy = a.hd_v,
                              .accumulate = true});
  }
}

// Row r of a job's output into place: token t0 + r / heads, head h0 + r % heads.
float* out_row(const AttentionArgs& a, const Job& jb, int r) {
  return a.out + (jb.t0 + r / jb.heads) * a.ldo + int64_t(jb.h0 + r % jb.heads) * a.hd_v;
}

}  // namespace

namespace {

// How one sequence's attention is cut into jobs (see the header comment).
struct Plan {
  const AttentionArgs* a = nullptr;
  int group = 1, n_tb = 1, kv_split = 1, split = 1, heads = 1, kv_heads = 1;
  int64_t n_kv = 0, chunk = 0, n_jobs = 0;
  int64_t key0 = 0;     // where the key ranges start: the sliding window's first key (run_job_rows), else 0
  size_t max_rows = 0;  // rows of the largest job
  bool widen = false;
  bool rows = false;  // run_job_rows: one query token over widened rows
  int64_t job0 = 0;   // its first job in the batch's numbering
  size_t state0 = 0;  // its split-key states' first row (kv_split > 1)

  Job job(int64_t job) const {
    const int64_t per_tb = int64_t(a->n_head_kv / kv_heads) * split * kv_split;
    const int64_t k = job / per_tb;
    const int64_t rest = job % per_tb;
    Job jb;
    jb.g = int(rest / (int64_t(split) * kv_split)) * kv_heads;
    const int hs = int(rest / kv_split % split), ks = int(rest % kv_split);
    jb.kv_heads = kv_heads;
    jb.heads = heads, jb.h0 = jb.g * group + hs * heads;
    const int tb = int(k % 2 == 0 ? k / 2 : n_tb - 1 - k / 2);
    jb.t0 = tb * kBlock, jb.t1 = std::min(a->n_tokens, jb.t0 + kBlock);
    jb.j_begin = kv_split == 1 ? 0 : std::min<int64_t>(n_kv, key0 + ks * chunk);
    jb.j_end = kv_split == 1 ? n_kv : std::min<int64_t>(n_kv, key0 + (ks + 1) * chunk);
    return jb;
  }
};

// A sequence's plan depends on its own shape and the thread count only, never
// on the other sequences of a batch: its results are the same bits alone or
// batched.
Plan plan_of(const AttentionArgs& a, int threads) {
  Plan p;
  p.a = &a;
  p.group = a.n_head / a.n_head_kv;
  p.n_tb = (a.n_tokens + kBlock - 1) / kBlock;
  const int64_t want = 2 * int64_t(threads);  // jobs that keep every thread busy
  // Few jobs: split the keys into ranges (one token block only; each range
  // read once), then, if still short, the group's query heads.
  p.n_kv = a.pos0 + a.n_tokens;
  p.widen = a.k.type != kernels::DType::F32 || a.v.type != kernels::DType::F32;
  // Decode over rows that need widening, with several kv heads: jobs are key
  // ranges first, each over all the kv heads (run_job_rows), then, while
  // still short of jobs (a short context), over a share of the kv heads.
  p.rows = p.widen && a.n_tokens == 1 && a.n_head_kv > 1;
  if (p.rows) {
    // A sliding window's token sees only its last `window` keys: the ranges
    // cover those, so every job has a share of them.
    p.key0 = a.window > 0 ? std::max<int64_t>(0, p.n_kv - a.window) : 0;
    p.kv_split = int(std::clamp<int64_t>(want, 1, std::max<int64_t>(1, (p.n_kv - p.key0) / kMinSplitRows)));
    int parts = 1;  // kv-head shares
    while (parts < a.n_head_kv && int64_t(p.kv_split) * parts < want) {
      ++parts;
      while (a.n_head_kv % parts) ++parts;
    }
    p.kv_heads = a.n_head_kv / parts;
  } else if (p.n_tb == 1 && int64_t(a.n_head_kv) < want) {
    p.kv_split = int(std::clamp<int64_t>(want / a.n_head_kv, 1, std::max<int64_t>(1, p.n_kv / kMinSplit)));
  }
  while (!p.rows && p.split < p.group && int64_t(p.n_tb) * a.n_head_kv * p.kv_split * p.split < want) {
    ++p.split;
    while (p.group % p.split) ++p.split;
  }
  p.heads = p.group / p.split * p.kv_heads;  // query heads per job
  p.chunk = (p.n_kv - p.key0 + p.kv_split - 1) / p.kv_split / kBlock * kBlock + kBlock;
  p.n_jobs = int64_t(p.n_tb) * (a.n_head_kv / p.kv_heads) * p.split * p.kv_split;
  p.max_rows = size_t(std::min(kBlock, a.n_tokens)) * size_t(p.heads);
  return p;
}

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a) { attention(pool, std::span<const AttentionArgs>(&a, 1)); }

namespace {
// A head of K or V that does not fill whole blocks of its row type (Q8_0: 32
// elements) cannot be addressed; the cache's layout rules it out, and this
// says so rather than reading another head's bytes.
void check_heads(const AttentionArgs& a) {
  if (!kernels::row_bytes(a.k.type, uint64_t(a.hd_k)) || !kernels::row_bytes(a.v.type, uint64_t(a.hd_v)))
    throw std::invalid_argument(
        fmt::format("attention: head sizes {} / {} are not whole blocks of the cache's rows", a.hd_k, a.hd_v));
}
}  // namespace

namespace {

// A whole job's rows into place: o / (l + the sink's share).
void write_rows(const AttentionArgs& a, const Job& jb, const std::vector<float>& o, const std::vector<float>& m,
                const std::vector<float>& l) {
  const int rows = (jb.t1 - jb.t0) * jb.heads;
  for (int r = 0; r < rows; ++r) {
    const float sink = a.sinks ? std::exp(a.sinks[jb.h0 + r % jb.heads] - m[size_t(r)]) : 0.0f;
    const float inv = 1.0f / (l[size_t(r)] + sink), *src = o.data() + size_t(r) * size_t(a.hd_v);
    float* dst = out_row(a, jb, r);
    for (int c = 0; c < a.hd_v; ++c) dst[c] = src[c] * inv;
  }
}

// Split keys: each row's key ranges (kv_split jobs, each with its softmax
// state o, m, l) merged into the output row, the sinks counted once.
void merge_ranges(const Plan& p, const std::vector<float>& so, const std::vector<float>& sm,
                  const std::vector<float>& sl) {
  const AttentionArgs& a = *p.a;
  for (int64_t first = 0; first < p.n_jobs; first += p.kv_split) {  // a (tb, g, hs)'s kv_split jobs are adjacent
    const Job jb = p.job(first);
    const int rows = (jb.t1 - jb.t0) * jb.heads;
    for (int r = 0; r < rows; ++r) {
      const auto state = [&](int ks) { return p.state0 + size_t(first + ks) * p.max_rows + size_t(r); };
      float mx = -INFINITY;
      for (int ks = 0; ks < p.kv_split; ++ks) mx = std::max(mx, sm[state(ks)]);
      float* dst = out_row(a, jb, r);
      std::fill(dst, dst + a.hd_v, 0.0f);
      double sum = 0;
      for (int ks = 0; ks < p.kv_split; ++ks) {
        const size_t at = state(ks);
        if (sl[at] == 0) continue;
        const float w = std::exp(sm[at] - mx);
        sum += double(w) * sl[at];
        const float* src = so.data() + at * size_t(a.hd_v);
        for (int c = 0; c < a.hd_v; ++c) dst[c] += w * src[c];
      }
      if (a.sinks) sum += std::exp(double(a.sinks[jb.h0 + r % jb.heads]) - mx);
      const float inv = float(1.0 / sum);
      for (int c = 0; c < a.hd_v; ++c) dst[c] *= inv;
    }
  }
}

}  // namespace

void attention(ThreadPool& pool, std::span<const AttentionArgs> batch) {
  // Kept, with the states below: a decode step comes here once per layer.
  // (Named through references: the loop's lambda runs on other threads too,
  // where the thread_local names would mean those threads' own copies.)
  thread_local std::vector<Plan> plans_kept;
  std::vector<Plan>& plans = plans_kept;
  plans.clear();
  int64_t n_jobs = 0;
  size_t states = 0, max_rows = 0;
  int max_hd = 0;
  for (const AttentionArgs& a : batch) {
    check_heads(a);
    Plan p = plan_of(a, pool.size());
    p.job0 = n_jobs;
    n_jobs += p.n_jobs;
    if (p.kv_split > 1) {
      p.state0 = states;
      states += size_t(p.n_jobs) * p.max_rows;
    }
    max_rows = std::max(max_rows, p.max_rows);
    max_hd = std::max(max_hd, a.hd_v);
    plans.push_back(p);
  }
  // Split keys: every job keeps its softmax state ([rows] of o, m, l), and
  // the ranges of each row merge after the loop.
  thread_local std::vector<float> so_kept, sm_kept, sl_kept;  // every state is written by its job before the merge
  std::vector<float>&so = so_kept, &sm = sm_kept, &sl = sl_kept;
  so.resize(states * size_t(max_hd));
  sm.resize(states);
  sl.resize(states);
  // One loop over every sequence's jobs (a batch of decode steps was one loop
  // per sequence, each too short to keep both threads busy); sequences differ
  // in context length, so with several the jobs are claimed in smaller chunks,
  // as they are when there are few (a decode step's 4 on 2 threads: one job a
  // claim, so a thread that started late does not hold back the other's half).
  pool.parallel_for(
      n_jobs,
      [&](int64_t b, int64_t e) {
        thread_local Scratch sc;  // kept: a decode step comes here once per layer
        thread_local std::vector<float> o, m, l;
        o.resize(max_rows * size_t(max_hd));
        m.resize(max_rows);
        l.resize(max_rows);
        size_t pi = 0;
        for (int64_t job = b; job < e; ++job) {
          while (job >= plans[pi].job0 + plans[pi].n_jobs) ++pi;
          const Plan& p = plans[pi];
          const AttentionArgs& a = *p.a;
          const Job jb = p.job(job - p.job0);
          const auto run = p.rows ? run_job_rows : p.widen ? run_job_widened : run_job;
          if (p.kv_split > 1) {
            const size_t at = p.state0 + size_t(job - p.job0) * p.max_rows;
            run(a, jb, sc, so.data() + at * size_t(a.hd_v), sm.data() + at, sl.data() + at);
            continue;
          }
          run(a, jb, sc, o.data(), m.data(), l.data());
          write_rows(a, jb, o, m, l);
        }
      },
      batch.size() > 1 || n_jobs <= 4 * pool.size() ? 4 : 1);
  for (const Plan& p : plans)
    if (p.kv_split > 1) merge_ranges(p, so, sm, sl);
}

}  // namespace moelsp::layers
