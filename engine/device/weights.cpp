// Uploading a model's weights to a device, by tensor name from the GGUF file
// (the CPU engine's copies may be repacked into layouts only its kernels read).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "../arch/facts.h"
#include "../layers/layers.h"
#include "device_forward.h"
#include "device_model.h"
#include "kernels/convert.h"
#include "kernels/cuda.h"
#include "kernels/matmul.h"

namespace moelsp::device {

namespace gpu = kernels::gpu;
using kernels::DType;

namespace {

// A padded f32 row → F32 or F16 bytes.
void to_row(const std::vector<float>& f, DType type, uint8_t* out) {
  if (type == DType::F32) std::memcpy(out, f.data(), f.size() * sizeof(float));
  else kernels::fp32_to_fp16_row(f.data(), reinterpret_cast<uint16_t*>(out), f.size());
}

class Uploader {
 public:
  Uploader(gpu::Device& d, const gguf::File& f, DeviceModel& m) : d_(d), f_(f), m_(m) {}

  const gguf::TensorInfo& info(const std::string& name) const {
    const gguf::TensorInfo* t = f_.tensor(name);
    if (!t) throw ModelError(f_.path() + ": no tensor " + name);
    return *t;
  }
  bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }
  const gguf::File& file() const { return f_; }

  // Slices [s0, s1) of a 2-D/3-D tensor (a 2-D one has one slice) as one
  // device buffer; returns one Mat per slice. Rows of a type the device does
  // not decode are dequantized on the host and go up as F16.
  std::vector<Mat> slices(const std::string& name, int64_t s0 = 0, int64_t s1 = -1) {
    const gguf::TensorInfo& t = info(name);
    const int64_t cols = int64_t(t.shape[0]), rows = t.shape.size() > 1 ? int64_t(t.shape[1]) : 1;
    const int64_t n_slices = t.shape.size() > 2 ? int64_t(t.shape[2]) : 1;
    if (s1 < 0) s1 = n_slices;
    const size_t src_row = size_t(*kernels::row_bytes(t.type, uint64_t(cols)));
    const auto src = f_.tensor_data(t);
    // Native: the file's blocks. Otherwise rows converted on the host: F32
    // stays F32, the rest become F16, padded with zeros to whole groups of 32.
    const bool native = kernels::cuda::device_supports(t.type) && cols % 32 == 0;
    const DType type = native ? t.type : t.type == DType::F32 ? DType::F32 : DType::F16;
    const int64_t padded = (cols + 31) / 32 * 32;
    const size_t row = native ? src_row : size_t(padded) * (type == DType::F32 ? 4 : 2);
    const int64_t n_rows = (s1 - s0) * rows;
    gpu::Buffer& buf = add(size_t(n_rows) * row);
    const uint8_t* from = src.data() + size_t(s0 * rows) * src_row;
    if (native) {
      d_.upload(buf.as(), from, size_t(n_rows) * row);
    } else {
      if (type == DType::F16) ++m_.converted;
      std::vector<float> f(static_cast<size_t>(padded), 0.0f);
      std::vector<uint8_t> out(row * size_t(std::min<int64_t>(n_rows, 256)));
      for (int64_t r0 = 0; r0 < n_rows; r0 += 256) {  // 256 rows per upload
        const int64_t nr = std::min<int64_t>(256, n_rows - r0);
        for (int64_t r = 0; r < nr; ++r) {
          kernels::dequantize_row(t.type, from + size_t(r0 + r) * src_row, f.data(), cols);
          to_row(f, type, out.data() + size_t(r) * row);
        }
        d_.upload(buf.as<uint8_t>() + size_t(r0) * row, out.data(), size_t(nr) * row);
      }
    }
    std::vector<Mat> out;
    for (int64_t s = s0; s < s1; ++s)
      out.push_back({.data = buf.as<uint8_t>() + size_t((s - s0) * rows) * row,
                     .type = type,
                     .rows = rows,
                     .cols = cols,
                     .row_bytes = row});
    return out;
  }
  Mat mat(const std::string& name) { return slices(name).front(); }
  Mat maybe_mat(const std::string& name) { return has(name) ? mat(name) : Mat{}; }

