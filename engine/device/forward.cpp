// The forward pass on a device (device_forward.h), the decoder skeleton of
// engine/arch/decoder.h with every step a device operation:
//
//   x = embed(tokens)                                     x, h, y: [n][n_embd]
//   for each layer il:
//     x += attention_il(rms_norm(x, attn_norm))            GQA, or MLA absorbed
//     x += ffn_il(rms_norm(x, ffn_norm))                   MoE (device + CPU experts) or dense SwiGLU
//   logits = lm_head(rms_norm(x, output_norm))            [batch.logit_rows()][n_vocab]
//
// Activations live in a workspace of device buffers that only grows, so a
// decode step allocates nothing once the largest pass has sized it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../layers/layers.h"
#include "device_forward.h"
#include "device_model.h"
#include "kernels/convert.h"
#include "kernels/hd_activations.h"
#include "kernels/hd_route.h"
#include "kernels/matmul.h"

namespace moelsp::device {

namespace gpu = kernels::gpu;
using kernels::DType;

namespace {

// Tokens up to which a pass with every expert resident picks them on the
// device (decode and small batches; a prompt's tokens group by expert on the
// host, where each expert's matmul has many inputs).
constexpr int kExpertsOnDevice = 8;

// The device copy of a pool's rows: the same block ids, one allocation of
// n_layer × n_blocks blocks laid out as the host pool's. It holds the device
// (a pool may outlive the model that wrote into it).
class DeviceKv final : public KvMirror {
 public:
  DeviceKv(std::shared_ptr<gpu::Device> d, const KvLayout& L, int64_t n_blocks)
      : owner(std::move(d)),
        dev(owner.get()),
        layout(L),
        n_blocks(n_blocks),
        rows(*dev, size_t(L.n_layer) * size_t(n_blocks) * L.block_bytes()) {}
  void copy_block(int32_t from, int32_t to) override {
    dev->bind();
    for (int il = 0; il < layout.n_layer; ++il) dev->copy(block(il, to), block(il, from), layout.block_bytes());
  }
  void read_block(int32_t b, int il, uint8_t* dst) override {
    dev->bind();
    dev->download(dst, block(il, b), layout.block_bytes());
  }
  void write_block(int32_t b, int il, const uint8_t* src) override {
    dev->bind();
    dev->upload(block(il, b), src, layout.block_bytes());
  }
  uint8_t* block(int il, int32_t b) const {
    return rows.as<uint8_t>() + (size_t(il) * size_t(n_blocks) + size_t(b)) * layout.block_bytes();
  }
  std::shared_ptr<gpu::Device> owner;
  gpu::Device* dev;
  KvLayout layout;
  int64_t n_blocks;
  gpu::Buffer rows;
};

DeviceKv& device_kv(const std::shared_ptr<gpu::Device>& d, KvSequence& seq) {
  BlockPool& pool = seq.pool();
  auto* kv = dynamic_cast<DeviceKv*>(pool.mirror());
  if (!kv || kv->dev != d.get()) {
    const KvType t = pool.layout().type;
    if (t != KvType::F16 && t != KvType::F32 && t != KvType::BF16)
      throw ModelError("the device KV cache holds f16, bf16 or f32 rows (this cache: q8_0)");
    auto made = std::make_unique<DeviceKv>(d, pool.layout(), pool.n_blocks());
    kv = made.get();
    // Rows already in the pool were written on the host (restored from the
    // prompt cache on disk, or computed by the host forward pass).
    for (const int32_t b : pool.live_blocks())
      for (int il = 0; il < pool.layout().n_layer; ++il) kv->write_block(b, il, pool.row(il, b, 0));
    pool.set_mirror(std::move(made));
  }
  return *kv;
}

}  // namespace

// One forward call's state: the batch's sequences with their device block
// tables, the workspace, and the steps.
struct Pass {
  gpu::Device& d;
  const ModelConfig& c;
  DeviceModel& m;
  ThreadPool& pool;
  int n = 0;  // tokens
  std::vector<layers::SeqSpan> seqs = {};
  std::vector<DeviceKv*> kv = {};            // per sequence
  std::vector<const int32_t*> table = {};    // per sequence: its block table on the device
  const float *cs = nullptr, *sn = nullptr;  // RoPE tables [n][n_pairs]
  int n_pairs = 0;

