// Writes a random-weight MoE model with the shapes of a real one, for
// benchmarks at realistic sizes (the references in tests/data are 2-14 M
// parameters and measure overheads, not bandwidth):
//
//   moelsp_make_synthetic_model --shape SHAPE -o OUT.gguf [--layers N]
//
// Weights are F16, uniform in ±0.05 (a fast generator: speed, not realism,
// is the point; routing is then close to uniform); quantize the file with
// `moelsp quantize OUT.gguf Q.gguf Q4_K_M|Q8_0`. The tokenizer is copied from
// a real vocabulary in tests/data/vocab so prompts tokenize as usual.
//   qwen3moe-3b: Qwen3-Coder-30B-A3B's layer (d 2048, 32 q / 4 kv heads of 128,
//     128 experts of 768, 8 used) × 4 layers, starcoder vocabulary (49,152):
//     ≈2.5 B parameters, ≈0.4 B active.
//   deepseek2-3b: DeepSeek-Coder-V2-Lite's layers (d 2048, 16 heads, MLA with
//     kv_lora 512, qk 128+64, v 128; 64 experts of 1408, 6 used, 2 shared; the
//     first layer dense with 10,944) with V2/V3's low-rank query (q_lora 1536)
//     × 5 layers, deepseek-llm vocabulary (102,400): ≈2.8 B parameters, ≈0.8 B
//     active (the 102,400 × 2048 embedding and output count in both).
//   qwen3moe-mid: d 1024, 16 q / 4 kv heads of 128, 64 experts of 512, 8
//     used, × 20 layers: ≈2.2 B parameters, ≈0.4 B active.
//   deepseek2-mid: d 1024, 16 heads, q_lora 768, MLA as above but split into
//     attn_k_b/attn_v_b as today's converter writes it; 64 experts of
//     704, 6 used, 2 shared, V3's sigmoid router with 8 groups (4 kept) and a
//     selection bias; the first layer dense with 2816 × 12 layers: ≈1.9 B.
//   glm-dsa: GLM-5's attention as its config.json describes it (d 6144, 64
//     heads, q_lora 2048, MLA with kv_lora 512, qk 192+64, v 256; DeepSeek
//     Sparse Attention's indexer with 32 heads of 128 keeping 2048 keys) × 2
//     layers (the first runs the indexer, the second reuses its keys), with a
//     small MoE (4 experts of 512, 2 used, 1 shared: the experts are not what
//     this shape measures) and the deepseek-coder vocabulary (32,256): ≈0.8 B
//     parameters. --dense writes the same weights as a deepseek2 file without
//     the indexer: the same model with dense attention, for bench_dsa.
//   llama-1b: a dense model, TinyLlama-1.1B's shapes (d 2048, 32 q / 4 kv
//     heads of 64, feed-forward 5632, × 22 layers, llama vocabulary of
//     32,000): ≈1.1 B parameters, all active. Not what moelsp is for, but the
//     shape where batched decode can pay most: every stream reads the same
//     weights, so N streams could reach N × one stream's tokens/s.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/gguf.h"
#include "kernels/convert.h"

using namespace moelsp;

namespace {

uint64_t g_state = 0x9e3779b97f4a7c15ULL;
// splitmix64 → a uniform float in [-a, a]: ~1 ns per value, so billions take seconds.
float uniform(float a) {
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return a * (float(z >> 40) / float(1 << 23) - 1.0f);
}

struct Model {
  gguf::Writer w;
  uint64_t params = 0;
  void tensor(const std::string& name, std::vector<uint64_t> shape, bool ones = false) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    params += n;
    if (shape.size() == 1) {  // norms: F32 ones
      std::vector<float> v(n, 1.0f);
      w.add_tensor(name, kernels::DType::F32, shape, {reinterpret_cast<const uint8_t*>(v.data()), n * 4});
      return;
    }
    std::vector<uint16_t> h(n);
    for (auto& x : h) x = kernels::fp32_to_fp16(ones ? 1.0f : uniform(0.05f));
    w.add_tensor(name, kernels::DType::F16, shape, {reinterpret_cast<const uint8_t*>(h.data()), n * 2});
  }
};

struct Common {
  std::string arch, vocab_path;
  uint64_t d, n_layer, ff, n_head, n_head_kv, n_expert, n_expert_used;
  uint32_t ctx;
  float rope_base;
};

