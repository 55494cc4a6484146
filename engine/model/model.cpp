#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "../arch/arch.h"
#include "../arch/decoder.h"
#include "../cpu/thread_pool.h"
#include "../device/device_forward.h"
#include "engine/gguf.h"
#include "experts.h"
#include "kernels/hd_route.h"
#include "kernels/matmul.h"
#include "kernels/types.h"

namespace moelsp {

void Batch::add(KvSequence& seq, std::span<const TokenId> toks, bool all_logits) {
  tokens.insert(tokens.end(), toks.begin(), toks.end());
  seqs.push_back({&seq, int(toks.size()), all_logits});
}

int Batch::logit_rows() const {
  int n = 0;
  for (const auto& s : seqs) n += s.all_logits ? s.n_tokens : 1;
  return n;
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
  // The file's identity, whatever its path (a copy or a link shares the
  // prompt cache on disk): size, every tensor's name, type and place, the
  // first 4 KiB of the first and last tensors and 64 bytes from the start and
  // middle of every tensor, so a file re-quantized or rewritten in place
  // changes it; kKvSemantics changes when what the forward pass writes into
  // the KV cache changes meaning, so stored rows of an older build are not used.
  constexpr uint64_t kKvSemantics = 1;
  uint64_t h = 0xcbf29ce484222325ull ^ kKvSemantics;
  const auto add = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); };
  const auto add_bytes = [&](std::span<const uint8_t> d, size_t at, size_t n) {
    for (size_t i = at; i < std::min(d.size(), at + n); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, d.data() + i, std::min<size_t>(8, d.size() - i));
      add(w);
    }
  };
  add(file_->file_size());
  add(file_->data_offset());
  add(file_->tensors().size());
  for (const auto& t : file_->tensors()) {
    add(std::hash<std::string>{}(t.name));
    add(uint64_t(t.type) << 48 ^ t.offset);
    const auto d = file_->tensor_data(t);
    add_bytes(d, 0, 64);
    add_bytes(d, d.size() / 2, 64);
  }
  for (const auto* t : {&file_->tensors().front(), &file_->tensors().back()})
    add_bytes(file_->tensor_data(*t), 0, 4096);
  fingerprint_ = h;
}

Model::~Model() = default;

const char* to_string(ComputeBackend b) {
  switch (b) {
    case ComputeBackend::Cpu: return "cpu";
    case ComputeBackend::Cuda: return "cuda";
    case ComputeBackend::Emulated: return "emulated";
  }
  return "?";
}

std::string Model::device_unsupported() const { return device::unsupported(cfg_, *file_); }

void Model::attach_device(const LoadOptions& opt) {
  if (opt.backend == ComputeBackend::Cpu) {
    device_.reset();
    backend_ = ComputeBackend::Cpu;
    return;
  }
  std::shared_ptr<kernels::gpu::Device> dev;
  if (opt.backend == ComputeBackend::Emulated) {
    dev = kernels::gpu::make_emulated_device();
  } else {
    std::string why;
    dev = kernels::gpu::make_cuda_device(opt.gpu, &why);
    if (!dev) throw ModelError(fmt::format("{}: CUDA device {} unavailable: {}", file_->path(), opt.gpu, why));
  }
  device_ = std::make_unique<device::DeviceForward>(dev, cfg_, *file_, *pool_,
                                                    device::Placement{.experts_per_layer = opt.gpu_experts_per_layer});
  backend_ = opt.backend;
}

ComputeBackend Model::backend() const { return backend_; }
std::string Model::device_description() const { return device_ ? device_->describe() : ""; }
int Model::device_experts_per_layer() const { return device_ ? device_->experts_per_layer() : 0; }

int Model::threads() const { return pool_->size(); }

void Model::reset_moe_stats() { moe_stats_.assign(size_t(cfg_.n_layer), MoeLayerStats{}); }

void Model::init_experts(std::vector<ExpertLayer> layers) {
  if (std::none_of(layers.begin(), layers.end(), [](const ExpertLayer& l) { return l.moe; })) return;
  const uint8_t *lo = nullptr, *hi = nullptr;
  for (const auto& t : file_->tensors()) {
    const auto d = file_->tensor_data(t);
    if (!lo || d.data() < lo) lo = d.data();
    if (!hi || d.data() + d.size() > hi) hi = d.data() + d.size();
  }
  experts_ = std::make_unique<ExpertRuntime>(cfg_, std::move(layers), lo, hi);
}

void Model::configure_experts(const ExpertOptions& o) {
  if (experts_) experts_->configure(o);
}

const ExpertOptions& Model::expert_options() const {
  static const ExpertOptions none;
  return experts_ ? experts_->options() : none;
}

ExpertMetrics Model::expert_metrics() const {
  if (device_) return device_->metrics();
  return experts_ ? experts_->metrics() : ExpertMetrics{};
}

