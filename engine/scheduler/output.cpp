// What a step's logits become: a sampled token, its log-probability, and
// text emitted once it is final (never a partial UTF-8 character, never the
// start of a stop string); the stop conditions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "internal.h"

namespace moelsp {
namespace {

// Longest suffix of `text` that is a proper prefix of some stop string: text we
// must hold back because the next token could complete a stop string.
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops)
    for (size_t len = std::min(s.size() - 1, text.size()); len > hold; --len)
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  return hold;
}

}  // namespace

TokenLogprob Scheduler::logprob_of(const float* logits, TokenId tok, int top_n) const {
  const Tokenizer& t = model_->tokenizer();
  const int nv = int(t.n_vocab());
  // log-softmax: x − max − log Σ exp(x − max), in double for the sum.
  const float mx = *std::max_element(logits, logits + nv);
  double sum = 0;
  for (int i = 0; i < nv; ++i) sum += std::exp(double(logits[i] - mx));
  const float log_z = mx + float(std::log(sum));
  TokenLogprob out{tok, t.piece(tok, true), logits[tok] - log_z, {}};
  if (top_n > 0) {
    std::vector<TokenId> ids(static_cast<size_t>(nv));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(),
                      [&](TokenId a, TokenId b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int i = 0; i < top_n; ++i)
      out.top.push_back({ids[size_t(i)], t.piece(ids[size_t(i)], true), logits[ids[size_t(i)]] - log_z});
  }
  return out;
}

// The first token of a healed request (Request::heal) may only be one that
// begins with the healed text: the others' logits become −inf, in a copy.
// Once per request: one pass over the vocabulary's pieces (~1 ms for 150k).
const float* Scheduler::heal_mask(Live& l, const float* logits) {
  const std::string& heal = l.job->req.heal;
  if (heal.empty() || !l.res.tokens.empty()) return logits;
  const Tokenizer& t = model_->tokenizer();
  const int nv = int(t.n_vocab());
  l.healed.assign(logits, logits + nv);
  bool any = false;
  for (int i = 0; i < nv; ++i) {
    if (t.piece(TokenId(i)).compare(0, heal.size(), heal) == 0 && !t.is_eog(TokenId(i))) any = true;
    else l.healed[size_t(i)] = -std::numeric_limits<float>::infinity();
  }
  l.heal_left = any ? heal : std::string();
  return any ? l.healed.data() : logits;
}

bool Scheduler::emit_text(Live& l, TokenId tok) {
  const Request& req = l.job->req;
  l.pending += l.dec->push(tok);
  if (!l.heal_left.empty()) {  // the healed text was the prompt's: not part of the answer
    const size_t n = std::min(l.heal_left.size(), l.pending.size());
    if (l.pending.compare(0, n, l.heal_left, 0, n) == 0) {
      l.pending.erase(0, n);
      l.heal_left.erase(0, n);
    } else {
      l.heal_left.clear();  // (cannot happen for a token that begins with it; never cut the answer)
    }
  }
  // A stop string ends generation; its text is not returned.
  size_t stop_at = std::string::npos;
  for (const auto& s : req.stop)
    if (!s.empty()) stop_at = std::min(stop_at, l.pending.find(s));
  const bool stopped = stop_at != std::string::npos;
  if (stopped) l.pending.resize(stop_at);
  const size_t emit = stopped ? l.pending.size() : l.pending.size() - held_back(l.pending, req.stop);
  if (emit > 0) {
    const std::string out = l.pending.substr(0, emit);
    l.pending.erase(0, emit);
    l.res.text += out;
    if (l.job->cb.on_token) l.job->cb.on_token(tok, out);
  }
  return stopped;
}

bool Scheduler::after_logits(Live& l, const float* logits) {
  const Request& req = l.job->req;
  const Callbacks& cb = l.job->cb;
  const auto done = [&](FinishReason r) {
    if (r != FinishReason::Stop && r != FinishReason::Cancelled) {
      l.pending += l.dec->flush();
      l.res.text += l.pending;
      if (!l.pending.empty() && cb.on_token) cb.on_token(kNoToken, l.pending);
      l.pending.clear();
    }
    l.res.timings.generate_ms = ms_since(l.t1);
    end(l, r);
    return false;
  };
  if (l.job->state->cancel) return done(FinishReason::Cancelled);
  if (req.t_max_predict_ms > 0 && ms_since(l.t1) > double(req.t_max_predict_ms)) return done(FinishReason::Timeout);
  // Damaged weights (NaN/Inf somewhere the loader's sampling missed) show
  // here: an error, not a stream of token 0. ~20 µs for a 150k vocabulary.
  const int nv = int(model_->tokenizer().n_vocab());
  for (int i = 0; i < nv; ++i)
    if (!std::isfinite(logits[i])) {
      l.res.error = fmt::format(
          "the model computed a non-finite logit (token {}): its weights are damaged or "
          "their type is computed wrongly",
          i);
      return done(FinishReason::Error);
    }
  const float* const sample_from = heal_mask(l, logits);
  const TokenId tok = constrain(l, sample_from, l.sampler->sample(sample_from, l.history));
  if (tok == kNoToken) return false;  // the grammar allowed nothing: ended with an error
  if (!req.ignore_eos && model_->tokenizer().is_eog(tok)) return done(FinishReason::Eos);
  constraint_saw(l, tok);
  if (req.logprobs >= 0) {
    l.res.logprobs.push_back(logprob_of(logits, tok, std::min(req.logprobs, kMaxTopLogprobs)));
    if (cb.on_logprob) cb.on_logprob(l.res.logprobs.back());
  }
  l.res.tokens.push_back(tok);
  l.history.push_back(tok);
  ++l.res.timings.n_generated;
  const size_t before = l.res.text.size();
  const bool stopped = emit_text(l, tok);
  const bool emitted = l.res.text.size() > before;
  if (stopped || (emitted && cb.should_stop && cb.should_stop(l.res.text))) return done(FinishReason::Stop);
  if (l.grammar && l.grammar->finished()) return done(FinishReason::Eos);  // nothing but the end may follow
  if (int(l.res.tokens.size()) >= req.max_tokens) return done(FinishReason::Length);
  if (l.seq->n_past() >= opt_.n_ctx) return done(FinishReason::Length);  // no position left for `tok`
  l.feed = tok;
  return true;
}

}  // namespace moelsp