  // Workspace slots (Buffers grown on demand, kept between passes).
  std::vector<gpu::Buffer>& ws;
  template <class T = float>
  T* slot(int i, size_t count) {
    if (ws.size() <= size_t(i)) ws.resize(size_t(i) + 1);
    if (ws[size_t(i)].bytes() < count * sizeof(T)) {
      d.sync();  // queued work may still read the buffer being replaced
      ws[size_t(i)] = gpu::Buffer(d, count * sizeof(T) * 5 / 4 + 256);
    }
    return ws[size_t(i)].as<T>();
  }
  template <class T>
  T* put(int i, const std::vector<T>& v) {
    T* p = slot<T>(i, v.size());
    d.upload(p, v.data(), v.size() * sizeof(T));
    return p;
  }
  enum Slot {
    X,
    H,
    Y,
    Ids,
    Rope,
    Tables,
    Q,
    K,
    V,
    Attn,
    Qa,
    Qc,
    Ol,
    G,
    U,
    Xg,
    Yd,
    Route,
    Chosen,
    Weight,
    Idx,
    Ws,
    Cpu
  };

  gpu::KvRows rows(size_t s, int il, size_t offset) const {
    const KvLayout& L = kv[s]->layout;
    return {.base = kv[s]->block(il, 0),
            .block_bytes = L.block_bytes(),
            .row_bytes = L.row_bytes(),
            .offset = offset,
            .blocks = table[s],
            .block_size = L.block_size,
            .type = to_dtype(L.type)};
  }