// What every shape has: the vocabulary (copied), the shared hyperparameters,
// embeddings, output norm and output matrix.
void common(Model& m, const Common& c) {
  const std::string a = c.arch + ".";
  m.w.set("general.architecture", c.arch);
  m.w.set("general.name", "synthetic " + c.arch + " (random weights)");
  const auto v = gguf::File::open(c.vocab_path);
  for (const auto& [k, val] : v.metadata())
    if (k.rfind("tokenizer.", 0) == 0) m.w.set(k, val);
  const auto nv = uint64_t(v.get_array<std::string>("tokenizer.ggml.tokens").size());
  m.w.set(a + "context_length", c.ctx);
  m.w.set(a + "embedding_length", uint32_t(c.d));
  m.w.set(a + "block_count", uint32_t(c.n_layer));
  m.w.set(a + "feed_forward_length", uint32_t(c.ff));
  m.w.set(a + "attention.head_count", uint32_t(c.n_head));
  m.w.set(a + "attention.head_count_kv", uint32_t(c.n_head_kv));
  m.w.set(a + "rope.freq_base", c.rope_base);
  m.w.set(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  m.w.set(a + "expert_count", uint32_t(c.n_expert));
  m.w.set(a + "expert_used_count", uint32_t(c.n_expert_used));
  m.tensor("token_embd.weight", {c.d, nv});
  m.tensor("output_norm.weight", {c.d});
  m.tensor("output.weight", {c.d, nv});
}

// Layer b's norm and GQA projections: hq query and hkv key/value heads of hd.
void gqa_tensors(Model& m, const std::string& b, uint64_t d, uint64_t hq, uint64_t hkv, uint64_t hd) {
  m.tensor(b + "attn_norm.weight", {d});
  m.tensor(b + "attn_q.weight", {d, hq * hd});
  m.tensor(b + "attn_k.weight", {d, hkv * hd});
  m.tensor(b + "attn_v.weight", {d, hkv * hd});
  m.tensor(b + "attn_output.weight", {hq * hd, d});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Random-weight MoE models with real shapes, for benchmarks"};
  std::string shape, out, data = std::string(MOELSP_SOURCE_DIR) + "/tests/data/vocab";
  int layers = 0;
  app.add_option("--shape", shape, "qwen3moe-3b, qwen3moe-mid, deepseek2-3b, deepseek2-mid, glm-dsa or llama-1b")
      ->required();
  app.add_option("-o,--out", out, "Output GGUF")->required();
  app.add_option("--layers", layers,
                 "Layers (default: 4 for qwen3moe-3b, 20 for qwen3moe-mid, 5 for deepseek2-3b, 12 for deepseek2-mid, 2 "
                 "for glm-dsa, 22 for llama-1b)");
  bool dense = false;
  app.add_flag("--dense", dense, "glm-dsa: write it as deepseek2 without the indexer (dense attention)");
  CLI11_PARSE(app, argc, argv);
  try {
    Model m;
    const uint64_t d = 2048;
    // The "-mid" shapes are half the width with more layers: sizes whose whole
    // model is read per decode step in ~10 ms here, so a run of the four-shape
    // table takes minutes, and where llama.cpp's Q4_K_M recipe meets rows that
    // are not whole 256-blocks (deepseek2-mid's 704-wide experts fall back to
    // Q5_0, as DeepSeek-V2-Lite's 1408 do).
    if (shape == "qwen3moe-3b" || shape == "qwen3moe-mid") {
      const bool mid = shape == "qwen3moe-mid";
      const std::string a = "qwen3moe.";
      const uint64_t D = mid ? 1024 : d,
                     nl = layers > 0 ? uint64_t(layers)
                          : mid      ? 20
                                     : 4,
                     hq = mid ? 16 : 32, hkv = 4, hd = 128, ne = mid ? 64 : 128, ff = mid ? 512 : 768;
      common(m, {"qwen3moe", data + "/ggml-vocab-starcoder.gguf", D, nl, 6144, hq, hkv, ne, 8, 32768, 1e7f});
      m.w.set(a + "expert_feed_forward_length", uint32_t(ff));
      m.w.set(a + "attention.key_length", uint32_t(hd));
      m.w.set(a + "attention.value_length", uint32_t(hd));
      for (uint64_t il = 0; il < nl; ++il) {
        const std::string b = fmt::format("blk.{}.", il);
        gqa_tensors(m, b, D, hq, hkv, hd);
        m.tensor(b + "attn_q_norm.weight", {hd});
        m.tensor(b + "attn_k_norm.weight", {hd});
        m.tensor(b + "ffn_norm.weight", {D});
        m.tensor(b + "ffn_gate_inp.weight", {D, ne});
        m.tensor(b + "ffn_gate_exps.weight", {D, ff, ne});
        m.tensor(b + "ffn_up_exps.weight", {D, ff, ne});
        m.tensor(b + "ffn_down_exps.weight", {ff, D, ne});
      }
    } else if (shape == "deepseek2-3b" || shape == "deepseek2-mid") {
      const bool mid = shape == "deepseek2-mid";
      const std::string a = "deepseek2.";
      const uint64_t D = mid ? 1024 : d,
                     nl = layers > 0 ? uint64_t(layers)
                          : mid      ? 12
                                     : 5,
                     h = 16, lora = 512, nope = 128, rope = 64, vd = 128;
      // A low-rank query (DeepSeek-V2/V3's q_lora_rank): llama.cpp recognises
      // the Lite form (a plain attn_q) only by its layer count (26 or 27), so a
      // 5-layer file without it would not load in the peer.
      const uint64_t q_lora = mid ? 768 : 1536;
      const uint64_t ne = 64, ff = mid ? 704 : 1408, ff_dense = mid ? 2816 : 10944, shared = 2;
      // The split layout's cache is one MQA head of lora + rope: head_count_kv 1.
      common(m, {"deepseek2", data + "/ggml-vocab-deepseek-llm.gguf", D, nl, ff_dense, h, mid ? 1 : h, ne, 6, 163840,
                 10000.0f});
      m.w.set(a + "leading_dense_block_count", uint32_t(1));
      m.w.set(a + "attention.kv_lora_rank", uint32_t(lora));
      m.w.set(a + "attention.q_lora_rank", uint32_t(q_lora));
      if (mid) {  // today's converter's layout: attn_k_b/attn_v_b per head, MLA head sizes apart
        m.w.set(a + "attention.key_length", uint32_t(lora + rope));
        m.w.set(a + "attention.value_length", uint32_t(lora));
        m.w.set(a + "attention.key_length_mla", uint32_t(nope + rope));
        m.w.set(a + "attention.value_length_mla", uint32_t(vd));
      } else {  // the older single attn_kv_b
        m.w.set(a + "attention.key_length", uint32_t(nope + rope));
        m.w.set(a + "attention.value_length", uint32_t(vd));
      }
      m.w.set(a + "expert_feed_forward_length", uint32_t(ff));
      m.w.set(a + "expert_shared_count", uint32_t(shared));
      m.w.set(a + "expert_weights_scale", 1.0f);
      // mid: V3's router (sigmoid scores, a selection bias, 8 groups of which 4 stay).
      m.w.set(a + "expert_gating_func", uint32_t(mid ? 2 : 1));
      if (mid) {
        m.w.set(a + "expert_group_count", uint32_t(8));
        m.w.set(a + "expert_group_used_count", uint32_t(4));
        m.w.set(a + "expert_weights_norm", true);
      }
      m.w.set(a + "rope.dimension_count", uint32_t(rope));
      for (uint64_t il = 0; il < nl; ++il) {
        const std::string b = fmt::format("blk.{}.", il);
        m.tensor(b + "attn_norm.weight", {D});
        m.tensor(b + "attn_q_a.weight", {D, q_lora});
        m.tensor(b + "attn_q_a_norm.weight", {q_lora});
        m.tensor(b + "attn_q_b.weight", {q_lora, h * (nope + rope)});
        m.tensor(b + "attn_kv_a_mqa.weight", {D, lora + rope});
        m.tensor(b + "attn_kv_a_norm.weight", {lora});
        if (mid) {
          m.tensor(b + "attn_k_b.weight", {nope, lora, h});
          m.tensor(b + "attn_v_b.weight", {lora, vd, h});
        } else {
          m.tensor(b + "attn_kv_b.weight", {lora, h * (nope + vd)});
        }
        m.tensor(b + "attn_output.weight", {h * vd, D});
        m.tensor(b + "ffn_norm.weight", {D});
        if (il == 0) {
          m.tensor(b + "ffn_gate.weight", {D, ff_dense});
          m.tensor(b + "ffn_up.weight", {D, ff_dense});
          m.tensor(b + "ffn_down.weight", {ff_dense, D});
        } else {
          m.tensor(b + "ffn_gate_inp.weight", {D, ne});
          if (mid) m.tensor(b + "exp_probs_b.bias", {ne});
          m.tensor(b + "ffn_gate_exps.weight", {D, ff, ne});
          m.tensor(b + "ffn_up_exps.weight", {D, ff, ne});
          m.tensor(b + "ffn_down_exps.weight", {ff, D, ne});
          m.tensor(b + "ffn_gate_shexp.weight", {D, ff * shared});
          m.tensor(b + "ffn_up_shexp.weight", {D, ff * shared});
          m.tensor(b + "ffn_down_shexp.weight", {ff * shared, D});
        }
      }
    } else if (shape == "glm-dsa") {
      const std::string arch = dense ? "deepseek2" : "glm-dsa", a = arch + ".";
      const uint64_t D = 6144, nl = layers > 0 ? uint64_t(layers) : 2, h = 64, q_lora = 2048, lora = 512, nope = 192,
                     rope = 64, vd = 256, ih = 32, id = 128, ne = 4, ff = 512;
      common(m, {arch, data + "/ggml-vocab-deepseek-coder.gguf", D, nl, ff, h, 1, ne, 2, 202752, 1e6f});
      m.w.set(a + "leading_dense_block_count", uint32_t(0));
      m.w.set(a + "attention.q_lora_rank", uint32_t(q_lora));
      m.w.set(a + "attention.kv_lora_rank", uint32_t(lora));
      m.w.set(a + "attention.key_length", uint32_t(lora + rope));
      m.w.set(a + "attention.value_length", uint32_t(lora));
      m.w.set(a + "attention.key_length_mla", uint32_t(nope + rope));
      m.w.set(a + "attention.value_length_mla", uint32_t(vd));
      m.w.set(a + "rope.dimension_count", uint32_t(rope));
      m.w.set(a + "expert_feed_forward_length", uint32_t(ff));
      m.w.set(a + "expert_shared_count", uint32_t(1));
      m.w.set(a + "expert_gating_func", uint32_t(2));
      m.w.set(a + "expert_weights_norm", true);
      m.w.set(a + "expert_weights_scale", 2.5f);
      if (!dense) {
        m.w.set(a + "attention.indexer.head_count", uint32_t(ih));
        m.w.set(a + "attention.indexer.key_length", uint32_t(id));
        m.w.set(a + "attention.indexer.top_k", uint32_t(2048));
        gguf::Array types{gguf::ValueType::BOOL, {}};
        for (uint64_t il = 0; il < nl; ++il) types.items.emplace_back(il == 0);
        m.w.set(a + "attention.indexer.types", types);
      }
      for (uint64_t il = 0; il < nl; ++il) {
        const std::string b = fmt::format("blk.{}.", il);
        m.tensor(b + "attn_norm.weight", {D});
        m.tensor(b + "attn_q_a.weight", {D, q_lora});
        m.tensor(b + "attn_q_a_norm.weight", {q_lora});
        m.tensor(b + "attn_q_b.weight", {q_lora, h * (nope + rope)});
        m.tensor(b + "attn_kv_a_mqa.weight", {D, lora + rope});
        m.tensor(b + "attn_kv_a_norm.weight", {lora});
        m.tensor(b + "attn_k_b.weight", {nope, lora, h});
        m.tensor(b + "attn_v_b.weight", {lora, vd, h});
        m.tensor(b + "attn_output.weight", {h * vd, D});
        if (!dense && il == 0) {
          // Drawn from a side stream, so every other tensor gets the same
          // values in the --dense file.
          const uint64_t saved = g_state;
          m.tensor(b + "indexer.k_norm.weight", {id});
          m.tensor(b + "indexer.k_norm.bias", {id});
          m.tensor(b + "indexer.proj.weight", {D, ih});
          m.tensor(b + "indexer.attn_k.weight", {D, id});
          m.tensor(b + "indexer.attn_q_b.weight", {q_lora, ih * id});
          g_state = saved;
        }
        m.tensor(b + "ffn_norm.weight", {D});
        m.tensor(b + "ffn_gate_inp.weight", {D, ne});
        m.tensor(b + "exp_probs_b.bias", {ne});
        m.tensor(b + "ffn_gate_exps.weight", {D, ff, ne});
        m.tensor(b + "ffn_up_exps.weight", {D, ff, ne});
        m.tensor(b + "ffn_down_exps.weight", {ff, D, ne});
        m.tensor(b + "ffn_gate_shexp.weight", {D, ff});
        m.tensor(b + "ffn_up_shexp.weight", {D, ff});
        m.tensor(b + "ffn_down_shexp.weight", {ff, D});
      }
    } else if (shape == "llama-1b") {
      const uint64_t D = 2048, nl = layers > 0 ? uint64_t(layers) : 22, hq = 32, hkv = 4, hd = 64, ff = 5632;
      common(m, {"llama", data + "/ggml-vocab-llama-spm.gguf", D, nl, ff, hq, hkv, 0, 0, 2048, 10000.0f});
      m.w.set("llama.rope.dimension_count", uint32_t(hd));
      for (uint64_t il = 0; il < nl; ++il) {
        const std::string b = fmt::format("blk.{}.", il);
        gqa_tensors(m, b, D, hq, hkv, hd);
        m.tensor(b + "ffn_norm.weight", {D});
        m.tensor(b + "ffn_gate.weight", {D, ff});
        m.tensor(b + "ffn_up.weight", {D, ff});
        m.tensor(b + "ffn_down.weight", {ff, D});
      }
    } else {
      std::fprintf(stderr,
                   "unknown shape '%s' (qwen3moe-3b, qwen3moe-mid, deepseek2-3b, deepseek2-mid, glm-dsa, "
                   "llama-1b)\n",
                   shape.c_str());
      return 2;
    }
    m.w.write(out);
    std::printf("%s: %.2f B parameters\n", out.c_str(), double(m.params) / 1e9);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp_make_synthetic_model: %s\n", e.what());
    return 1;
  }
}