  // A 1-D tensor as f32 on the device.
  const float* vec(const std::string& name, int64_t n) {
    const std::vector<float> v = WeightLoader(f_).vec(name, n);
    return floats(v);
  }
  const float* maybe_vec(const std::string& name, int64_t n) { return has(name) ? vec(name, n) : nullptr; }
  const float* floats(const std::vector<float>& v) {
    gpu::Buffer& b = add(v.size() * sizeof(float));
    d_.upload(b.as(), v.data(), v.size() * sizeof(float));
    return b.as<float>();
  }
  // f32 rows [rows][cols] built on the host → a device Mat of F32 or F16 (padded as above).
  Mat host_rows(const std::vector<float>& v, int64_t rows, int64_t cols, DType type) {
    const int64_t padded = (cols + 31) / 32 * 32;
    const size_t row = size_t(padded) * (type == DType::F32 ? 4 : 2);
    std::vector<uint8_t> out(size_t(rows) * row);
    std::vector<float> f(static_cast<size_t>(padded), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(v.begin() + r * cols, cols, f.begin());
      to_row(f, type, out.data() + size_t(r) * row);
    }
    gpu::Buffer& b = add(out.size());
    d_.upload(b.as(), out.data(), out.size());
    return {.data = b.as(), .type = type, .rows = rows, .cols = cols, .row_bytes = row};
  }

  // The file's bytes of slice s as a CPU matrix (hybrid experts).
  kernels::MatView cpu_slice(const std::string& name, int64_t s) const {
    const gguf::TensorInfo& t = info(name);
    const int64_t cols = int64_t(t.shape[0]), rows = int64_t(t.shape[1]);
    const size_t rb = size_t(*kernels::row_bytes(t.type, uint64_t(cols)));
    return {.data = f_.tensor_data(t).data() + size_t(s * rows) * rb,
            .type = t.type,
            .cols = cols,
            .rows = rows,
            .row_bytes = rb};
  }

