// The host emulation of a device (kernels/gpu.h): every operation as the
// plainest loop over host memory, one thread, f32 arithmetic. Weight rows are
// decoded group by group with hd::decode_group and the router runs
// hd::route_token — the code the CUDA kernels run — so what differs from the
// GPU is only the order of the sums. Its job is correctness: it runs the
// device forward pass against the reference logits in every build, and the
// device tests compare each CUDA kernel with it. Not a fast path: a model runs
// on it at a few percent of the CPU engine's speed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cuda.h"
#include "kernels/gpu.h"
#include "kernels/hd_activations.h"
#include "kernels/hd_blocks.h"
#include "kernels/quantize.h"

namespace moelsp::kernels::gpu {
namespace {

int64_t groups(int64_t cols) { return (cols + 31) / 32; }

// Every group of a row (padded rows: the padding too).
template <hd::Type T>
struct DecodeRow {
  static void run(const uint8_t* row, int64_t n, float* out) {
    const int gpb = hd::block_elems(T) / 32;
    for (int64_t g = 0; g < groups(n); ++g)
      hd::decode_group<T>(row + (g / gpb) * hd::block_bytes(T), int(g % gpb), out + 32 * g);
  }
};

hd::Type decoded_type(DType t) {
  const auto ht = cuda::device_type(t);
  if (!ht) throw DeviceError("the device does not decode " + std::string(dtype_name(t)) + " weights");
  return *ht;
}

void decode_row(const Mat& w, int64_t r, float* out) {
  hd::with_type<DecodeRow>(decoded_type(w.type), static_cast<const uint8_t*>(w.data) + size_t(r) * w.row_bytes, w.cols,
                           out);
}

float kv_value(DType t, const uint8_t* row, int64_t e) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, row + 4 * e, 4);
      return v;
    }
    case DType::F16: return hd::half_to_float(hd::u16_at(row + 2 * e));
    case DType::BF16: return hd::bf16_to_float(hd::u16_at(row + 2 * e));
    default: throw DeviceError("the device KV cache does not hold " + std::string(dtype_name(t)) + " rows");
  }
}

const uint8_t* kv_row(const KvRows& k, int64_t pos) {
  return k.base + size_t(k.blocks[pos / k.block_size]) * k.block_bytes + size_t(pos % k.block_size) * k.row_bytes +
         k.offset;
}

class Emulated final : public Device {
 public:
  std::string name() const override { return "emulated device (host memory)"; }
  bool emulated() const override { return true; }
  uint64_t free_memory() const override { return 0; }
  void bind() override {}

  void* alloc(size_t bytes) override {
    void* p = std::calloc(1, bytes ? bytes : 1);
    if (!p) throw DeviceError("emulated device: out of memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) override {
    for (int64_t r = 0; r < rows; ++r) std::memmove(dst + r * ldd, src + r * lds, size_t(cols) * sizeof(float));
  }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void sync() override {}

  void matmul(const Mat& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy) override {
    std::vector<float> row(size_t(32 * groups(w.cols)));
    for (int64_t r = 0; r < w.rows; ++r) {
      decode_row(w, r, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float s = 0;
        for (int64_t c = 0; c < w.cols; ++c) s += row[size_t(c)] * xi[c];
        y[i * ldy + r] = s;
      }
    }
  }

  void embed(const Mat& table, const int32_t* ids, int64_t n, float* x) override {
    std::vector<float> row(size_t(32 * groups(table.cols)));
    for (int64_t i = 0; i < n; ++i) {
      decode_row(table, ids[i], row.data());
      std::copy_n(row.begin(), table.cols, x + i * table.cols);
    }
  }

  void rms_norm(const float* x, int64_t ld, const float* w, int64_t n, float eps, float* y, int64_t m) override {
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * ld;
      float* yr = y + r * ld;
      float ss = 0;
      for (int64_t c = 0; c < n; ++c) ss += xr[c] * xr[c];
      const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
      for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * scale * w[c];
    }
  }

