// Feed-forward blocks: SwiGLU and the Mixture-of-Experts layer.
//
// MoE dispatch groups the batch's tokens by expert so each active expert's
// weights are streamed once per batch (one matmul over all its tokens), which
// is what makes prefill cheaper per token than decode; the work is balanced
// across threads longest-first (see moe()).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <span>

#include "../model/experts.h"
#include "kernels/hd_activations.h"
#include "kernels/hd_route.h"
#include "layers.h"

namespace moelsp::layers {

namespace hd = kernels::hd;

void swiglu(ThreadPool& pool, const kernels::MatView& gate, const kernels::MatView& up, const kernels::MatView& down,
            const float* x, int64_t m, float* out) {
  const int64_t n_ff = gate.rows;
  FloatBuf g(static_cast<size_t>(m * n_ff)), u(static_cast<size_t>(m * n_ff));
  linear(pool, gate, x, m, g.data());
  linear(pool, up, x, m, u.data());
  kernels::silu_mul(g.data(), u.data(), g.data(), int64_t(g.size()));
  linear(pool, down, g.data(), m, out);
}

MoeWeights load_moe(const WeightLoader& wl, const ModelConfig& c, int il) {
  const std::string b = "blk." + std::to_string(il) + ".";
  MoeWeights w;
  w.router = wl.get(b + "ffn_gate_inp.weight", {c.n_embd, c.n_expert});
  w.router_bias = wl.maybe_vec(b + "ffn_gate_inp.bias", c.n_expert);
  w.selection_bias = wl.maybe_vec(b + "exp_probs_b.bias", c.n_expert);
  // Per-expert biases {rows, n_expert}, as one f32 array [n_expert][rows].
  const auto expert_bias = [&](const std::string& name, int64_t rows) {
    const Weight t = wl.maybe(name, {rows, c.n_expert});
    std::vector<float> v(t.present() ? size_t(rows) * size_t(c.n_expert) : 0);
    for (int64_t e = 0; e < (t.present() ? c.n_expert : 0); ++e)
      kernels::dequantize_row(t.m.type, t.m.row(e), v.data() + e * rows, rows);
    return v;
  };
  w.gate_b = expert_bias(b + "ffn_gate_exps.bias", c.n_ff_exp);
  w.up_b = expert_bias(b + "ffn_up_exps.bias", c.n_ff_exp);
  w.down_b = expert_bias(b + "ffn_down_exps.bias", c.n_embd);
  w.gate = wl.get(b + "ffn_gate_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert});
  w.up = wl.get(b + "ffn_up_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert});
  w.down = wl.get(b + "ffn_down_exps.weight", {c.n_ff_exp, c.n_embd, c.n_expert});
  if (c.n_expert_shared > 0) {
    const int64_t sh = int64_t(c.n_ff_exp) * c.n_expert_shared;
    w.shared_gate = wl.get(b + "ffn_gate_shexp.weight", {c.n_embd, sh});
    w.shared_up = wl.get(b + "ffn_up_shexp.weight", {c.n_embd, sh});
    w.shared_down = wl.get(b + "ffn_down_shexp.weight", {sh, c.n_embd});
    for (Weight* x : {&w.shared_gate, &w.shared_up, &w.shared_down}) repack_dense(*x);
  }
  return w;
}

hd::RouteParams route_params(const ModelConfig& cfg) {
  hd::RouteParams r;
  r.n_expert = cfg.n_expert;
  r.k = cfg.n_expert_used;
  r.gating = cfg.gating == Gating::Softmax   ? hd::RouteGating::Softmax
             : cfg.gating == Gating::Sigmoid ? hd::RouteGating::Sigmoid
                                             : hd::RouteGating::SoftmaxChosen;
  r.n_group = cfg.n_group;
  r.n_group_used = cfg.n_group_used;
  r.norm = cfg.expert_weights_norm;
  r.scale = cfg.expert_weights_scale;
  return r;
}

void expert_activation(bool oai, const float* g, const float* u, const float* gb, const float* ub, float* h,
                       int64_t n) {
  if (!gb && !ub && !oai) return kernels::silu_mul(g, u, h, n);  // the common case, vectorized
  for (int64_t r = 0; r < n; ++r) {
    const float gv = g[r] + (gb ? gb[r] : 0.0f), uv = u[r] + (ub ? ub[r] : 0.0f);
    h[r] = oai ? kernels::hd::swiglu_oai(gv, uv) : kernels::hd::swiglu(gv, uv);
  }
}

void route(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t m, int* chosen,
           float* weight) {
  const int n_exp = cfg.n_expert, k = cfg.n_expert_used;
  // Router: [m][n_exp] logits → probabilities. Scratch kept per thread (every
  // layer of every decode step comes here; allocations were ~1 % of decode).
  thread_local std::vector<float> probs, sel;
  probs.resize(static_cast<size_t>(m * n_exp));
  linear(pool, w.router.m, x, m, probs.data());
  if (!w.router_bias.empty()) add_bias(probs.data(), w.router_bias, m);
  // Per token: gating, selection bias, group limit, top-k, norm and scale, by
  // the definition the CUDA router kernel shares (kernels/hd_route.h).
  const hd::RouteParams r = route_params(cfg);
  sel.resize(static_cast<size_t>(n_exp));
  const float* bias = w.selection_bias.empty() ? nullptr : w.selection_bias.data();
  for (int64_t t = 0; t < m; ++t)
    hd::route_token(r, probs.data() + t * n_exp, bias, sel.data(), chosen + t * k, weight + t * k);
}

namespace {

// One expert's share of a MoE layer: its tokens form one batch, so its
// weights stream once.
struct ActiveExpert {
  int e = 0;  // −1: the shared experts
  kernels::MatView gate, up, down;
  std::vector<int64_t> rows;  // token indices
  std::vector<float> ws;      // their routing weights
  FloatBuf x, h, y;           // [n][d] (gathered rows), [n][n_ff], [n][d]
  const float* in = nullptr;  // its inputs: x, or for the shared experts the layer's input itself
  // `in` quantized once for all of the expert's gate and up work items: the
  // layer's copy when the expert has every token (always, at one token), else
  // its rows gathered into own_inq (moe).
  const kernels::QuantizedActs* inq = nullptr;
  kernels::QuantizedActs own_inq, hq;  // hq: h, quantized by the thread that finishes it (gate_up)
  int pending = 0;                     // gate_up items of this expert not yet done
  int ready = 0;                       // 1 once hq holds all of h (experts_decode's down items wait for it)
};

// An expert's input rows (x itself when it has every token) and its buffers.
void gather_rows(ActiveExpert& ex, const float* x, int64_t m, int d, int n_ff) {
  const size_t n = ex.rows.size();
  if (int64_t(n) == m) {  // rows are ascending and distinct: every token, in order
    ex.in = x;
  } else {
    ex.x.resize(n * size_t(d));
    for (size_t i = 0; i < n; ++i) std::copy_n(x + ex.rows[i] * d, d, ex.x.data() + i * size_t(d));
    ex.in = ex.x.data();
  }
  ex.h.resize(n * size_t(n_ff));
  ex.y.resize(n * size_t(d));
}

// The experts the routing chose, chosen [m][k] with weights [m][k], each with
// its rows gathered; the shared experts (one fused SwiGLU over every token,
// weight 1) last, so they are balanced with the routed ones and cost no extra
// parallel loops (three per layer when run apart).
//
// They are written into `slots`, which the caller keeps from layer to layer,
// so their buffers are allocated once, not once per expert per layer per
// token. An expert with every token (always, at one token) reads the layer's
// input where it is; the others get their rows copied.
std::span<ActiveExpert> gather_experts(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t m,
                                       const int* chosen, const float* weight, const MoeHooks& hooks,
                                       std::vector<ActiveExpert>& slots) {
  const int k = cfg.n_expert_used, d = cfg.n_embd;
  size_t n_active = 0;
  const auto next = [&]() -> ActiveExpert& {
    if (n_active == slots.size()) slots.emplace_back();
    ActiveExpert& ex = slots[n_active++];
    ex.rows.clear();
    ex.ws.clear();
    return ex;
  };
  thread_local std::vector<char> used;
  used.assign(size_t(cfg.n_expert), 0);
  for (int64_t i = 0; i < m * k; ++i) used[size_t(chosen[i])] = 1;
  for (int e = 0; e < cfg.n_expert; ++e) {
    if (!used[size_t(e)]) continue;
    ActiveExpert& ex = next();
    ex.e = e;
    ex.gate = w.gate.slice(e);
    ex.up = w.up.slice(e);
    ex.down = w.down.slice(e);
    for (int64_t t = 0; t < m; ++t)
      for (int j = 0; j < k; ++j)
        if (chosen[t * k + j] == e) {
          ex.rows.push_back(t);
          ex.ws.push_back(weight[t * k + j]);
        }
    if (hooks.experts) {
      const auto mats = hooks.experts->mats(hooks.layer, e);  // a hot copy when the cache holds one
      ex.gate = mats.gate;
      ex.up = mats.up;
      ex.down = mats.down;
    }
    if (hooks.stats) hooks.stats->expert_tokens[size_t(e)] += int64_t(ex.rows.size());
    gather_rows(ex, x, m, d, cfg.n_ff_exp);
  }
  if (w.shared_gate.present()) {
    ActiveExpert& sh = next();
    sh.e = -1;
    sh.gate = w.shared_gate.m;
    sh.up = w.shared_up.m;
    sh.down = w.shared_down.m;
    sh.ws.assign(size_t(m), 1.0f);
    sh.in = x;
    sh.rows.resize(size_t(m));
    std::iota(sh.rows.begin(), sh.rows.end(), int64_t(0));
    sh.h.resize(size_t(m) * size_t(sh.gate.rows));
    sh.y.resize(size_t(m) * size_t(d));
  }
  return {slots.data(), n_active};
}

// A unit of work: rows [r0, r1) of one expert's matrix over its tokens.
struct WorkItem {
  size_t expert;
  int64_t r0, r1;
  double cost;  // tokens × rows
};

// Appends rows [0, nr) of active expert `a` (n tokens) in items of `step` rows.
void append_items(std::vector<WorkItem>& items, size_t a, int64_t nr, int64_t n, int64_t step) {
  for (int64_t r = 0; r < nr; r += step)
    items.push_back({a, r, std::min(nr, r + step), double(n) * double(std::min(step, nr - r))});
}

// The items of a matrix of `shape(expert)` = {rows, row group} per expert,
// cut so that there are about 4 per thread over all experts, each at least 16
// rows and on whole groups of a repacked matrix (the shared experts' may be:
// kernels/repack.h). Cutting experts finer cost more than it balanced: every
// item starts new weight streams and kernel calls (qwen3moe-mid Q4_K_M
// decode, 8 experts, alternated runs: every expert cut in 4, four parts per
// thread, 67-86 tokens/s; whole experts 83-101).
template <class Shape>
void cut_items(std::span<const ActiveExpert> active, int n_threads, Shape shape, std::vector<WorkItem>& items) {
  const int64_t total = std::max<int64_t>(1, int64_t(active.size()));
  const int64_t per_expert = std::max<int64_t>(1, (4 * n_threads + total - 1) / total);
  items.clear();
  for (size_t a = 0; a < active.size(); ++a) {
    const auto [nr, g] = shape(active[a]);
    const int64_t step = (std::max<int64_t>(16, (nr + per_expert - 1) / per_expert) + g - 1) / g * g;
    append_items(items, a, nr, int64_t(active[a].rows.size()), step);
  }
}

bool biggest_first(const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; }

// The loads of `items` (biggest first) placed longest-first on n threads,
// added to the stats' balance figures.
void record_balance(std::span<const WorkItem> items, int n_threads, MoeStats& stats) {
  thread_local std::vector<double> load;
  load.assign(size_t(n_threads), 0.0);
  for (const WorkItem& it : items) *std::min_element(load.begin(), load.end()) += it.cost;
  const auto [mn, mx] = std::minmax_element(load.begin(), load.end());
  stats.thread_load_max += *mx;
  stats.thread_load_min += *mn;
}

// With many tokens per expert (a prompt): one part per thread, the items
// placed longest-processing-time-first onto the least-loaded part, so every
// thread finishes at about the same time whatever the routing. (Decode is
// experts_decode.)
template <class Shape>
std::vector<std::vector<WorkItem>> plan_work(const ThreadPool& pool, std::span<const ActiveExpert> active, Shape shape,
                                             MoeStats* stats) {
  std::vector<WorkItem> items;
  cut_items(active, pool.size(), shape, items);
  std::sort(items.begin(), items.end(), biggest_first);
  if (stats) record_balance(items, pool.size(), *stats);
  std::vector<std::vector<WorkItem>> parts(static_cast<size_t>(pool.size()));
  std::vector<double> load(static_cast<size_t>(pool.size()), 0.0);
  for (const WorkItem& it : items) {
    const size_t t = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    parts[t].push_back(it);
    load[t] += it.cost;
  }
  return parts;
}

// One gate_up work item: rows [r0, r1) of h = silu(x·Wgᵀ) ⊙ (x·Wuᵀ) for
// the expert's tokens (gpt-oss: with biases and its clamped activation,
// ModelConfig::swiglu_oai); gate and up run in the same item, so SwiGLU's
// product needs no extra pass. The thread that finishes an expert's last item
// quantizes its h for down: inside the parallel loop, where one thread
// quantizing every expert's h between the loops kept the other waiting (8
// experts' rows each layer at decode).
void gate_up_item(const MoeWeights& w, bool oai, ActiveExpert& ex, const WorkItem& it, int64_t d) {
  thread_local FloatBuf g, u;
  const int64_t n = int64_t(ex.rows.size()), nr = it.r1 - it.r0, ff = ex.gate.rows;
  g.resize(size_t(n * nr));
  u.resize(size_t(n * nr));
  // Rows [r0, r1) of this expert's gate and up matrices.
  const auto rows_of = [&](kernels::MatView v) {
    v.data = v.row(it.r0);
    v.rows = nr;
    return v;
  };
  // g, u [n][nr] = the expert's inputs · its gate and up rows r0..r1
  const kernels::MatmulArgs to_g{.w = rows_of(ex.gate),
                                 .x = ex.in,
                                 .ldx = d,
                                 .m = n,
                                 .y = g.data(),
                                 .ldy = nr,
                                 .row_begin = 0,
                                 .row_end = nr,
                                 .xq = ex.inq};
  kernels::matmul(to_g);
  kernels::MatmulArgs to_u = to_g;
  to_u.w = rows_of(ex.up);
  to_u.y = u.data();
  kernels::matmul(to_u);
  // Expert biases (gpt-oss) for rows r0..r1; the shared experts have none.
  const float* gb = ex.e >= 0 && !w.gate_b.empty() ? w.gate_b.data() + ex.e * ff + it.r0 : nullptr;
  const float* ub = ex.e >= 0 && !w.up_b.empty() ? w.up_b.data() + ex.e * ff + it.r0 : nullptr;
  for (int64_t i = 0; i < n; ++i)
    expert_activation(oai, g.data() + i * nr, u.data() + i * nr, gb, ub, ex.h.data() + i * ff + it.r0, nr);
  // acq_rel: the other items' rows of h are visible to whoever quantizes it.
  if (std::atomic_ref<int>(ex.pending).fetch_sub(1, std::memory_order_acq_rel) == 1) {
    kernels::quantize_acts(ex.h.data(), ff, n, ff, kernels::act_blocks(ex.down.type), ex.hq);
    std::atomic_ref<int>(ex.ready).store(1, std::memory_order_release);
  }
}

// One down work item: rows [r0, r1) of y = h·Wdᵀ for the expert's tokens.
void down_item(ActiveExpert& ex, const WorkItem& it, int64_t d) {
  kernels::matmul({.w = ex.down,
                   .x = ex.h.data(),
                   .ldx = ex.down.cols,
                   .m = int64_t(ex.rows.size()),
                   .y = ex.y.data(),
                   .ldy = d,
                   .row_begin = it.r0,
                   .row_end = it.r1,
                   .xq = &ex.hq});
}

std::pair<int64_t, int64_t> gate_up_shape(const ActiveExpert& ex) {
  return {ex.gate.rows, std::max(ex.gate.row_group, ex.up.row_group)};
}
std::pair<int64_t, int64_t> down_shape(const ActiveExpert& ex) { return {ex.down.rows, ex.down.row_group}; }

// Resets every expert's count of gate_up items, then counts those of `parts`.
void count_pending(std::span<ActiveExpert> active, std::span<const std::vector<WorkItem>> parts) {
  for (ActiveExpert& ex : active) ex.pending = 0, ex.ready = 0;
  for (const auto& part : parts)
    for (const WorkItem& it : part) ++active[it.expert].pending;
}

// h for every expert (gate_up_item), in one parallel loop of one part per thread.
void gate_up(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, std::span<ActiveExpert> active, int64_t d,
             MoeStats* stats) {
  const auto parts = plan_work(pool, active, gate_up_shape, stats);
  count_pending(active, parts);
  pool.parallel_for(int64_t(parts.size()), [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t)
      for (const WorkItem& it : parts[size_t(t)]) gate_up_item(w, cfg.swiglu_oai, active[it.expert], it, d);
  });
}

// y = h·Wdᵀ for every expert, in one parallel loop of one part per thread.
void down(ThreadPool& pool, std::span<ActiveExpert> active, int64_t d, MoeStats* stats) {
  const auto parts = plan_work(pool, active, down_shape, stats);
  pool.parallel_for(int64_t(parts.size()), [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t)
      for (const WorkItem& it : parts[size_t(t)]) down_item(active[it.expert], it, d);
  });
}

// Experts with at most this many tokens each go through experts_decode.
constexpr size_t kDecodeTokens = 4;

// Decode (every expert has a few tokens): gate_up and down in one parallel
// loop, where two loops made every thread wait at the end of gate_up for the
// last expert's h (a tail of half an expert's gate and up on average, every
// layer). Items are claimed in order: every gate_up item (biggest first),
// then each expert's down in the same expert order, so when a thread claims
// an expert's down its gate_up items are all claimed and running on the
// other threads (or done), and it waits at most for the last of them (spins
// on `ready`). Each item is a claim of its own, so the other threads take a
// descheduled thread's items (ThreadPool). The last experts' down matrices are
// cut in quarters, so the loop's end is balanced to a quarter of one expert's
// down.
void experts_decode(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, std::span<ActiveExpert> active,
                    int64_t d, MoeStats* stats) {
  // Kept from layer to layer: a decode step comes here once per layer. (The
  // loop's lambda names them through references: on the other threads the
  // thread_local names would mean those threads' own, empty, copies.)
  thread_local std::vector<WorkItem> items_kept, downs_kept;
  std::vector<WorkItem>&items = items_kept, &downs = downs_kept;
  thread_local std::vector<size_t> order;
  thread_local std::vector<char> seen;
  cut_items(active, pool.size(), gate_up_shape, items);
  std::stable_sort(items.begin(), items.end(), biggest_first);
  count_pending(active, std::span(&items, 1));
  // Down items in the order the experts' gate_up items are first claimed.
  order.clear();
  seen.assign(active.size(), 0);
  for (const WorkItem& it : items)
    if (!seen[it.expert]) seen[it.expert] = 1, order.push_back(it.expert);
  downs.clear();
  const size_t tail = size_t(pool.size());  // experts whose down is cut in quarters
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [nr, g] = down_shape(active[order[i]]);
    const int64_t pieces = i + tail >= order.size() ? 4 : 1;
    const int64_t step = std::max<int64_t>((nr / pieces + g - 1) / g * g, std::max<int64_t>(g, 16));
    append_items(downs, order[i], nr, int64_t(active[order[i]].rows.size()), step);
  }
  if (stats) {  // the balance figures: each loop's items placed longest first on the threads
    thread_local std::vector<WorkItem> sorted;
    record_balance(items, pool.size(), *stats);
    sorted.assign(downs.begin(), downs.end());
    std::stable_sort(sorted.begin(), sorted.end(), biggest_first);
    record_balance(sorted, pool.size(), *stats);
  }
  const int64_t n_up = int64_t(items.size()), n_items = n_up + int64_t(downs.size());
  pool.parallel_for(
      n_items,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          if (i < n_up) {
            const WorkItem& it = items[size_t(i)];
            gate_up_item(w, cfg.swiglu_oai, active[it.expert], it, d);
            continue;
          }
          const WorkItem& it = downs[size_t(i - n_up)];
          ActiveExpert& ex = active[it.expert];
          while (!std::atomic_ref<int>(ex.ready).load(std::memory_order_acquire)) __builtin_ia32_pause();
          down_item(ex, it, d);
        }
      },
      int((n_items + pool.size() - 1) / pool.size()));
}

}  // namespace

