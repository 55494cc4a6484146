// Linear layers, RMSNorm and RoPE.
#include <algorithm>
#include <cmath>

#include "layers.h"

namespace moelsp::layers {

void quantize_input(ThreadPool& pool, const kernels::MatView& w, const float* x, int64_t m,
                    kernels::QuantizedActs& out) {
  const kernels::ActBlocks b = kernels::act_blocks(w.type);
  kernels::prepare_acts(b, m, w.cols, out);
  if (b == kernels::ActBlocks::None) return;
  const auto rows = [&](int64_t r0, int64_t r1) { kernels::quantize_act_rows(x, w.cols, r0, r1, out); };
  if (m <= 8) rows(0, m);
  else pool.parallel_for(m, rows);
}

void linear(ThreadPool& pool, const kernels::MatView& w, const float* x, int64_t m, float* y,
            const kernels::QuantizedActs* xq) {
  const LinearOut out[] = {{&w, y}};
  linear_fused(pool, out, x, m, xq);
}

void linear_fused(ThreadPool& pool, std::span<const LinearOut> outs, const float* x, int64_t m,
                  const kernels::QuantizedActs* xq) {
  // The matrices' units (row groups of a repacked matrix, else rows) end to end.
  std::vector<int64_t> start(outs.size() + 1, 0);
  int64_t macs = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const kernels::MatView& w = *outs[i].w;
    start[i + 1] = start[i] + w.rows / std::max<int64_t>(1, w.row_group);
    macs += w.rows * w.cols * m;
  }
  const bool tiny = macs < 32768;  // tiny matrices run inline
  // The caller's own quantized copy when it passed none (one per calling thread).
  thread_local kernels::QuantizedActs own;
  if (!xq && !tiny) {
    quantize_input(pool, *outs[0].w, x, m, own);
    xq = &own;
  }
  const auto body = [&](int64_t b, int64_t e) {
    for (size_t i = 0; i < outs.size(); ++i) {
      const int64_t lo = std::max(b, start[i]), hi = std::min(e, start[i + 1]);
      if (lo >= hi) continue;
      const kernels::MatView& w = *outs[i].w;
      const int64_t g = std::max<int64_t>(1, w.row_group);
      kernels::matmul({.w = w,
                       .x = x,
                       .ldx = w.cols,
                       .m = m,
                       .y = outs[i].y,
                       .ldy = w.rows,
                       .row_begin = (lo - start[i]) * g,
                       .row_end = (hi - start[i]) * g,
                       .xq = xq});
    }
  };
  // Decode-sized calls (a few inputs) in at least 4 chunks per thread, so the
  // other threads absorb a descheduled one's share (ThreadPool), and in
  // chunks of at most ~1 MiB of weights: with 4 per thread, an output head
  // of 111 MB (deepseek2-mid Q8_0) had one thread idle ~10 % of the loop,
  // waiting for the other's last 14 MB chunk. With many inputs, one chunk per
  // thread (the tile kernels want long row ranges).
  if (tiny) {
    body(0, start.back());
  } else if (m <= 4) {
    uint64_t bytes = 0;
    for (const LinearOut& o : outs) bytes += uint64_t(o.w->rows) * o.w->row_bytes;
    const int per_thread = int(std::clamp<uint64_t>(bytes / (uint64_t(pool.size()) << 20), 4, 256));
    pool.parallel_for(start.back(), body, per_thread);
  } else {
    pool.parallel_for(start.back(), body, 1);
  }
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m, int64_t ld) {
  if (ld < 0) ld = n;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ld;
    float* yr = y + r * ld;
    // The sum of squares in double, in 8 independent sums the compiler keeps
    // in vector registers (one sum was a serial chain of n dependent adds: a
    // decode step's norms ran on one thread while the others waited).
    double part[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) part[j] += double(xr[i + j]) * xr[i + j];
    double ss = 0;
    for (; i < n; ++i) ss += double(xr[i]) * xr[i];
    for (double p : part) ss += p;
    const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * scale * w[c];
  }
}

void rope_yarn_init(RopeConfig& c) {
  if (!c.yarn) return;
  // ggml_rope_yarn_corr_dims: the pair index where a frequency completes
  // n_rot rotations over the original context.
  const auto corr_dim = [&](float n_rot) {
    return float(c.n_dims) * std::log(float(c.n_ctx_orig) / (n_rot * 2.0f * float(M_PI))) /
           (2.0f * std::log(c.freq_base));
  };
  c.corr_low = std::max(0.0f, std::floor(corr_dim(c.beta_fast)));
  c.corr_high = std::min(float(c.n_dims - 1), std::ceil(corr_dim(c.beta_slow)));
}

void rope_angles(const RopeConfig& c, int pos, float* cs, float* sn) {
  const int n_pairs = std::min(c.n_dims / 2, 512);
  for (int i = 0; i < n_pairs; ++i) {
    const float theta_extrap = float(pos) * std::pow(c.freq_base, -2.0f * float(i) / float(c.n_dims));
    const float theta_interp = c.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = c.attn_factor;
    if (c.ext_factor != 0.0f) {
      const float y = (float(i) - c.corr_low) / std::max(0.001f, c.corr_high - c.corr_low);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * c.ext_factor;
      theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / c.freq_scale);
    }
    cs[i] = std::cos(theta) * mscale;
    sn[i] = std::sin(theta) * mscale;
  }
}

namespace {

// cos/sin of every pair at one position (ggml's rope_yarn). A decode step
// rotates q and k of every layer at the same position, so each thread keeps
// the table of the last (settings, position) it computed: the transcendentals
// are paid once per token, not twice per layer on the thread the others wait
// for.
struct RopeTable {
  RopeConfig c;
  int pos = -1;
  float cs[512], sn[512];
  bool holds(const RopeConfig& o, int p) const {
    return p == pos && o.n_dims == c.n_dims && o.freq_base == c.freq_base && o.freq_scale == c.freq_scale &&
           o.ext_factor == c.ext_factor && o.attn_factor == c.attn_factor && o.corr_low == c.corr_low &&
           o.corr_high == c.corr_high;
  }
};

const RopeTable& rope_table(const RopeConfig& c, int pos) {
  thread_local RopeTable t;
  if (t.holds(c, pos)) return t;
  t.c = c;
  t.pos = pos;
  rope_angles(c, pos, t.cs, t.sn);
  return t;
}

}  // namespace

void rope(float* x, int n_heads, int64_t stride, int64_t offset, int pos, const RopeConfig& c) {
  const int half = c.n_dims / 2;
  const int n_pairs = std::min(half, 512);
  const RopeTable& t = rope_table(c, pos);
  const float *cs = t.cs, *sn = t.sn;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + h * stride + offset;
    if (c.type == RopeType::Norm) {  // adjacent pairs
      for (int i = 0; i < n_pairs; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cs[i] - x1 * sn[i];
        v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    } else {  // NeoX: the two halves, in vectors
      float* lo = v;
      float* hi = v + half;
      for (int i = 0; i < n_pairs; ++i) {
        const float x0 = lo[i], x1 = hi[i];
        lo[i] = x0 * cs[i] - x1 * sn[i];
        hi[i] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

}  // namespace moelsp::layers
