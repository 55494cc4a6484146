#include "engine/model.h"

#include <cmath>
#include <fmt/format.h>

#include "../arch/arch.h"
#include "../cpu/thread_pool.h"
#include "engine/gguf.h"

namespace moelsp {

KvCache::KvCache(int n_layer, int n_ctx, int k_dim, int v_dim)
    : n_ctx_(n_ctx), k_dim_(k_dim), v_dim_(v_dim), k_(static_cast<size_t>(n_layer)), v_(size_t(n_layer)) {
  for (auto& k : k_) k.assign(size_t(n_ctx) * size_t(k_dim), 0.0f);
  for (auto& v : v_) v.assign(size_t(n_ctx) * size_t(v_dim), 0.0f);
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (const auto& k : k_) b += k.size() * sizeof(float);
  for (const auto& v : v_) b += v.size() * sizeof(float);
  return b;
}

Model::Model(std::unique_ptr<gguf::File> file, const LoadOptions& opt) : file_(std::move(file)) {
  try {
    tokenizer_ = Tokenizer::from_gguf(*file_);
  } catch (const TokenizerError& e) {
    throw ModelError(e.what());
  }
  arch::read_common_config(*file_, cfg_);
  pool_ = std::make_unique<ThreadPool>(opt.threads > 0 ? opt.threads : physical_cores());
  reset_moe_stats();
}

Model::~Model() = default;

int Model::threads() const { return pool_->size(); }

void Model::reset_moe_stats() { moe_stats_.assign(size_t(cfg_.n_layer), MoeLayerStats{}); }

std::unique_ptr<KvCache> Model::new_cache(int n_ctx) const {
  if (n_ctx <= 0) throw ModelError("context size must be positive");
  return std::make_unique<KvCache>(cfg_.n_layer, n_ctx, kv_k_dim(), kv_v_dim());
}

void Model::forward(std::span<const TokenId> tokens, KvCache& cache, float* logits, bool all_logits,
                    const CancelCheck& cancel) {
  if (tokens.empty()) return;
  for (TokenId t : tokens)
    if (t < 0 || t >= cfg_.n_vocab)
      throw ModelError(fmt::format("token id {} is outside the vocabulary (0..{})", t, cfg_.n_vocab - 1));
  if (cache.n_past() + int(tokens.size()) > cache.n_ctx())
    throw ModelError(fmt::format("context full: {} cached + {} new tokens exceed the context of {}",
                                 cache.n_past(), tokens.size(), cache.n_ctx()));
  const int before = cache.n_past();
  try {
    forward_impl(tokens, cache, logits, all_logits, cancel);
  } catch (...) {
    cache.set_n_past(before);
    throw;
  }
  cache.set_n_past(before + int(tokens.size()));
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opt) {
  std::unique_ptr<gguf::File> f;
  try {
    f = std::make_unique<gguf::File>(gguf::File::open(path));
  } catch (const gguf::GgufError& e) {
    throw ModelError(e.what());
  }
  const std::string arch = f->get_or<std::string>("general.architecture", "");
  if (arch == "llama") return arch::make_llama(std::move(f), opt);
  if (arch == "qwen3moe") return arch::make_qwen3moe(std::move(f), opt);
  if (arch == "deepseek2") return arch::make_deepseek2(std::move(f), opt);
  if (arch.empty()) throw ModelError(fmt::format("{}: no general.architecture key", path));
  throw ModelError(fmt::format("{}: architecture '{}' is not supported (supported: deepseek2, qwen3moe, llama)",
                               path, arch));
}

namespace arch {

void read_common_config(const gguf::File& f, ModelConfig& c) {
  c.arch = f.get_or<std::string>("general.architecture", "");
  c.name = f.get_or<std::string>("general.name", "");
  const std::string& a = c.arch;
  c.n_embd = int(req<uint32_t>(f, a, "embedding_length"));
  c.n_layer = int(req<uint32_t>(f, a, "block_count"));
  c.n_head = int(req<uint32_t>(f, a, "attention.head_count"));
  c.n_head_kv = int(opt<uint32_t>(f, a, "attention.head_count_kv", uint32_t(c.n_head)));
  c.n_ctx_train = int(opt<uint32_t>(f, a, "context_length", 4096));
  c.rms_eps = req<float>(f, a, "attention.layer_norm_rms_epsilon");
  c.n_vocab = int(opt<uint32_t>(f, a, "vocab_size", 0));
  if (c.n_vocab == 0) c.n_vocab = int(f.get_array<std::string>("tokenizer.ggml.tokens").size());
  c.head_dim_k = int(opt<uint32_t>(f, a, "attention.key_length", uint32_t(c.n_embd / std::max(1, c.n_head))));
  c.head_dim_v = int(opt<uint32_t>(f, a, "attention.value_length", uint32_t(c.head_dim_k)));
  c.n_ff = int(opt<uint32_t>(f, a, "feed_forward_length", 0));
  c.n_expert = int(opt<uint32_t>(f, a, "expert_count", 0));
  c.n_expert_used = int(opt<uint32_t>(f, a, "expert_used_count", 0));
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv)
    throw ModelError(fmt::format("{}: inconsistent attention shape (embd {}, heads {}, kv heads {})", f.path(),
                                 c.n_embd, c.n_head, c.n_head_kv));
  if (c.n_expert > 0 && (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert))
    throw ModelError(fmt::format("{}: expert_used_count {} with expert_count {}", f.path(), c.n_expert_used,
                                 c.n_expert));