void Model::reset_expert_metrics() {
  if (device_) device_->reset_metrics();
  if (experts_) experts_->reset_metrics();
}

KvLayout Model::kv_layout(KvType type, int block_size) const {
  KvLayout L;
  L.n_layer = cfg_.n_layer;
  L.k_dim = kv_k_dim();
  L.v_dim = kv_v_dim();
  L.block_size = block_size;
  L.type = type;
  if (block_size <= 0 || block_size > 4096)
    throw ModelError(fmt::format("KV block size {} out of range (1..4096)", block_size));
  // Attention reads one kv head's slice of a row: with Q8_0 every slice must
  // start and end on a 32-value block (MLA: whole rows as keys, the latent as values).
  if (type == KvType::Q8_0) {
    if (L.v_dim == 0 && (cfg_.kv_lora_rank % 32 || L.k_dim % 32))
      throw ModelError(
          fmt::format("a q8_0 KV cache needs the MLA latent and latent + rope key to be multiples of 32 "
                      "values (this model: {} and {})",
                      cfg_.kv_lora_rank, L.k_dim));
    if (L.v_dim > 0 && (cfg_.head_dim_k % 32 || cfg_.head_dim_v % 32))
      throw ModelError(fmt::format("a q8_0 KV cache needs head sizes that are multiples of 32 (this model: k {}, v {})",
                                   cfg_.head_dim_k, cfg_.head_dim_v));
  }
  return L;
}

std::unique_ptr<KvCache> Model::new_cache(int n_ctx, KvType type) const {
  if (n_ctx <= 0) throw ModelError("context size must be positive");
  return std::make_unique<KvCache>(kv_layout(type), n_ctx);
}

void Model::forward(std::span<const TokenId> tokens, KvCache& cache, float* logits, bool all_logits,
                    const CancelCheck& cancel) {
  if (tokens.empty()) return;
  if (cache.n_past() + int(tokens.size()) > cache.n_ctx())
    throw ModelError(fmt::format("context full: {} cached + {} new tokens exceed the context of {}", cache.n_past(),
                                 tokens.size(), cache.n_ctx()));
  if (!cache.seq().reserve(int(tokens.size()))) throw ModelError("KV cache has no free blocks");
  Batch b;
  b.add(cache.seq(), tokens, all_logits);
  forward(b, logits, cancel);
}

void Model::forward(const Batch& batch, float* logits, const CancelCheck& cancel) {
  if (batch.tokens.empty()) return;
  for (TokenId t : batch.tokens)
    if (t < 0 || t >= cfg_.n_vocab)
      throw ModelError(fmt::format("token id {} is outside the vocabulary (0..{})", t, cfg_.n_vocab - 1));
  size_t total = 0;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const BatchSeq& s = batch.seqs[i];
    if (!s.seq || s.n_tokens <= 0) throw ModelError("batch entry without a sequence or tokens");
    if (s.seq->n_past() + s.n_tokens > s.seq->capacity())
      throw ModelError(fmt::format("KV blocks not reserved: {} cached + {} new tokens, room for {}", s.seq->n_past(),
                                   s.n_tokens, s.seq->capacity()));
    for (size_t j = 0; j < i; ++j)
      if (batch.seqs[j].seq == s.seq) throw ModelError("a sequence appears twice in one batch");
    total += size_t(s.n_tokens);
  }
  if (total != batch.tokens.size()) throw ModelError("batch token count does not match its sequences");
  if (experts_) experts_->begin_forward();
  try {
    if (device_) device_->forward(batch, logits, cancel, moe_stats_);
    else forward_impl(batch, logits, cancel);
  } catch (...) {
    if (experts_) experts_->end_forward();
    throw;
  }
  if (experts_) experts_->end_forward();
  size_t at = 0;
  for (const BatchSeq& s : batch.seqs) {
    s.seq->commit(std::span(batch.tokens).subspan(at, size_t(s.n_tokens)));
    at += size_t(s.n_tokens);
  }
}

