// Request::constraint in the scheduler: sample first, check the token, and
// mask the vocabulary only when the grammar rejects it (engine/grammar.h has
// why this draws exactly from the masked distribution). A lazy constraint
// watches the output's bytes for a trigger and starts the grammar there.
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "internal.h"

namespace moelsp {

std::shared_ptr<const VocabTrie> make_vocab_trie(const Tokenizer& t) {
  const size_t n = t.n_vocab();
  std::vector<std::string> pieces(n);
  std::vector<bool> eog(n);
  for (size_t i = 0; i < n; ++i) {
    eog[i] = t.is_eog(TokenId(i));
    // As the request's decoder writes it (control tokens as nothing, so they
    // are never allowed): the grammar must see the text the output will be.
    pieces[i] = t.piece(TokenId(i), false);
  }
  return std::make_shared<const VocabTrie>(pieces, eog);
}

TokenId Scheduler::constrain(Live& l, const float* logits, TokenId tok) {
  if (!l.grammar || l.grammar->allows(*vocab_trie_, tok)) return tok;
  std::vector<uint8_t> allowed;
  ++l.res.timings.n_masked;
  if (l.grammar->mask(*vocab_trie_, allowed) == 0) {
    l.res.error = "the output's grammar allows no token of the vocabulary here (it needs a byte no token spells)";
    l.res.timings.generate_ms = ms_since(l.t1);
    end(l, FinishReason::Error);
    return kNoToken;
  }
  const size_t nv = allowed.size();
  l.masked.assign(logits, logits + nv);
  for (size_t i = 0; i < nv; ++i)
    if (!allowed[i]) l.masked[i] = -std::numeric_limits<float>::infinity();
  const TokenId tok2 = l.sampler->sample(l.masked.data(), l.history);
  if (tok2 >= 0 && size_t(tok2) < nv && allowed[size_t(tok2)]) return tok2;
  // The sampler's last-candidate fallback (rounding) can land on a masked
  // token: take the best allowed one instead.
  TokenId best = kNoToken;
  for (size_t i = 0; i < nv; ++i)
    if (allowed[i] && (best == kNoToken || logits[i] > logits[size_t(best)])) best = TokenId(i);
  return best;
}

void Scheduler::constraint_saw(Live& l, TokenId tok) {
  const OutputConstraint& c = l.job->req.constraint;
  if (!c.active()) return;
  if (vocab_trie_->eog(tok)) return;  // (ignore_eos) the end of a sentence is not text
  const std::string& piece = vocab_trie_->piece(tok);
  if (l.grammar) {
    if (!l.grammar->accept(piece))  // constrain() allowed it, so this cannot happen; say so if it does
      spdlog::warn("the grammar rejected a token it had allowed; its state stays where it was");
    return;
  }
  l.lazy_bytes += piece;
  size_t at = std::string::npos, longest = 0;
  for (const std::string& t : c.triggers) {
    if (!t.empty()) at = std::min(at, l.lazy_bytes.find(t));
    longest = std::max(longest, t.size());
  }
  if (at == std::string::npos) {
    // Only a trigger's beginning can matter later: keep the tail it fits in
    // (the search stays linear over a long free answer).
    if (l.lazy_bytes.size() > longest) l.lazy_bytes.erase(0, l.lazy_bytes.size() - (longest ? longest - 1 : 0));
    return;
  }
  auto g = std::make_unique<GrammarMatcher>(c.grammar);
  if (g->accept(std::string_view(l.lazy_bytes).substr(at))) {
    l.grammar = std::move(g);
  } else {
    // The grammar does not begin with its own trigger (a caller's mistake):
    // the output stays free rather than being forced into nonsense.
    spdlog::warn("a lazy grammar rejected the text from its trigger on; the output is not constrained");
  }
  l.lazy_bytes.clear();
}

}  // namespace moelsp
