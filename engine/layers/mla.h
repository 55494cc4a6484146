// Multi-head latent attention (MLA: DeepSeek-V2/V3, GLM-4.7-Flash, GLM-5).
//
// Keys and values are compressed to a latent c (kv_lora_rank) plus one shared
// RoPE key k_pe (qk_rope); the paged cache holds only [c | k_pe] per token and
// layer. Attention runs in one of three forms:
//  - plain: expand every cached latent into per-head keys and values, then
//    ordinary attention (a long prompt from scratch);
//  - absorbed: fold the expansions into the new queries and the output, then
//    multi-query attention over the cached rows themselves (decode, and a few
//    new tokens after a long reused prefix);
//  - sparse (DeepSeek Sparse Attention, glm-dsa): absorbed, over only the keys
//    an indexer kept for each query, so its cost grows with the number kept,
//    not with the context.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "layers.h"

namespace moelsp::layers {

struct MlaWeights {
  std::vector<float> q_a_norm, kv_a_norm;
  Weight wq, wq_a, wq_b, wkv_a, wo;
  // Per head, each as rows the matmul kernels take (W·x):
  //   k_up [qk_nope][kv_lora]: latent → k_nope (plain form's expansion);
  //   k_absorb [kv_lora][qk_nope]: q_nope → q_lat (absorbed queries), empty
  //     for attn_kv_b files (their decode folds one token at a time instead,
  //     through k_up);
  //   v_up [v][kv_lora]: o_lat → o.
  // attn_k_b stores only k_absorb's orientation; k_up is then a transposed
  // copy made at load (k_up_store: Q8_0 for a quantized file, else the
  // file's F16/F32), so a prompt expands all its positions in one matmul per
  // head instead of one transposed product per position.
  std::vector<kernels::MatView> k_up, k_absorb, v_up;
  std::shared_ptr<const std::vector<uint8_t>> k_up_store;  // [n_head][qk_nope] rows of [kv_lora] (k_up's bytes)
  std::shared_ptr<const void> k_absorb_store, v_up_store;  // their bytes when repacked (repack_dense)
};
MlaWeights load_mla(const WeightLoader& wl, const ModelConfig& c, int il);

// One layer's projections for the n tokens of a batch.
struct MlaQkv {
  std::vector<float> qa;  // [n][q_lora]: the normed q latent (empty without q_lora)
  std::vector<float> q;   // [n][n_head·(nope + rope)], RoPE applied to each head's rope part
};
// Computes q (and qa), and writes each token's [norm(latent) | rope(k_pe)]
// into its sequence's cache row of layer il (the first lora + rope elements).
MlaQkv mla_qkv(ThreadPool& pool, const ModelConfig& c, const MlaWeights& w, std::span<const SeqSpan> seqs, int il,
               const float* h, int n);

// o [sp.n][n_head·v] for one sequence's queries q [sp.n][n_head·(nope + rope)]
// over all of its causal keys, in whichever of plain and absorbed costs fewer
// multiply-adds.
void mla_dense(ThreadPool& pool, const ModelConfig& c, const MlaWeights& w, int il, const SeqSpan& sp, const float* q,
               float* o);

// The same, absorbed, over only the keys kept for each query: query t reads
// the positions kept[t·k_max .. t·k_max + n_kept[t]).
struct KeptKeys {
  const int32_t* kept = nullptr;  // [n][k_max] positions, ascending
  const int32_t* n_kept = nullptr;
  int k_max = 0;
};
void mla_sparse(ThreadPool& pool, const ModelConfig& c, const MlaWeights& w, int il, const SeqSpan& sp, const float* q,
                const KeptKeys& keys, float* o);

// The whole dense layer: mla_qkv, mla_dense per sequence, then the output
// projection. h [n][n_embd] → out [n][n_embd].
void mla_attention(ThreadPool& pool, const ModelConfig& c, const MlaWeights& w, std::span<const SeqSpan> seqs, int il,
                   const float* h, int n, float* out);

}  // namespace moelsp::layers