  void gqa(const DeviceLayer& L, int il, const float* h, float* out);
  void mla(const DeviceLayer& L, int il, const float* h, float* out);
  void ffn(DeviceLayer& L, int il, const float* h, float* out, MoeLayerStats* stats);
  void moe(DeviceLayer& L, int il, const float* h, float* out, MoeLayerStats& stats);
  void moe_on_device(DeviceLayer& L, int il, const float* h, float* out, const int* chosen_d, const float* weight_d,
                     MoeLayerStats& stats);
  void shared_experts(const DeviceLayer& L, const float* h, float* out, float* g, float* u);
  // Pass::moe's steps: the choice on the host, grouped by expert; the
  // resident experts queued on the device; the others computed on the CPU.
  struct ByExpert {
    std::vector<std::vector<int32_t>> tok;  // [expert] its tokens
    std::vector<std::vector<float>> wt;     // [expert] their weights
    std::vector<int32_t> idx;               // the resident experts' tokens, expert after expert
    std::vector<float> ws;                  // and their weights
    std::vector<int> cpu;                   // experts used that are not resident
  };
  ByExpert group_by_expert(DeviceLayer& L, int il, const int* chosen_d, const float* weight_d, MoeLayerStats& stats);
  void resident_experts(const DeviceLayer& L, const float* h, float* out, const ByExpert& by, float* g, float* u);
  std::vector<float> cpu_experts(const DeviceLayer& L, const std::vector<float>& hx, const ByExpert& by);
};

// q, k, v = W·h (+ b); per-head q/k norms; RoPE on the first rope.n_dims of
// each head; the new k, v rows into the cache; attention; out = W_o · o (+ b).
void Pass::gqa(const DeviceLayer& L, int il, const float* h, float* out) {
  const int hd = c.head_dim_k, hdv = c.head_dim_v, E = c.n_embd;
  const int64_t nq = int64_t(c.n_head) * hd, nk = int64_t(c.n_head_kv) * hd, nv = int64_t(c.n_head_kv) * hdv;
  float* q = slot(Q, size_t(n * nq));  // [n][n_head·hd]
  float* k = slot(K, size_t(n * nk));  // [n][n_head_kv·hd]
  float* v = slot(V, size_t(n * nv));  // [n][n_head_kv·hd_v]
  d.matmul(L.wq, h, E, n, q, nq);
  d.matmul(L.wk, h, E, n, k, nk);
  d.matmul(L.wv, h, E, n, v, nv);
  if (L.bq) d.add_bias(q, L.bq, n, nq);
  if (L.bk) d.add_bias(k, L.bk, n, nk);
  if (L.bv) d.add_bias(v, L.bv, n, nv);
  if (L.q_norm) {
    d.rms_norm(q, hd, L.q_norm, hd, c.rms_eps, q, int64_t(n) * c.n_head);
    d.rms_norm(k, hd, L.k_norm, hd, c.rms_eps, k, int64_t(n) * c.n_head_kv);
  }
  const bool neox = c.rope.type == RopeType::Neox;
  d.rope(q, n, nq, c.n_head, hd, 0, n_pairs, neox, cs, sn);
  d.rope(k, n, nk, c.n_head_kv, hd, 0, n_pairs, neox, cs, sn);
  const int64_t ldo = int64_t(c.n_head) * hdv;
  float* attn = slot(Attn, size_t(n * ldo));  // [n][n_head·hd_v]
  for (size_t s = 0; s < seqs.size(); ++s) {
    const layers::SeqSpan& sp = seqs[s];
    const size_t v_at = *kernels::row_bytes(to_dtype(kv[s]->layout.type), uint64_t(nk));  // V follows K in a row
    const gpu::KvRows kr = rows(s, il, 0), vr = rows(s, il, v_at);
    d.kv_store(k + sp.begin * nk, nk, nk, sp.n, sp.pos0, kr);
    d.kv_store(v + sp.begin * nv, nv, nv, sp.n, sp.pos0, vr);
    d.attention({.q = q + sp.begin * nq,
                 .ldq = nq,
                 .k = kr,
                 .v = vr,
                 .n_tokens = sp.n,
                 .pos0 = sp.pos0,
                 .n_head = c.n_head,
                 .n_head_kv = c.n_head_kv,
                 .hd_k = hd,
                 .hd_v = hdv,
                 .scale = c.kq_scale,
                 .out = attn + sp.begin * ldo,
                 .ldo = ldo,
                 .window = L.window,
                 .sinks = L.sinks});
  }
  d.matmul(L.wo, attn, ldo, n, out, E);  // [n][n_embd]
  if (L.bo) d.add_bias(out, L.bo, n, E);
}

// MLA, absorbed: multi-query attention over the cached [c | k_pe] rows
// themselves (layers/mla.h), for prompts and decode alike — on a GPU the
// plain form's per-position expansion would save FLOPs only on long prompts
// from scratch, which tensor cores make cheap either way.
//   q [n][H·(nope + rope)] = W_qb · rms_norm(W_qa · h)   (or W_q · h), q_pe roped
//   [c | k_pe] [n][lora + rope] = W_kva · h, c normed, k_pe roped → cache
//   qc [n][H·(lora + rope)] = [K_absorb_h · q_nope_h | q_pe_h] per head
//   o_lat [n][H·lora] = attention(qc; cached rows as keys, their c as values)
//   o [n][H·v] = V_up_h · o_lat_h per head;  out = W_o · o
void Pass::mla(const DeviceLayer& L, int il, const float* h, float* out) {
  const int H = c.n_head, hk = c.head_dim_k, hv = c.head_dim_v, lora = c.kv_lora_rank, rope = c.qk_rope,
            nope = c.qk_nope, E = c.n_embd;
  const int64_t q_dim = int64_t(H) * hk, ldr = lora + rope, ldc = int64_t(H) * ldr, ldl = int64_t(H) * lora;
  float* q = slot(Q, size_t(n * q_dim));
  if (c.q_lora_rank > 0) {
    float* qa = slot(Qa, size_t(n) * size_t(c.q_lora_rank));  // [n][q_lora]
    d.matmul(L.wq_a, h, E, n, qa, c.q_lora_rank);
    d.rms_norm(qa, c.q_lora_rank, L.q_a_norm, c.q_lora_rank, c.rms_eps, qa, n);
    d.matmul(L.wq_b, qa, c.q_lora_rank, n, q, q_dim);
  } else {
    d.matmul(L.wq, h, E, n, q, q_dim);
  }
  float* kva = slot(K, size_t(n * ldr));  // [n][lora + rope]
  d.matmul(L.wkv_a, h, E, n, kva, ldr);
  d.rms_norm(kva, ldr, L.kv_a_norm, lora, c.rms_eps, kva, n);
  const bool neox = c.rope.type == RopeType::Neox;
  d.rope(kva, n, ldr, 1, 0, lora, n_pairs, neox, cs, sn);
  d.rope(q, n, q_dim, H, hk, nope, n_pairs, neox, cs, sn);
  float* qc = slot(Qc, size_t(n * ldc));
  for (int hh = 0; hh < H; ++hh) {
    d.matmul(L.k_absorb[size_t(hh)], q + int64_t(hh) * hk, q_dim, n, qc + int64_t(hh) * ldr, ldc);
    d.copy_2d(qc + int64_t(hh) * ldr + lora, ldc, q + int64_t(hh) * hk + nope, q_dim, n, rope);
  }
  float* ol = slot(Ol, size_t(n * ldl));  // [n][H·lora]
  for (size_t s = 0; s < seqs.size(); ++s) {
    const layers::SeqSpan& sp = seqs[s];
    const gpu::KvRows r = rows(s, il, 0);
    d.kv_store(kva + sp.begin * ldr, ldr, ldr, sp.n, sp.pos0, r);
    d.attention({.q = qc + sp.begin * ldc,
                 .ldq = ldc,
                 .k = r,
                 .v = r,  // values: the first lora elements of the same rows
                 .n_tokens = sp.n,
                 .pos0 = sp.pos0,
                 .n_head = H,
                 .n_head_kv = 1,
                 .hd_k = int(ldr),
                 .hd_v = lora,
                 .scale = c.kq_scale,
                 .out = ol + sp.begin * ldl,
                 .ldo = ldl});
  }
  const int64_t ldo = int64_t(H) * hv;
  float* o = slot(Attn, size_t(n * ldo));  // [n][H·v]
  for (int hh = 0; hh < H; ++hh)
    d.matmul(L.v_up[size_t(hh)], ol + int64_t(hh) * lora, ldl, n, o + int64_t(hh) * hv, ldo);
  d.matmul(L.wo, o, ldo, n, out, E);
}

void Pass::ffn(DeviceLayer& L, int il, const float* h, float* out, MoeLayerStats* stats) {
  if (c.is_moe_layer(il)) return moe(L, il, h, out, *stats);
  const int64_t ff = L.gate.rows, E = c.n_embd;
  float* g = slot(G, size_t(n * ff));
  float* u = slot(U, size_t(n * ff));
  d.matmul(L.gate, h, E, n, g, ff);
  d.matmul(L.up, h, E, n, u, ff);
  d.swiglu(g, u, g, n * ff);
  d.matmul(L.down, g, ff, n, out, E);
}

// Decode with every expert resident: the router's choice stays on the device
// and picks the experts there (matmul_experts: one launch per matrix kind
// for all tokens × k), so a MoE layer neither waits for the host nor
// launches per expert: ~7 launches, where the grouped path below takes a sync
// and 6 per expert used.
void Pass::moe_on_device(DeviceLayer& L, int il, const float* h, float* out, const int* chosen_d, const float* weight_d,
                         MoeLayerStats& stats) {
  const int E = c.n_embd, NE = c.n_expert, k = c.n_expert_used, ff = c.n_ff_exp;
  const int64_t slots = int64_t(n) * k;
  d.count_ids(chosen_d, slots, m.counts.as<int64_t>() + int64_t(il) * NE);
  const size_t wide = size_t(std::max<int64_t>(slots * ff, int64_t(n) * L.shared_gate.rows));
  float* g = slot(G, wide);
  float* u = slot(U, wide);
  float* yd = slot(Yd, size_t(slots) * size_t(E));
  shared_experts(L, h, out, g, u);
  const auto experts = [&](const std::vector<Mat>& mats, int w, const float* x, int64_t ldx, bool per_slot,
                           const float* bias, float* y, int64_t ldy) {
    d.matmul_experts({.first = mats[0],
                      .stride = L.slot_bytes[w],
                      .ids = chosen_d,
                      .n_slots = slots,
                      .k = k,
                      .x = x,
                      .ldx = ldx,
                      .x_per_slot = per_slot,
                      .bias = bias,
                      .y = y,
                      .ldy = ldy});
  };
  experts(L.e_gate, 0, h, E, false, L.gate_b, g, ff);  // [n·k][ff]
  experts(L.e_up, 1, h, E, false, L.up_b, u, ff);
  if (c.swiglu_oai) d.swiglu_oai(g, u, g, slots * ff);
  else d.swiglu(g, u, g, slots * ff);
  experts(L.e_down, 2, g, ff, true, L.down_b, yd, E);  // [n·k][n_embd]
  d.moe_combine(yd, E, weight_d, n, k, E, out, E);
  m.routed[size_t(il)].fetch_add(slots, std::memory_order_relaxed);
  m.hits[size_t(il)].fetch_add(slots, std::memory_order_relaxed);
  ++stats.calls;
}

// The shared experts' SwiGLU into out (zeros without them); g, u: scratch.
void Pass::shared_experts(const DeviceLayer& L, const float* h, float* out, float* g, float* u) {
  const int E = c.n_embd;
  if (!L.shared_gate.data) return d.zero(out, size_t(n) * size_t(E) * sizeof(float));
  const int64_t sh = L.shared_gate.rows;
  d.matmul(L.shared_gate, h, E, n, g, sh);
  d.matmul(L.shared_up, h, E, n, u, sh);
  d.swiglu(g, u, g, n * sh);
  d.matmul(L.shared_down, g, sh, n, out, E);
}

// Router on the device → the choice back on the host (one sync) → tokens
// grouped by expert: resident experts as matmul chains on the device (gather
// their rows, gate/up, SwiGLU, down, weighted scatter-add), the others on the
// CPU from the file's bytes meanwhile, their sum uploaded and added.
void Pass::moe(DeviceLayer& L, int il, const float* h, float* out, MoeLayerStats& stats) {
  const int E = c.n_embd, NE = c.n_expert, k = c.n_expert_used, ff = c.n_ff_exp;
  float* logits = slot(Route, size_t(n) * size_t(NE));
  d.matmul(L.router, h, E, n, logits, NE);
  if (L.router_bias) d.add_bias(logits, L.router_bias, n, NE);
  const kernels::hd::RouteParams r = layers::route_params(c);  // the CPU pass's routing (layers.h)
  int* chosen_d = slot<int>(Chosen, size_t(n * k));
  float* weight_d = slot(Weight, size_t(n * k));
  d.route(r, logits, n, L.sel_bias, chosen_d, weight_d);
  if (m.counts.bytes() && n <= kExpertsOnDevice) return moe_on_device(L, il, h, out, chosen_d, weight_d, stats);
  const ByExpert by = group_by_expert(L, il, chosen_d, weight_d, stats);
  std::vector<float> hx;  // h on the host, for the CPU's experts
  if (!by.cpu.empty()) {
    hx.resize(size_t(n) * size_t(E));
    d.download(hx.data(), h, hx.size() * sizeof(float));
  }
  // Shared experts (or zeros), then the resident experts, queued on the device.
  const size_t wide = size_t(n) * size_t(std::max<int64_t>(ff, L.shared_gate.rows));
  float* g = slot(G, wide);
  float* u = slot(U, wide);
  resident_experts(L, h, out, by, g, u);
  if (by.cpu.empty()) return;
  // The CPU's experts, while the device works through its own.
  d.add(out, put(Cpu, cpu_experts(L, hx, by)), int64_t(n) * E);
}

// The router's choice copied back to the host (one sync), tokens grouped by
// expert, resident experts first in one index list; the layer's counters.
Pass::ByExpert Pass::group_by_expert(DeviceLayer& L, int il, const int* chosen_d, const float* weight_d,
                                     MoeLayerStats& stats) {
  const int NE = c.n_expert, k = c.n_expert_used;
  std::vector<int> chosen(static_cast<size_t>(n * k));
  std::vector<float> weight(static_cast<size_t>(n * k));
  d.download(chosen.data(), chosen_d, chosen.size() * sizeof(int));
  d.download(weight.data(), weight_d, weight.size() * sizeof(float));
  ByExpert by;
  by.tok.resize(size_t(NE));
  by.wt.resize(size_t(NE));
  if (stats.expert_tokens.size() != size_t(NE)) stats.expert_tokens.assign(size_t(NE), 0);
  int64_t hits = 0;
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = chosen[size_t(t * k + j)];
      by.tok[size_t(e)].push_back(t);
      by.wt[size_t(e)].push_back(weight[size_t(t * k + j)]);
      ++stats.expert_tokens[size_t(e)];
      L.heat[size_t(e)] += 1.0;
      hits += L.slot_of[size_t(e)] >= 0;
    }
  m.routed[size_t(il)].fetch_add(int64_t(n) * k, std::memory_order_relaxed);
  m.hits[size_t(il)].fetch_add(hits, std::memory_order_relaxed);
  ++stats.calls;
  for (int e = 0; e < NE; ++e) {
    if (by.tok[size_t(e)].empty()) continue;
    if (!L.e_gate[size_t(e)].data) {
      by.cpu.push_back(e);
      continue;
    }
    by.idx.insert(by.idx.end(), by.tok[size_t(e)].begin(), by.tok[size_t(e)].end());
    by.ws.insert(by.ws.end(), by.wt[size_t(e)].begin(), by.wt[size_t(e)].end());
  }
  return by;
}