namespace {

// NaN or Inf in a norm, the embeddings or the output matrix turns every
// logit into NaN, and greedy decoding then prints token 0 forever. Norms are
// checked whole (one row each); the two vocabulary-sized matrices on 64 rows
// spread over them plus the first and last (a few hundred µs for any size).
void check_finite(const gguf::File& f) {
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    const bool norm = t.name.ends_with("norm.weight");
    const bool vocab = t.name == "token_embd.weight" || t.name == "output.weight";
    if ((!norm && !vocab) || t.shape.empty()) continue;
    const int64_t cols = int64_t(t.shape[0]), rows = int64_t(t.n_elements) / std::max<int64_t>(1, cols);
    const auto row_bytes = kernels::row_bytes(t.type, t.shape[0]);
    if (!row_bytes || rows <= 0) continue;  // the architecture file reports what it cannot read
    const auto data = f.tensor_data(t);
    row.resize(size_t(cols));
    const int64_t step = norm ? 1 : std::max<int64_t>(1, rows / 64);
    for (int64_t r = 0; r < rows; r = (r + step < rows || r == rows - 1) ? r + step : rows - 1) {
      kernels::dequantize_row(t.type, data.data() + size_t(r) * *row_bytes, row.data(), cols);
      for (int64_t c = 0; c < cols; ++c)
        if (!std::isfinite(row[size_t(c)]))
          throw ModelError(
              fmt::format("{}: tensor '{}' holds NaN or Inf (row {}, column {}): the file is damaged or "
                          "was converted wrongly",
                          f.path(), t.name, r, c));
      if (r == rows - 1) break;
    }
  }
}

}  // namespace

double MoeLayerStats::entropy() const {
  double total = 0, h = 0;
  for (auto t : expert_tokens) total += double(t);
  if (total <= 0 || expert_tokens.size() < 2) return 0;
  for (auto t : expert_tokens)
    if (t > 0) h -= double(t) / total * std::log(double(t) / total);
  return h / std::log(double(expert_tokens.size()));
}

double MoeLayerStats::thread_imbalance() const {
  return thread_load_max > 0 ? (thread_load_max - thread_load_min) / thread_load_max : 0;
}