void moe(ThreadPool& pool, const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t m, float* out,
         const MoeHooks& hooks) {
  const int k = cfg.n_expert_used, d = cfg.n_embd;
  thread_local std::vector<int> chosen;    // [m][k] experts
  thread_local std::vector<float> weight;  // [m][k] their combine weights
  chosen.resize(static_cast<size_t>(m * k));
  weight.resize(static_cast<size_t>(m * k));
  route(pool, cfg, w, x, m, chosen.data(), weight.data());
  if (hooks.experts) hooks.experts->routed(hooks.layer, chosen.data(), m);
  if (hooks.stats) {
    hooks.stats->expert_tokens.resize(size_t(cfg.n_expert), 0);
    ++hooks.stats->calls;
  }
  // Decode-sized calls reuse the slots of the last one (moe runs on the
  // forward pass's thread); a prompt's experts get buffers of their own,
  // freed after the layer: kept, 64 experts' buffers for hundreds of tokens
  // each held ~300 MB of a qwen3moe-mid process for nothing.
  constexpr int64_t kKeptTokens = 16;
  thread_local std::vector<ActiveExpert> kept;
  std::vector<ActiveExpert> own;
  std::vector<ActiveExpert>& slots = m <= kKeptTokens ? kept : own;
  const std::span<ActiveExpert> active = gather_experts(cfg, w, x, m, chosen.data(), weight.data(), hooks, slots);
  // The int8 kernels' inputs, quantized once: the layer's input for every
  // expert (gate, up, and every work item a matrix is cut into would
  // otherwise quantize it again), each expert's h in gate_up.
  thread_local kernels::QuantizedActs xq;
  quantize_input(pool, w.gate.m, x, m, xq);
  for (ActiveExpert& ex : active) {
    const int64_t n = int64_t(ex.rows.size());
    if (xq.blocks == kernels::ActBlocks::None || kernels::act_blocks(ex.gate.type) != xq.blocks) {
      quantize_input(pool, ex.gate, ex.in, n, ex.own_inq);  // (a hot copy or shared expert of another type)
      ex.inq = &ex.own_inq;
    } else if (n == m) {
      ex.inq = &xq;  // every token, in order: rows are ascending and distinct
    } else {
      kernels::gather_act_rows(xq, ex.rows.data(), n, ex.own_inq);
      ex.inq = &ex.own_inq;
    }
  }
  size_t most = 0;
  for (const auto& ex : active) most = std::max(most, ex.rows.size());
  if (most <= kDecodeTokens) {
    experts_decode(pool, cfg, w, active, d, hooks.stats);
  } else {
    gate_up(pool, cfg, w, active, d, hooks.stats);
    down(pool, active, d, hooks.stats);
  }
  // out [m][d] = Σ over each token's experts of weight · y
  std::fill(out, out + m * d, 0.0f);
  for (const ActiveExpert& ex : active)
    for (size_t i = 0; i < ex.rows.size(); ++i) {
      float* o = out + ex.rows[i] * d;
      const float* yi = ex.y.data() + i * size_t(d);
      for (int c = 0; c < d; ++c) o[c] += ex.ws[i] * yi[c];
      if (ex.e >= 0 && !w.down_b.empty())
        for (int c = 0; c < d; ++c) o[c] += ex.ws[i] * w.down_b[size_t(ex.e) * size_t(d) + size_t(c)];
    }
}

}  // namespace moelsp::layers