 private:
  gpu::Buffer& add(size_t bytes) {
    m_.buffers.emplace_back(d_, bytes);
    m_.bytes += bytes;
    return m_.buffers.back();
  }
  gpu::Device& d_;
  const gguf::File& f_;
  DeviceModel& m_;
};

// MLA's per-head expansions. Split files (attn_k_b, attn_v_b) hold them in
// the orientation the absorbed form reads; attn_kv_b files hold k_up [nope]
// rows of [lora], transposed here on the host into k_absorb [lora] rows of
// [nope] (F32 from an F32 file, else F16).
void upload_mla_heads(Uploader& up, const ModelConfig& c, const gguf::File& f, const std::string& b, DeviceLayer& L) {
  const int H = c.n_head, nope = c.qk_nope, lora = c.kv_lora_rank, hv = c.head_dim_v;
  if (up.has(b + "attn_k_b.weight")) {
    L.k_absorb = up.slices(b + "attn_k_b.weight");  // per head [lora][nope]
    L.v_up = up.slices(b + "attn_v_b.weight");      // per head [v][lora]
    return;
  }
  const Mat kv_b = up.mat(b + "attn_kv_b.weight");  // [H·(nope + v)][lora]
  for (int h = 0; h < H; ++h) {
    Mat v = kv_b;
    v.data = static_cast<const uint8_t*>(kv_b.data) + size_t(h * (nope + hv) + nope) * kv_b.row_bytes;
    v.rows = hv;
    L.v_up.push_back(v);
  }
  const gguf::TensorInfo& t = up.info(b + "attn_kv_b.weight");
  const auto bytes = f.tensor_data(t);
  const size_t rb = size_t(*kernels::row_bytes(t.type, uint64_t(lora)));
  std::vector<float> row(static_cast<size_t>(lora)), m(static_cast<size_t>(lora * nope));
  for (int h = 0; h < H; ++h) {
    for (int j = 0; j < nope; ++j) {
      kernels::dequantize_row(t.type, bytes.data() + size_t(h * (nope + hv) + j) * rb, row.data(), lora);
      for (int r = 0; r < lora; ++r) m[size_t(r) * size_t(nope) + size_t(j)] = row[size_t(r)];
    }
    L.k_absorb.push_back(up.host_rows(m, lora, nope, t.type == DType::F32 ? DType::F32 : DType::F16));
  }
}

// Per-expert biases {rows, n_expert} as [n_expert][rows] f32 (empty when absent).
std::vector<float> expert_bias(const Uploader& up, const std::string& name, int64_t rows, int n_expert) {
  if (!up.has(name)) return {};
  const gguf::TensorInfo& t = up.info(name);
  const size_t rb = size_t(*kernels::row_bytes(t.type, uint64_t(rows)));
  const auto bytes = up.file().tensor_data(t);
  std::vector<float> v(size_t(rows) * size_t(n_expert));
  for (int e = 0; e < n_expert; ++e)
    kernels::dequantize_row(t.type, bytes.data() + size_t(e) * rb, v.data() + e * rows, rows);
  return v;
}

// A layer's attention weights: MLA's projections, or GQA's with their
// optional biases, q/k norms, sinks and sliding window.
void upload_attention(Uploader& up, const ModelConfig& c, const gguf::File& f, int il, const std::string& b,
                      DeviceLayer& L) {
  if (c.kv_lora_rank > 0) {  // MLA
    if (c.q_lora_rank > 0) {
      L.wq_a = up.mat(b + "attn_q_a.weight");
      L.q_a_norm = up.vec(b + "attn_q_a_norm.weight", c.q_lora_rank);
      L.wq_b = up.mat(b + "attn_q_b.weight");
    } else {
      L.wq = up.mat(b + "attn_q.weight");
    }
    L.wkv_a = up.mat(b + "attn_kv_a_mqa.weight");
    L.kv_a_norm = up.vec(b + "attn_kv_a_norm.weight", c.kv_lora_rank);
    upload_mla_heads(up, c, f, b, L);
    L.wo = up.mat(b + "attn_output.weight");
    return;
  }
  L.wq = up.mat(b + "attn_q.weight");
  L.wk = up.mat(b + "attn_k.weight");
  L.wv = up.mat(b + "attn_v.weight");
  L.wo = up.mat(b + "attn_output.weight");
  L.bq = up.maybe_vec(b + "attn_q.bias", int64_t(c.n_head) * c.head_dim_k);
  L.bk = up.maybe_vec(b + "attn_k.bias", int64_t(c.n_head_kv) * c.head_dim_k);
  L.bv = up.maybe_vec(b + "attn_v.bias", int64_t(c.n_head_kv) * c.head_dim_v);
  L.bo = up.maybe_vec(b + "attn_output.bias", c.n_embd);
  L.q_norm = up.maybe_vec(b + "attn_q_norm.weight", c.head_dim_k);
  L.k_norm = up.maybe_vec(b + "attn_k_norm.weight", c.head_dim_k);
  L.sinks = up.maybe_vec(b + "attn_sinks.weight", c.n_head);
  L.window = c.window(il);  // as the architecture set it
}

// A MoE layer: router and biases, shared experts, and the routed experts:
// the first n_exp_res of each matrix kind resident on the device (slot s
// holds expert s; routing then moves the most used ones in,
// DeviceForward::rebalance), every one also as a view of the file's bytes
// for the CPU.
void upload_moe(Uploader& up, const ModelConfig& c, const std::string& b, int n_exp_res, DeviceLayer& L) {
  L.router = up.mat(b + "ffn_gate_inp.weight");
  L.router_bias = up.maybe_vec(b + "ffn_gate_inp.bias", c.n_expert);
  L.sel_bias = up.maybe_vec(b + "exp_probs_b.bias", c.n_expert);
  L.cpu_gate_b = expert_bias(up, b + "ffn_gate_exps.bias", c.n_ff_exp, c.n_expert);
  L.cpu_up_b = expert_bias(up, b + "ffn_up_exps.bias", c.n_ff_exp, c.n_expert);
  L.cpu_down_b = expert_bias(up, b + "ffn_down_exps.bias", c.n_embd, c.n_expert);
  L.gate_b = L.cpu_gate_b.empty() ? nullptr : up.floats(L.cpu_gate_b);
  L.up_b = L.cpu_up_b.empty() ? nullptr : up.floats(L.cpu_up_b);
  L.down_b = L.cpu_down_b.empty() ? nullptr : up.floats(L.cpu_down_b);
  if (c.n_expert_shared > 0) {
    L.shared_gate = up.mat(b + "ffn_gate_shexp.weight");
    L.shared_up = up.mat(b + "ffn_up_shexp.weight");
    L.shared_down = up.mat(b + "ffn_down_shexp.weight");
  }
  const char* kinds[3] = {"gate", "up", "down"};
  for (int w = 0; w < 3; ++w) {
    const std::string name = b + "ffn_" + kinds[w] + "_exps.weight";
    std::vector<Mat> v = n_exp_res > 0 ? up.slices(name, 0, n_exp_res) : std::vector<Mat>{};
    if (!v.empty()) {
      L.slot_base[w] = static_cast<uint8_t*>(const_cast<void*>(v[0].data));
      L.slot_bytes[w] = size_t(v[0].rows) * v[0].row_bytes;
    }
    v.resize(size_t(c.n_expert));
    std::vector<kernels::MatView> cpu;
    for (int e = 0; e < c.n_expert; ++e) cpu.push_back(up.cpu_slice(name, e));
    (w == 0 ? L.e_gate : w == 1 ? L.e_up : L.e_down) = std::move(v);
    (w == 0 ? L.cpu_gate : w == 1 ? L.cpu_up : L.cpu_down) = std::move(cpu);
  }
  L.slot_of.assign(size_t(c.n_expert), -1);
  for (int e = 0; e < n_exp_res; ++e) L.slot_of[size_t(e)] = e, L.in_slot.push_back(e);
  L.heat.assign(size_t(c.n_expert), 0.0);
}

}  // namespace