  void rope(float* x, int64_t m, int64_t ld, int n_heads, int64_t head_stride, int64_t offset, int n_pairs, bool neox,
            const float* cs, const float* sn) override {
    for (int64_t t = 0; t < m; ++t)
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + t * ld + h * head_stride + offset;
        for (int i = 0; i < n_pairs; ++i) {
          float* a = neox ? v + i : v + 2 * i;
          float* b = neox ? v + i + n_pairs : v + 2 * i + 1;
          const float c = cs[t * n_pairs + i], s = sn[t * n_pairs + i], x0 = *a, x1 = *b;
          *a = x0 * c - x1 * s;
          *b = x0 * s + x1 * c;
        }
      }
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }
  void add_bias(float* y, const float* b, int64_t m, int64_t n) override {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < n; ++c) y[i * n + c] += b[c];
  }
  void swiglu(const float* g, const float* u, float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  void swiglu_oai(const float* g, const float* u, float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = hd::swiglu_oai(g[i], u[i]);
  }

  void route(const hd::RouteParams& r, float* logits, int64_t m, const float* bias, int* chosen,
             float* weight) override {
    std::vector<float> sel(size_t(r.n_expert));
    for (int64_t t = 0; t < m; ++t)
      hd::route_token(r, logits + t * r.n_expert, bias, sel.data(), chosen + t * r.k, weight + t * r.k);
  }

  void kv_store(const float* src, int64_t lds, int64_t n, int n_tokens, int pos0, const KvRows& d) override {
    for (int t = 0; t < n_tokens; ++t)
      quantize_row(d.type, src + t * lds, const_cast<uint8_t*>(kv_row(d, pos0 + t)), n);
  }

  void attention(const AttentionArgs& a) override {
    const int group = a.n_head / a.n_head_kv;
    std::vector<float> s(size_t(a.pos0 + a.n_tokens)), o(size_t(a.hd_v));
    for (int t = 0; t < a.n_tokens; ++t)
      for (int h = 0; h < a.n_head; ++h) {
        const float* q = a.q + t * a.ldq + int64_t(h) * a.hd_k;
        const int g = h / group, n_kv = a.pos0 + t + 1;
        const int j0 = a.window > 0 ? std::max(0, n_kv - a.window) : 0;
        float mx = -INFINITY;
        for (int j = j0; j < n_kv; ++j) {
          const uint8_t* k = kv_row(a.k, j);
          float d = 0;
          for (int e = 0; e < a.hd_k; ++e) d += q[e] * kv_value(a.k.type, k, int64_t(g) * a.hd_k + e);
          s[size_t(j)] = d * a.scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        float sum = a.sinks ? std::exp(a.sinks[h] - mx) : 0.0f;
        for (int j = j0; j < n_kv; ++j) sum += s[size_t(j)] = std::exp(s[size_t(j)] - mx);
        std::fill(o.begin(), o.end(), 0.0f);
        for (int j = j0; j < n_kv; ++j) {
          const uint8_t* v = kv_row(a.v, j);
          for (int e = 0; e < a.hd_v; ++e)
            o[size_t(e)] += s[size_t(j)] * kv_value(a.v.type, v, int64_t(g) * a.hd_v + e);
        }
        float* out = a.out + t * a.ldo + int64_t(h) * a.hd_v;
        for (int e = 0; e < a.hd_v; ++e) out[e] = o[size_t(e)] / sum;
      }
  }

  void matmul_experts(const ExpertsArgs& a) override {
    for (int64_t s = 0; s < a.n_slots; ++s) {
      Mat w = a.first;
      w.data = static_cast<const uint8_t*>(a.first.data) + size_t(a.ids[s]) * a.stride;
      float* y = a.y + s * a.ldy;
      matmul(w, a.x + (a.x_per_slot ? s : s / a.k) * a.ldx, a.ldx, 1, y, a.ldy);
      if (a.bias)
        for (int64_t r = 0; r < w.rows; ++r) y[r] += a.bias[int64_t(a.ids[s]) * w.rows + r];
    }
  }
  void moe_combine(const float* y, int64_t ldy, const float* w, int64_t n, int k, int64_t cols, float* out,
                   int64_t ldo) override {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < cols; ++c) {
        float s = 0;
        for (int j = 0; j < k; ++j) s += w[t * k + j] * y[(t * k + j) * ldy + c];
        out[t * ldo + c] += s;
      }
  }
  void count_ids(const int* ids, int64_t n, int64_t* counts) override {
    for (int64_t i = 0; i < n; ++i) ++counts[ids[i]];
  }

  void gather_rows(const float* x, int64_t ld, const int32_t* idx, int64_t n, int64_t cols, float* out) override {
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + idx[i] * ld, cols, out + i * cols);
  }
  void scatter_add_rows(const float* y, int64_t cols, const int32_t* idx, const float* w, int64_t n, float* out,
                        int64_t ldo) override {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) out[idx[i] * ldo + c] += w[i] * y[i * cols + c];
  }
};

}  // namespace

std::unique_ptr<Device> make_emulated_device() { return std::make_unique<Emulated>(); }

}  // namespace moelsp::kernels::gpu