  RopeConfig& r = c.rope;
  r.n_dims = int(opt<uint32_t>(f, a, "rope.dimension_count", uint32_t(c.head_dim_k)));
  r.freq_base = opt<float>(f, a, "rope.freq_base", 10000.0f);
  const std::string scaling = opt<std::string>(f, a, "rope.scaling.type", "none");
  const float factor = opt<float>(f, a, "rope.scaling.factor", 0.0f);
  if (scaling == "linear" && factor > 0) {
    r.freq_scale = 1.0f / factor;
  } else if (scaling == "yarn" && factor > 0) {
    r.yarn = true;
    r.freq_scale = 1.0f / factor;
    r.ext_factor = 1.0f;
    r.n_ctx_orig = int(opt<uint32_t>(f, a, "rope.scaling.original_context_length", uint32_t(c.n_ctx_train)));
    r.beta_fast = opt<float>(f, a, "rope.scaling.yarn_beta_fast", 32.0f);
    r.beta_slow = opt<float>(f, a, "rope.scaling.yarn_beta_slow", 1.0f);
    // cos/sin get attn_factor · (1 + 0.1·ln factor), YaRN's magnitude correction;
    // deepseek2 moves that correction into its attention scale instead.
    r.attn_factor = opt<float>(f, a, "rope.scaling.attn_factor", 1.0f);
    layers::rope_yarn_init(r);
  } else if (scaling != "none" && scaling != "yarn" && scaling != "linear") {
    throw ModelError(fmt::format("{}: rope scaling '{}' is not supported", f.path(), scaling));
  }
  c.kq_scale = 1.0f / std::sqrt(float(c.head_dim_k));
}

void Embeddings::load(const WeightLoader& wl, const ModelConfig& c) {
  token_embd = wl.get("token_embd.weight", {c.n_embd, c.n_vocab});
  output_norm = wl.vec("output_norm.weight", c.n_embd);
  output = wl.maybe("output.weight", {c.n_embd, c.n_vocab});
  if (!output.present()) output = token_embd;  // tied embeddings
}

void Embeddings::embed(std::span<const TokenId> tokens, int n_embd, float* x) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    kernels::dequantize_row(token_embd.m.type, token_embd.m.row(tokens[i]), x + i * size_t(n_embd), n_embd);
}

void Embeddings::logits(ThreadPool& pool, const ModelConfig& c, float* x, int64_t n_tokens, bool all,
                        float* out) const {
  const int64_t first = all ? 0 : n_tokens - 1;
  float* rows = x + first * c.n_embd;
  const int64_t n = n_tokens - first;
  layers::rms_norm(rows, output_norm.data(), c.n_embd, c.rms_eps, rows, n);
  layers::linear(pool, output.m, rows, n, out);
}

}  // namespace arch
}  // namespace moelsp
