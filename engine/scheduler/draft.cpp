// Prompt lookup decoding (Request::draft_max): a decode step also runs draft
// tokens copied from the text so far, and keeps those the model confirms.
//
// Why it pays here: at the cursor the model mostly re-types what the file
// already holds (a call with the same arguments, the other branch of an
// if, a closing block), and a step over 1 + k tokens costs about one
// token's weight traffic, since decode is bound by reading the weights.
// Each confirmed draft token is a step saved; a wrong one costs its share of
// the step's compute and a KV row that is dropped again.
//
// Correctness: only with greedy sampling. Row k of the step's logits is
// exactly what plain decoding would compute after the feed token and drafts
// 0..k−1, so while each sample equals the next draft token the output is
// the plain one, token for token; the first disagreement's sample is the
// token plain decoding would have produced there, and it becomes the next
// feed. Penalties see the same history either way (samples go through
// after_logits one at a time).
#include <algorithm>

#include <fmt/format.h>

#include "internal.h"

namespace moelsp {

std::vector<TokenId> lookup_draft(std::span<const TokenId> h, int n_max) {
  constexpr int kMaxKey = 4, kMinKey = 2;  // 1-token keys match too often to be worth their compute
  const int n = int(h.size());
  for (int k = std::min(kMaxKey, n - 1); k >= kMinKey; --k) {
    const std::span<const TokenId> key = h.subspan(size_t(n - k));
    // The most recent earlier occurrence: code nearby predicts best.
    for (int p = n - k - 1; p >= 0; --p) {
      if (!std::equal(key.begin(), key.end(), h.begin() + p)) continue;
      const int from = p + k, len = std::min(n_max, n - from);
      return std::vector<TokenId>(h.begin() + from, h.begin() + from + len);
    }
  }
  return {};
}

int Scheduler::draft_room(const Live& l) const {
  const Request& req = l.job->req;
  if (req.draft_max <= 0 || req.sampling.temperature > 0) return 0;
  // Each confirmed draft is a generated token, and the step's last sample
  // one more: stay within max_tokens, and leave the context a position for it.
  const int by_length = req.max_tokens - int(l.res.tokens.size()) - 1;
  const int by_context = opt_.n_ctx - l.seq->n_past() - 2;
  return std::max(0, std::min({req.draft_max, by_length, by_context}));
}

void Scheduler::verify_draft(Live& l, const float* logits) {
  const size_t nv = size_t(model_->config().n_vocab);
  const int n = int(l.spec.size());  // feed + drafts, all of them now in the cache
  const int before = l.seq->n_past() - n;
  ++metrics_.draft_steps;
  metrics_.draft_tokens += n - 1;
  int accepted = 0;
  for (int k = 0; k < n; ++k) {
    if (!after_logits(l, logits + size_t(k) * nv)) return;  // it ended (its blocks are released)
    if (k + 1 == n || l.feed != l.spec[size_t(k) + 1]) break;
    ++accepted;  // the model picked draft k + 1, whose KV row is already written
  }
  metrics_.draft_accepted += accepted;
  l.spec.clear();
  // The unconfirmed drafts' rows go. The block cut into was written by this
  // step and is shared with no one, so the cut needs no copy and cannot fail;
  // if it ever did, the request ends with an error rather than wrong output.
  if (!l.seq->truncate(before + 1 + accepted)) {
    l.res.error = "internal: could not drop the rejected draft tokens from the KV cache";
    end(l, FinishReason::Error);
  }
}

}  // namespace moelsp