std::string unsupported(const ModelConfig& c, const gguf::File&) {
  if (const arch::ArchFacts* facts = arch::facts_of(c.arch); facts && !facts->device_unsupported.empty())
    return std::string(facts->device_unsupported);
  if (c.n_expert > 512) return fmt::format("{} experts per layer (the device router takes at most 512)", c.n_expert);
  const int hk = c.kv_lora_rank > 0 ? c.kv_lora_rank + c.qk_rope : c.head_dim_k;
  const int hv = c.kv_lora_rank > 0 ? c.kv_lora_rank : c.head_dim_v;
  if (hk + 4 * hv + 8 > 12 * 1024) return "attention heads too large for the device kernel";
  return "";
}

DeviceForward::DeviceForward(std::shared_ptr<gpu::Device> dev, const ModelConfig& c, const gguf::File& f,
                             ThreadPool& pool, const Placement& p)
    : dev_(std::move(dev)), c_(c), pool_(pool), m_(std::make_unique<DeviceModel>()) {
  if (const std::string why = unsupported(c, f); !why.empty()) throw ModelError(f.path() + ": " + why);
  DeviceModel& m = *m_;
  Uploader up(*dev_, f, m);
  m.routed = std::make_unique<std::atomic<int64_t>[]>(size_t(c.n_layer));
  m.hits = std::make_unique<std::atomic<int64_t>[]>(size_t(c.n_layer));
  const int n_exp_res =
      c.n_expert > 0 ? (p.experts_per_layer < 0 ? c.n_expert : std::min(p.experts_per_layer, c.n_expert)) : 0;
  m.experts_per_layer = n_exp_res;
  try {
    m.token_embd = up.mat("token_embd.weight");
    m.output = up.has("output.weight") ? up.mat("output.weight") : m.token_embd;
    m.output_norm = up.vec("output_norm.weight", c.n_embd);
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = fmt::format("blk.{}.", il);
      DeviceLayer L;
      L.attn_norm = up.vec(b + "attn_norm.weight", c.n_embd);
      L.ffn_norm = up.vec(b + c.ffn_norm + ".weight", c.n_embd);
      upload_attention(up, c, f, il, b, L);
      if (c.is_moe_layer(il)) {
        upload_moe(up, c, b, n_exp_res, L);
      } else {
        L.gate = up.mat(b + "ffn_gate.weight");
        L.up = up.mat(b + "ffn_up.weight");
        L.down = up.mat(b + "ffn_down.weight");
      }
      m.layers.push_back(std::move(L));
    }
    if (c.n_expert > 0 && n_exp_res == c.n_expert) {
      const size_t n = size_t(c.n_layer) * size_t(c.n_expert);
      m.counts = gpu::Buffer(*dev_, n * sizeof(int64_t));
      dev_->zero(m.counts.as(), n * sizeof(int64_t));
      m.counts_seen.assign(n, 0);
    }
  } catch (const gpu::DeviceError& e) {
    throw ModelError(fmt::format("{}: uploading the weights to {}: {}", f.path(), dev_->name(), e.what()));
  }
}

DeviceForward::~DeviceForward() = default;

uint64_t DeviceForward::weight_bytes() const { return m_->bytes; }
int DeviceForward::experts_per_layer() const { return m_->experts_per_layer; }

std::string DeviceForward::describe() const {
  std::string s = fmt::format("{}: {:.1f} MiB of weights", dev_->name(), double(m_->bytes) / (1 << 20));
  if (c_.n_expert > 0)
    s += fmt::format(", {} of {} routed experts per layer resident{}", m_->experts_per_layer, c_.n_expert,
                     m_->experts_per_layer < c_.n_expert ? " (the rest on the CPU)" : "");
  if (m_->converted > 0) s += fmt::format(", {} matrices converted to F16", m_->converted);
  return s;
}

}  // namespace moelsp::device