// Each resident expert as a matmul chain over its tokens: gather their rows,
// gate/up, SwiGLU, down, weighted scatter-add into out (after the shared
// experts, which write out first).
void Pass::resident_experts(const DeviceLayer& L, const float* h, float* out, const ByExpert& by, float* g, float* u) {
  const int E = c.n_embd, NE = c.n_expert, ff = c.n_ff_exp;
  // The index lists go up first: a blocking copy queued behind the shared
  // experts could hold the host until they finish, delaying the CPU's experts.
  const int32_t* idx_d = by.idx.empty() ? nullptr : put(Idx, by.idx);
  const float* ws_d = by.ws.empty() ? nullptr : put(Ws, by.ws);
  shared_experts(L, h, out, g, u);
  if (by.idx.empty()) return;
  float* xg = slot(Xg, size_t(n) * size_t(E));
  float* yd = slot(Yd, size_t(n) * size_t(E));
  size_t at = 0;
  for (int e = 0; e < NE; ++e) {
    const int ne = int(by.tok[size_t(e)].size());
    if (ne == 0 || !L.e_gate[size_t(e)].data) continue;
    d.gather_rows(h, E, idx_d + at, ne, E, xg);
    d.matmul(L.e_gate[size_t(e)], xg, E, ne, g, ff);
    d.matmul(L.e_up[size_t(e)], xg, E, ne, u, ff);
    if (L.gate_b) d.add_bias(g, L.gate_b + int64_t(e) * ff, ne, ff);
    if (L.up_b) d.add_bias(u, L.up_b + int64_t(e) * ff, ne, ff);
    if (c.swiglu_oai) d.swiglu_oai(g, u, g, int64_t(ne) * ff);
    else d.swiglu(g, u, g, int64_t(ne) * ff);
    d.matmul(L.e_down[size_t(e)], g, ff, ne, yd, E);
    if (L.down_b) d.add_bias(yd, L.down_b + int64_t(e) * E, ne, E);
    d.scatter_add_rows(yd, E, idx_d + at, ws_d + at, ne, out, E);
    at += size_t(ne);
  }
}

