#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/model.h"

namespace moelsp {

double PerplexityResult::perplexity() const { return std::exp(nats_per_token()); }

PerplexityResult perplexity(Model& model, std::span<const TokenId> tokens, const PerplexityParams& p,
                            const PerplexityProgress& progress) {
  const Tokenizer& tok = model.tokenizer();
  const bool bos = tok.special().add_bos && tok.special().bos != kNoToken;
  PerplexityResult r;
  r.ctx = p.ctx;
  r.stride = p.stride > 0 ? std::min(p.stride, p.ctx) : std::max(1, p.ctx / 2);
  const int window = p.ctx - (bos ? 1 : 0);  // text tokens per window
  if (window < 2) throw std::invalid_argument("perplexity: context too small");
  if (tokens.size() < 2) throw std::invalid_argument("perplexity: the text has fewer than 2 tokens");
  const size_t nv = size_t(model.config().n_vocab);
  const int64_t n = int64_t(tokens.size());
  // Window k starts at k·stride; the last is the first to reach the end.
  r.total_windows = int(1 + (std::max<int64_t>(0, n - window) + r.stride - 1) / r.stride);
  if (p.max_windows > 0) r.total_windows = std::min(r.total_windows, p.max_windows);
  int64_t done = 1;  // tokens [0, done) are scored; the first has no context to be predicted from
  std::vector<TokenId> in;
  std::vector<float> lg;
  for (int64_t start = 0;; start += r.stride) {
    const int64_t end = std::min<int64_t>(start + window, n);
    in.clear();
    if (bos) in.push_back(tok.special().bos);
    in.insert(in.end(), tokens.begin() + start, tokens.begin() + end);
    auto cache = model.new_cache(int(in.size()), p.kv_type);
    lg.resize(in.size() * nv);
    model.forward(in, *cache, lg.data(), true);
    const int off = bos ? 1 : 0;
    for (int64_t i = std::max<int64_t>(1, done - start); i < end - start; ++i) {
      const float* row = lg.data() + size_t(i - 1 + off) * nv;  // the prediction for tokens[start + i]
      const float mx = *std::max_element(row, row + nv);
      double sum = 0;
      for (size_t v = 0; v < nv; ++v) sum += std::exp(double(row[v] - mx));
      r.nll += std::log(sum) + mx - row[tokens[size_t(start + i)]];
      ++r.scored;
    }
    done = end;
    ++r.windows;
    if (progress) progress(r);
    if (end == n || (p.max_windows > 0 && r.windows >= p.max_windows)) break;
  }
  return r;
}

}  // namespace moelsp
