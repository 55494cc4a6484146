// The completion pipeline's pure parts: the context window around the
// cursor, the fill-in-the-middle prompt, and post-processing of what the
// model wrote. No JSON, no threads: easy to test.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "assist/repo_context.h"
#include "engine/tokenizer.h"

namespace moelsp::assist {

struct CompletionContext {
  std::string prefix;        // text before the cursor (whole lines kept where cut)
  std::string suffix;        // text after the cursor
  bool single_line = false;  // the cursor's line has code after the cursor: complete only this line
  bool prefix_whole = true;  // the prefix starts at the start of the document (nothing cut off above)
  RepoContext repo;          // other files' code, ahead of the whole FIM prompt (fim_prompt)
};

// The prefix starts at a line whose number is a multiple of kAnchorLines
// (see make_context), so that it stays put while the user types.
constexpr size_t kAnchorLines = 32;

// `text` may be an excerpt of a document that starts at one of its anchor
// lines (excerpt_bounds): then `starts_document` says whether the excerpt
// is the document's start, and the context is the same as the whole
// document's.
CompletionContext make_context(std::string_view text, size_t cursor, size_t max_prefix_bytes, size_t max_suffix_bytes,
                               bool starts_document = true);

// The bytes [begin, end) of a document that make_context reads for a cursor:
// from the anchor line its prefix starts at to the end of its suffix. A
// caller holding a large document copies only these (a completion in a
// 20 MB file copies kilobytes, not the file).
struct Excerpt {
  size_t begin = 0, end = 0;
};
Excerpt excerpt_bounds(std::string_view text, size_t cursor, size_t max_prefix_bytes, size_t max_suffix_bytes);

// A character of an identifier (ASCII letters, digits, '_').
inline bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The order of a FIM prompt's parts. kModel: the model's own (SPM when its
// file says so, SpecialTokens::fim_spm; PSM otherwise).
enum class FimOrder { kModel, kPsm, kSpm };

// A prefix longer than its room loses its head in steps of this many
// tokens: cut token by token, its start moved with every keystroke once the
// file was longer than the window, and each answer prefilled the whole window
// again (~300 tokens on the embedded model); cut in steps, the prompt's start
// stays put while the user types up to a step, and a keystroke prefills only
// its own tokens. The window is up to a step shorter for it.
inline constexpr size_t kPrefixCutStep = 32;

// PSM: [BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle>
// SPM: [BOS] <fim_prefix> <fim_suffix> suffix <fim_middle> prefix
// when the model has FIM tokens; otherwise [BOS] prefix (left-to-right
// completion). In SPM the answer continues the prefix directly, and a
// keystroke changes only the prompt's end, so the KV cache keeps the suffix
// too. Other files' code (ctx.repo) stands ahead of all of it, where it stays
// put while the user types: in the repository format when the vocabulary has
// `<|repo_name|>` and `<|file_sep|>` (Qwen2.5/3-Coder), else as comment-
// headed snippets (repo_context.h). With a budget (max_tokens > 0) the prompt
// is fitted to it: the other files' code gets at most half (whole snippets
// dropped from the first), the suffix keeps its start and at most a quarter
// of the rest, the prefix keeps its end (the text nearest the cursor) and
// what remains (its head cut in steps of kPrefixCutStep) — a long prefix no
// longer pushes the context out. With max_local > 0 the prefix and suffix
// together take at most max_local tokens whatever the context leaves (the
// engine passes half the budget: a model whose context grew to hold other
// files' code does not also prefill a window around the cursor twice as long
// on every fresh prompt).
//
// With `heal`, token healing (Request::heal): when the prefix ends inside or
// right after a word and its last token is made of word characters only
// (`se` of `return se`), that token is left out of the prompt and its text
// stored in *heal, for the first generated token to begin with.
std::vector<TokenId> fim_prompt(const Tokenizer& tok, const CompletionContext& ctx, size_t max_tokens = 0,
                                FimOrder order = FimOrder::kModel, std::string* heal = nullptr, size_t max_local = 0);

// Where a continuation stops making sense, or npos: the start of a line that
// holds a repetition loop (a unit of 2+ characters repeated 4+ times over 16+
// bytes or 5+ times over 12+, one character 8+ times, a unit of digits and
// separators 16+ times; whitespace and rulers such as `----` or `| --- |`
// excepted), that opens 4+ more brackets than it closes, or the start of the
// second copy of a block of 1-4 lines written three times in a row (of a line
// of 24+ characters written twice); 0 when
// the text has no letter or digit and 7+ characters that are neither
// brackets, `;`, `,` nor ruler characters. Cutting there never leaves half a
// line. With `complete_lines_only` (during generation), a last line not yet
// ended by '\n' is judged only for loops: a loop stays a loop however the
// line goes on, so stopping decoding there gives what the full decode would
// have been cut to (the punctuation rule alone could change its mind; seven
// marks without a word are given up on).
size_t degenerate_at(const std::string& text, bool complete_lines_only = false);

// Where a continuation of a line the user is typing ends: the cursor stands
// after code on its line (nothing after it), and the continuation's first
// line is complete ('\n' follows it) without opening anything that goes on
// below — it does not end in `:`, `{`, `(`, `[`, `,` or `\`. Returns the
// offset of that '\n', or npos (the cursor starts a line, the first line is
// not finished yet, or it opens a block or a bracket: `def f(n` → `):` and its
// body is one suggestion). Small models write on past the line's end; a mid-
// line cursor asks for the rest of the line, and the next keystroke asks for
// what follows it.
size_t line_end_at(const std::string& text, const CompletionContext& ctx);

// Where a multi-line continuation leaves the cursor's block: the '\n' before
// its first later line indented less than the cursor's statement (the
// cursor's line's indentation), or, at the top level, before a later line
// that starts a new definition (`def`, `class`, `@`, `fn`, `func`,
// `function`, `struct`, `impl`, …). npos when it stays inside. A line is
// judged once it holds a character other than blanks, so decoding can stop
// there (llama.vscode's n_indent): small models finish `return …` and go on
// to write the next function.
size_t block_end_at(const std::string& text, const CompletionContext& ctx);

// Cleans a raw continuation: no doubled indentation when the cursor already
// stands after the line's indentation, no retyping of the code before the
// cursor on its line (the model starting the line over; at least 3
// characters or the whole line), nothing indented right after a block's
// header (`def f():`, `{`) on its line, cut where it starts repeating the text
// after the cursor, stop at the end of the line for single-line contexts,
// where a typed line ends (line_end_at) and where the block ends
// (block_end_at), drop
// trailing blank lines and whitespace, and cut before a closing bracket that
// has no opener in the completion when the text after the cursor closes it,
// or when nothing before the cursor opened it (as far as the prefix shows).
// Degenerate text (see degenerate_at) is cut back to its last whole line or
// dropped. The result is always a piece of `raw` (a head of whitespace or
// retyped code dropped, a tail cut), never longer and never reordered.
std::string postprocess(const std::string& raw, const CompletionContext& ctx);

}  // namespace moelsp::assist