// The experts not resident on the device, from the file's bytes with the CPU
// kernels: their weighted sum over every token, [n][E] (zeros elsewhere).
std::vector<float> Pass::cpu_experts(const DeviceLayer& L, const std::vector<float>& hx, const ByExpert& by) {
  const int E = c.n_embd, ff = c.n_ff_exp;
  std::vector<float> ycpu(size_t(n) * size_t(E), 0.0f), xc, gc, uc, yc;
  for (int e : by.cpu) {
    const std::vector<int32_t>& ts = by.tok[size_t(e)];
    const int ne = int(ts.size());
    xc.resize(size_t(ne) * size_t(E));
    for (int i = 0; i < ne; ++i) std::copy_n(hx.data() + size_t(ts[size_t(i)]) * size_t(E), E, xc.data() + i * E);
    gc.resize(size_t(ne) * size_t(ff));
    uc.resize(gc.size());
    yc.resize(size_t(ne) * size_t(E));
    layers::linear(pool, L.cpu_gate[size_t(e)], xc.data(), ne, gc.data());
    layers::linear(pool, L.cpu_up[size_t(e)], xc.data(), ne, uc.data());
    // The expert's biases (gpt-oss) and activation, as the CPU pass applies them (layers.h).
    const auto bias_of = [&](const std::vector<float>& b, int64_t rows) {
      return b.empty() ? nullptr : b.data() + int64_t(e) * rows;
    };
    for (int i = 0; i < ne; ++i)
      layers::expert_activation(c.swiglu_oai, gc.data() + int64_t(i) * ff, uc.data() + int64_t(i) * ff,
                                bias_of(L.cpu_gate_b, ff), bias_of(L.cpu_up_b, ff), gc.data() + int64_t(i) * ff, ff);
    layers::linear(pool, L.cpu_down[size_t(e)], gc.data(), ne, yc.data());
    if (const float* db = bias_of(L.cpu_down_b, E))
      for (int i = 0; i < ne; ++i)
        for (int j = 0; j < E; ++j) yc[size_t(i) * size_t(E) + size_t(j)] += db[j];
    for (int i = 0; i < ne; ++i) {
      const float w = by.wt[size_t(e)][size_t(i)];
      float* dst = ycpu.data() + size_t(ts[size_t(i)]) * size_t(E);
      for (int j = 0; j < E; ++j) dst[j] += w * yc[size_t(i) * size_t(E) + size_t(j)];
    }
  }
  return ycpu;
}

