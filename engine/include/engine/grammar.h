// Output constraints: a grammar in llama.cpp's GBNF, compiled to a byte-level
// pushdown automaton, and a matcher that says which tokens may come next.
//
// Why bytes, not characters: a byte-level BPE token may end in the middle of
// a UTF-8 character, so the matcher must be able to stop anywhere. Character
// classes are therefore compiled to the UTF-8 byte sequences they stand for
// (as regex engines do), and every terminal of the automaton is a set of
// bytes: one 256-bit mask test per byte per live stack.
//
// The matcher's state is a set of stacks (llama.cpp's representation): each
// stack is the positions still to match, its top a byte set. A byte advances
// every stack whose top admits it. Repetition compiles to right recursion,
// which keeps stacks flat; left recursion is refused at compile time.
//
// The cost model: checking one token is a few byte steps (microseconds), so
// the scheduler samples first and checks the sampled token; only when the
// grammar rejects it is the whole vocabulary masked — a walk over a trie of
// the vocabulary's pieces that prunes every branch the grammar rejects at
// its first byte. Sampling from the unconstrained distribution and
// resampling from the masked one on rejection draws each allowed token with
// exactly its masked probability (p/Z + (1−Z)·p/Z = p/Z), so the shortcut
// changes speed, not the output distribution.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp {

class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Grammar;  // compiled, immutable: shared by the requests that use it

// Compiles GBNF text (llama.cpp's grammar syntax: `name ::= …`, literals,
// [classes], ., groups, | , * + ? {m,n}, # comments). Throws GrammarError
// naming the line and the problem: a syntax error, an undefined or
// left-recursive rule, a missing root.
std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root = "root");
const std::string& grammar_source(const Grammar& g);  // the GBNF text it was compiled from

// The vocabulary as the matcher sees it: each token's bytes (special tokens
// by their text, so `<tool_call>` matches a grammar that spells it), in a
// trie for masking. End-of-generation tokens are not matched by bytes: they
// are allowed exactly where the grammar's text is complete.
class VocabTrie {
 public:
  VocabTrie(const std::vector<std::string>& pieces, const std::vector<bool>& eog);
  size_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  bool eog(int32_t id) const { return eog_[size_t(id)]; }

  struct Node {
    uint32_t first_child = 0, n_children = 0;  // children are contiguous, sorted by byte
    uint32_t first_token = 0, n_tokens = 0;    // tokens whose piece ends here (into token_ids)
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;  // nodes[0] is the root (the empty string)
  std::vector<int32_t> token_ids;
  uint32_t max_depth = 0;

 private:
  size_t n_vocab_;
  std::vector<std::string> pieces_;
  std::vector<bool> eog_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // Advances over `bytes`; false (and the state unchanged) when the grammar
  // rejects them.
  bool accept(std::string_view bytes);
  bool can_accept(std::string_view bytes) const;
  bool accepting() const;  // the text so far is a whole sentence of the grammar
  bool finished() const;   // accepting, and nothing more may follow
  // Whether token `id` may come next (EOG tokens: where accepting()).
  bool allows(const VocabTrie& v, int32_t id) const;
  // allowed[id] for every token; the count of allowed tokens.
  size_t mask(const VocabTrie& v, std::vector<uint8_t>& allowed) const;

  struct State;

 private:
  std::shared_ptr<const Grammar> g_;
  std::unique_ptr<State> s_;
};

// What a request's output must match (Request::constraint). With no
// triggers the whole output is constrained from its first byte; with
// triggers (a lazy grammar, llama.cpp's idea for tool calls) the output is
// free until it contains one of them, and from the trigger's first byte on
// it must match the grammar, whose sentences therefore begin with a trigger.
struct OutputConstraint {
  std::shared_ptr<const Grammar> grammar;  // null: no constraint
  std::vector<std::string> triggers;
  // Text the output is taken to begin with (it ends the prompt: the opening
  // of a call the client forced); the grammar reads it before the output.
  std::string prefix;
  bool active() const { return grammar != nullptr; }
};

}  // namespace moelsp