namespace arch {

const ArchEntry* find_architecture(std::string_view name) {
  for (const ArchEntry& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

const ArchFacts* facts_of(std::string_view name) {
  const ArchEntry* a = find_architecture(name);
  return a ? a->facts : nullptr;
}

std::string architecture_names() {
  std::string s;
  for (const ArchEntry& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace arch

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opt) {
  std::unique_ptr<gguf::File> f;
  try {
    f = std::make_unique<gguf::File>(gguf::File::open(path));
  } catch (const gguf::GgufError& e) {
    throw ModelError(e.what());
  }
  const std::string arch = f->get_or<std::string>("general.architecture", "");
  if (arch.empty()) throw ModelError(fmt::format("{}: no general.architecture key", path));
  const arch::ArchEntry* entry = arch::find_architecture(arch);
  if (!entry)
    throw ModelError(
        fmt::format("{}: architecture '{}' is not supported (supported: {})", path, arch, arch::architecture_names()));
  check_finite(*f);
  try {
    std::unique_ptr<Model> m = entry->make(std::move(f), opt);
    if (opt.backend != ComputeBackend::Cpu) m->attach_device(opt);
    return m;
  } catch (const std::bad_alloc&) {
    // Absurd sizes in the metadata (block_count 2^31 - 1) end here rather than in the allocator's words.
    throw ModelError(
        fmt::format("{}: its hyperparameters ask for more memory than exists (check block_count, "
                    "embedding_length, expert_count and the vocabulary size)",
                    path));
  }
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
    throw ModelError(
        fmt::format("{}: expert_used_count {} with expert_count {}", f.path(), c.n_expert_used, c.n_expert));

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

void DecoderLayer::load_norms(const WeightLoader& wl, const ModelConfig& c, int il) {
  const std::string b = fmt::format("blk.{}.", il);
  attn_norm = wl.vec(b + "attn_norm.weight", c.n_embd);
  ffn_norm = wl.vec(b + c.ffn_norm + ".weight", c.n_embd);
}

void read_mla_config(const gguf::File& f, ModelConfig& c) {
  const std::string& a = c.arch;
  c.q_lora_rank = int(opt<uint32_t>(f, a, "attention.q_lora_rank", 0));
  c.kv_lora_rank = int(req<uint32_t>(f, a, "attention.kv_lora_rank"));
  c.head_dim_k = int(opt<uint32_t>(f, a, "attention.key_length_mla", uint32_t(c.head_dim_k)));
  c.head_dim_v = int(opt<uint32_t>(f, a, "attention.value_length_mla", uint32_t(c.head_dim_v)));
  c.qk_rope = c.rope.n_dims;
  c.qk_nope = c.head_dim_k - c.qk_rope;
  c.n_head_kv = c.n_head;  // after expansion every head has its own k and v
  if (c.qk_nope <= 0 || c.kv_lora_rank <= 0)
    throw ModelError(fmt::format("{}: {}.attention.key_length_mla {} ≤ rope dims {} (or kv_lora_rank {})", f.path(), a,
                                 c.head_dim_k, c.qk_rope, c.kv_lora_rank));
  c.rope.type = RopeType::Norm;

  // YaRN: the magnitude correction goes into the attention scale (mscale²),
  // not into cos/sin (llama.cpp: TAG_DEEPSEEK2_YARN_LOG_MUL_FIX).
  float mscale = 1.0f;
  if (c.rope.yarn) {
    const float ln_factor = std::log(1.0f / c.rope.freq_scale);
    const float log_mul = opt<float>(f, a, "rope.scaling.yarn_log_multiplier", 0.0f);
    mscale = c.rope.attn_factor * (1.0f + log_mul * ln_factor);
    c.rope.attn_factor /= 1.0f + 0.1f * ln_factor;
  }
  c.kq_scale = mscale * mscale / std::sqrt(float(c.head_dim_k));
}

void read_moe_config(const gguf::File& f, ModelConfig& c, Gating when_unset) {
  const std::string& a = c.arch;
  c.n_layer_dense_lead = int(opt<uint32_t>(f, a, "leading_dense_block_count", 0));
  c.n_ff_exp = int(req<uint32_t>(f, a, "expert_feed_forward_length"));
  c.n_expert_shared = int(opt<uint32_t>(f, a, "expert_shared_count", 0));
  c.expert_weights_norm = opt<bool>(f, a, "expert_weights_norm", false);
  c.expert_weights_scale = opt<float>(f, a, "expert_weights_scale", 0.0f);
  const uint32_t gating = opt<uint32_t>(f, a, "expert_gating_func", 0);  // 0: none given
  if (gating > 2)
    throw ModelError(fmt::format("{}: unknown {}.expert_gating_func {} (1 softmax, 2 sigmoid)", f.path(), a, gating));
  c.gating = gating == 0 ? when_unset : gating == 2 ? Gating::Sigmoid : Gating::Softmax;
  c.n_group = int(opt<uint32_t>(f, a, "expert_group_count", 1));
  c.n_group_used = int(opt<uint32_t>(f, a, "expert_group_used_count", uint32_t(c.n_group)));
  if (c.n_expert <= 0) throw ModelError(fmt::format("{}: {} without {}.expert_count", f.path(), a, a));
  if (c.n_expert > kernels::hd::kMaxExperts)
    throw ModelError(fmt::format("{}: {} experts per layer; moelsp routes at most {} ({}.expert_count)", f.path(),
                                 c.n_expert, kernels::hd::kMaxExperts, a));
  if (c.n_group < 1 || c.n_group > kernels::hd::kMaxGroups || c.n_expert % c.n_group || c.n_group_used < 1 ||
      c.n_group_used > c.n_group)
    throw ModelError(fmt::format("{}: {} experts cannot form {} groups ({} used) ({}.expert_group_count)", f.path(),
                                 c.n_expert, c.n_group, c.n_group_used, a));
}

void DecoderLayer::load_ffn(const WeightLoader& wl, const ModelConfig& c, int il) {
  if (c.is_moe_layer(il)) {
    moe = layers::load_moe(wl, c, il);
    return;
  }
  const std::string b = fmt::format("blk.{}.", il);
  gate = wl.get(b + "ffn_gate.weight", {c.n_embd, c.n_ff});
  up = wl.get(b + "ffn_up.weight", {c.n_embd, c.n_ff});
  down = wl.get(b + "ffn_down.weight", {c.n_ff, c.n_embd});
  for (Weight* x : {&gate, &up, &down}) repack_dense(*x);
}

void Embeddings::load(const WeightLoader& wl, const ModelConfig& c) {
  token_embd = wl.get("token_embd.weight", {c.n_embd, c.n_vocab});
  output_norm = wl.vec("output_norm.weight", c.n_embd);
  output = wl.maybe("output.weight", {c.n_embd, c.n_vocab});
  // Tied embeddings: the head is a repacked copy, the embeddings keep the file's rows.
  const bool tied = !output.present();
  if (tied) output = token_embd;
  repack_dense(output, !tied);
}

void Embeddings::embed(std::span<const TokenId> tokens, int n_embd, float* x) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    kernels::dequantize_row(token_embd.m.type, token_embd.m.row(tokens[i]), x + i * size_t(n_embd), n_embd);
}

void Embeddings::logits(ThreadPool& pool, const ModelConfig& c, float* x, const Batch& batch, float* out) const {
  // The rows wanted, moved to the front of x (in order, so never overwritten before read).
  int64_t n = 0, at = 0;
  for (const BatchSeq& s : batch.seqs) {
    const int64_t first = s.all_logits ? at : at + s.n_tokens - 1;
    for (int64_t t = first; t < at + s.n_tokens; ++t, ++n)
      if (t != n) std::copy_n(x + t * c.n_embd, c.n_embd, x + n * c.n_embd);
    at += s.n_tokens;
  }
  layers::rms_norm(x, output_norm.data(), c.n_embd, c.rms_eps, x, n);
  layers::linear(pool, output.m, x, n, out);
}

}  // namespace arch
}  // namespace moelsp