void DeviceForward::forward(const Batch& batch, float* logits, const CancelCheck& cancel,
                            std::vector<MoeLayerStats>& stats) {
  try {
    gpu::Device& d = *dev_;
    d.bind();
    const ModelConfig& c = c_;
    Pass p{.d = d, .c = c, .m = *m_, .pool = pool_, .ws = m_->workspace};
    p.n = int(batch.tokens.size());
    p.seqs = layers::seq_spans(batch);
    const int n = p.n, E = c.n_embd;
    const size_t nd = size_t(n) * size_t(E);

    // Per pass: token ids, RoPE tables for every token's position, each sequence's block table.
    const int32_t* ids = p.put(Pass::Ids, std::vector<int32_t>(batch.tokens.begin(), batch.tokens.end()));
    p.n_pairs = std::min(c.rope.n_dims / 2, 512);
    std::vector<float> tab(static_cast<size_t>(2 * n * p.n_pairs));
    float* cs = tab.data();
    float* sn = tab.data() + size_t(n * p.n_pairs);
    std::vector<int32_t> tables;
    std::vector<size_t> table_at;
    for (const layers::SeqSpan& sp : p.seqs) {
      for (int t = 0; t < sp.n; ++t)
        layers::rope_angles(c.rope, sp.pos0 + t, cs + size_t(sp.begin + t) * size_t(p.n_pairs),
                            sn + size_t(sp.begin + t) * size_t(p.n_pairs));
      p.kv.push_back(&device_kv(dev_, *sp.seq));
      table_at.push_back(tables.size());
      tables.insert(tables.end(), sp.seq->blocks().begin(), sp.seq->blocks().end());
    }
    const float* tab_d = p.put(Pass::Rope, tab);
    p.cs = tab_d;
    p.sn = tab_d + size_t(n * p.n_pairs);
    const int32_t* tables_d = p.put(Pass::Tables, tables);
    for (size_t at : table_at) p.table.push_back(tables_d + at);

    float* x = p.slot(Pass::X, nd);  // [n][n_embd] the residual stream
    float* h = p.slot(Pass::H, nd);  // [n][n_embd] a block's normed input
    float* y = p.slot(Pass::Y, nd);  // [n][n_embd] a block's output
    d.embed(m_->token_embd, ids, n, x);
    for (int il = 0; il < c.n_layer; ++il) {
      DeviceLayer& L = m_->layers[size_t(il)];
      d.rms_norm(x, E, L.attn_norm, E, c.rms_eps, h, n);
      if (c.kv_lora_rank > 0) p.mla(L, il, h, y);
      else p.gqa(L, il, h, y);
      d.add(x, y, int64_t(nd));
      d.rms_norm(x, E, L.ffn_norm, E, c.rms_eps, h, n);
      p.ffn(L, il, h, y, c.is_moe_layer(il) ? &stats[size_t(il)] : nullptr);
      d.add(x, y, int64_t(nd));
      if (cancel && cancel()) {
        d.sync();
        throw Cancelled();
      }
    }

    // The rows that want logits: final norm, output head, copied back.
    std::vector<int32_t> want;
    int at = 0;
    for (const BatchSeq& s : batch.seqs) {
      for (int t = s.all_logits ? at : at + s.n_tokens - 1; t < at + s.n_tokens; ++t) want.push_back(t);
      at += s.n_tokens;
    }
    const int nr = int(want.size());
    d.gather_rows(x, E, p.put(Pass::Idx, want), nr, E, h);
    d.rms_norm(h, E, m_->output_norm, E, c.rms_eps, h, nr);
    float* lo = p.slot(Pass::Q, size_t(nr) * size_t(c.n_vocab));
    d.matmul(m_->output, h, E, nr, lo, c.n_vocab);
    d.download(logits, lo, size_t(nr) * size_t(c.n_vocab) * sizeof(float));
    take_counts(stats);
    rebalance();
  } catch (const gpu::DeviceError& e) {
    throw ModelError(fmt::format("{}: {}", dev_->name(), e.what()));
  }
}

// The most routed experts onto the device. Per MoE layer with fewer slots
// than experts, routing counts decay by kDecay per pass; while the hottest
// expert on the CPU is used clearly more than the coldest resident one (by
// kMargin), it takes that one's slot: its file bytes are copied into the
// slot's three matrices. At most kSwapsPerPass experts move per pass, so a
// change of topic costs a few passes of copies, never one long stall (an
// expert of a 30 B-class Q4_K_M model is ~2.5 MB: 0.1 ms over PCIe 4).
void DeviceForward::rebalance() {
  constexpr double kDecay = 0.95, kMargin = 1.25;
  constexpr int kSwapsPerPass = 4;
  int budget = kSwapsPerPass;
  const size_t n_layers = m_->layers.size();
  // Each pass starts one layer further on, so the budget reaches every layer.
  const size_t first = size_t(m_->rebalance_turn++ % std::max<uint64_t>(1, n_layers));
  for (DeviceLayer& L : m_->layers)
    for (double& h : L.heat) h *= kDecay;
  for (size_t i = 0; i < n_layers && budget > 0; ++i) {
    DeviceLayer& L = m_->layers[(first + i) % n_layers];
    if (L.heat.empty() || L.in_slot.empty() || L.in_slot.size() == L.heat.size()) continue;
    int hot = -1, cold = -1;
    for (size_t e = 0; e < L.heat.size(); ++e) {
      if (L.slot_of[e] < 0 && (hot < 0 || L.heat[e] > L.heat[size_t(hot)])) hot = int(e);
      if (L.slot_of[e] >= 0 && (cold < 0 || L.heat[e] < L.heat[size_t(cold)])) cold = int(e);
    }
    if (hot < 0 || cold < 0 || L.heat[size_t(hot)] <= kMargin * L.heat[size_t(cold)] + 0.5) continue;
    const int s = L.slot_of[size_t(cold)];
    const kernels::MatView* src[3] = {&L.cpu_gate[size_t(hot)], &L.cpu_up[size_t(hot)], &L.cpu_down[size_t(hot)]};
    std::vector<Mat>* mats[3] = {&L.e_gate, &L.e_up, &L.e_down};
    // The cold expert leaves the slot before its bytes are overwritten: if a
    // copy fails, both experts are left on the CPU and the bookkeeping agrees.
    Mat moved[3];
    for (int w = 0; w < 3; ++w) {
      moved[w] = (*mats[w])[size_t(cold)];
      moved[w].data = L.slot_base[w] + size_t(s) * L.slot_bytes[w];
      (*mats[w])[size_t(cold)] = Mat{};
    }
    L.slot_of[size_t(cold)] = -1;
    L.in_slot[size_t(s)] = -1;
    for (int w = 0; w < 3; ++w) upload_expert(moved[w], *src[w]);
    for (int w = 0; w < 3; ++w) (*mats[w])[size_t(hot)] = moved[w];
    L.slot_of[size_t(hot)] = s;
    L.in_slot[size_t(s)] = hot;
    m_->swaps.fetch_add(1, std::memory_order_relaxed);
    for (int w = 0; w < 3; ++w) m_->bytes_moved.fetch_add(int64_t(L.slot_bytes[w]), std::memory_order_relaxed);
    --budget;
  }
}

// The routing counts the device kept this pass (moe_on_device) into stats:
// one small copy per pass, after the logits' (the pass is over by then).
void DeviceForward::take_counts(std::vector<MoeLayerStats>& stats) {
  if (!m_->counts.bytes()) return;
  std::vector<int64_t> now(m_->counts_seen.size());
  dev_->download(now.data(), m_->counts.as(), now.size() * sizeof(int64_t));
  const size_t NE = size_t(c_.n_expert);
  for (size_t il = 0; il < stats.size() && il < size_t(c_.n_layer); ++il) {
    if (!c_.is_moe_layer(int(il))) continue;
    if (stats[il].expert_tokens.size() != NE) stats[il].expert_tokens.assign(NE, 0);
    for (size_t e = 0; e < NE; ++e) {
      stats[il].expert_tokens[e] += now[il * NE + e] - m_->counts_seen[il * NE + e];
      m_->counts_seen[il * NE + e] = now[il * NE + e];
    }
  }
}

// One expert matrix from the file into its slot (`to` says where, in which
// type and row size): the file's blocks as they are, or converted as at load
// (F16, or F32 rows padded to 32 values).
void DeviceForward::upload_expert(const Mat& to, const kernels::MatView& from) {
  void* at = const_cast<void*>(to.data);
  const size_t bytes = size_t(to.rows) * to.row_bytes;
  if (to.type == from.type && to.row_bytes == from.row_bytes) return dev_->upload(at, from.data, bytes);
  std::vector<uint8_t> rows(bytes, 0);
  const size_t el = to.type == DType::F32 ? 4 : 2;
  std::vector<float> f(to.row_bytes / el, 0.0f);
  for (int64_t r = 0; r < to.rows; ++r) {
    uint8_t* dst = rows.data() + size_t(r) * to.row_bytes;
    kernels::dequantize_row(from.type, from.row(r), f.data(), to.cols);
    if (el == 4) std::memcpy(dst, f.data(), to.row_bytes);
    else kernels::fp32_to_fp16_row(f.data(), reinterpret_cast<uint16_t*>(dst), f.size());
  }
  dev_->upload(at, rows.data(), rows.size());
}

ExpertMetrics DeviceForward::metrics() const {
  ExpertMetrics x;
  x.layers.resize(m_->layers.size());
  for (size_t il = 0; il < m_->layers.size(); ++il) {
    const DeviceLayer& L = m_->layers[il];
    x.layers[il].routed = m_->routed[il].load(std::memory_order_relaxed);
    x.layers[il].cache_hits = m_->hits[il].load(std::memory_order_relaxed);
    x.cache_experts += int64_t(L.in_slot.size());
  }
  x.k = c_.n_expert_used;
  x.cache_swaps = m_->swaps.load(std::memory_order_relaxed);
  x.device_bytes_moved = m_->bytes_moved.load(std::memory_order_relaxed);
  return x;
}

void DeviceForward::reset_metrics() {
  for (size_t il = 0; il < m_->layers.size(); ++il) m_->routed[il] = 0, m_->hits[il] = 0;
  m_->swaps = 0, m_->bytes_moved = 0;
}

}  // namespace moelsp::device
