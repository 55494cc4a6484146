"""Fill-in-the-middle and chat examples made from the training files.

FIM examples come in two orders, each part tokenized on its own as moelsp's
fim_prompt() does:
  PSM  <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|> middle </s>
  SPM  <|fim_prefix|> <|fim_suffix|> suffix <|fim_middle|> prefix middle </s>
fim_pool (phases 1-2) makes PSM examples with middles cut anywhere, joined into
one stream; editor_fim_rows (phase 3) makes one example per training row,
shaped as the language server asks (see there).

Chat examples teach the chat format (chatml, the template the GGUF declares)
with answers the corpus itself provides: a Python function or class with its
docstring removed is the question's code, the docstring is the answer. The
questions are the ones the LSP server's commands ask (moelsp.explain,
moelsp.document, moelsp.chat with the code as context).
"""
import ast
import inspect
import random

import numpy as np

ASK_EXPLAIN = "Explain what this code does."
ASK_DOCUMENT = "Write documentation comments for this code."
# The system turn lsp/handlers_chat.cpp sends (kSystem): most examples carry it.
SYSTEM = ("You are moelsp, a concise coding assistant running locally in the user's editor. "
          "Answer with correct, idiomatic code and brief explanations.")


def fim_pool(sp, texts, n_tokens, rng, ctx):
    pre, suf, mid = (sp.piece_to_id(p) for p in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    eos = sp.eos_id()
    out = []
    while len(out) < n_tokens:
        text = texts[rng.randrange(len(texts))]
        if len(text) < 200:
            continue
        # A window of about ctx tokens (≈3 bytes each) starting at a line start.
        start = text.rfind("\n", 0, rng.randrange(len(text))) + 1
        chunk = text[start:start + rng.randint(ctx, 3 * ctx)]
        if len(chunk) < 100:
            continue
        cut = rng.randrange(len(chunk))
        if rng.random() < 0.5:  # the rest of the current line, or part of it
            end = chunk.find("\n", cut)
            end = len(chunk) if end < 0 else end + (rng.random() < 0.5)
            if rng.random() < 0.3:
                end = rng.randint(cut, max(cut, end))
        else:  # one to six whole lines from the cursor's line start
            cut = chunk.rfind("\n", 0, cut) + 1
            end = cut
            for _ in range(rng.randint(1, 6)):
                nl = chunk.find("\n", end)
                end = len(chunk) if nl < 0 else nl + 1
        ids = [pre] + sp.encode(chunk[:cut]) + [suf] + sp.encode(chunk[end:]) + [mid] + sp.encode(chunk[cut:end]) + [eos]
        out.extend(ids)
    return np.array(out, dtype=np.uint16)


def _line_spans(text):
    """(begin, end, indent) of each line, end excluding the newline; indent -1 for a blank line."""
    out, b = [], 0
    while b <= len(text):
        e = text.find("\n", b)
        e = len(text) if e < 0 else e
        line = text[b:e]
        code = line.lstrip(" \t")
        out.append((b, e, len(line) - len(code) if code else -1))
        b = e + 1
    return out


def editor_span(text, rng):
    """A (cursor, middle end) an editor would ask about, or None.

    45% mid-line: the cursor inside a line's code, the middle the rest of the
    line (without its newline: the suffix starts with it). 35% a block: the
    cursor after a line's indentation, the middle 1-8 whole lines (half the
    time the body of a block header ending in `:` or `{`), again without the
    last newline. 20% anywhere: a cut at any byte and up to six lines, as the
    earlier phases had, so that odd cursors still get sensible answers.
    """
    lines = _line_spans(text)
    code = [i for i, (b, e, ind) in enumerate(lines) if ind >= 0 and e - b - ind >= 4]
    if len(code) < 4:
        return None
    r = rng.random()
    if r < 0.45:
        b, e, ind = lines[code[rng.randrange(len(code))]]
        cur = rng.randint(b + ind + 1, e - 1)
        return cur, e
    if r < 0.80:
        i = code[rng.randrange(len(code))]
        if rng.random() < 0.5:  # the body of a block header
            heads = [j for j in code if text[lines[j][0]:lines[j][1]].rstrip().endswith((":", "{"))]
            if heads:
                h = heads[rng.randrange(len(heads))]
                body = [j for j in code if j > h][:1]
                if body and lines[body[0]][2] > lines[h][2]:
                    i = body[0]
        b, e, ind = lines[i]
        n, last, k = rng.randint(1, 8), i, i
        while k + 1 < len(lines) and n > 1:
            k += 1
            if lines[k][2] >= 0 and lines[k][2] < ind:
                break
            if lines[k][2] >= 0:
                last, n = k, n - 1
        return b + ind, lines[last][1]
    cur = rng.randrange(len(text))
    if rng.random() < 0.5:
        end = text.find("\n", cur)
        return cur, len(text) if end < 0 else end
    end = cur
    for _ in range(rng.randint(0, 6)):
        nl = text.find("\n", end)
        end = len(text) if nl < 0 else nl + 1
    return cur, end


def fit_prompt(prefix, suffix, room):
    """fim_prompt's rule: the suffix keeps its start and at most a quarter of
    the room when both do not fit; the prefix keeps its end."""
    if len(suffix) > room // 4 and len(prefix) + len(suffix) > room:
        suffix = suffix[:max(room // 4, room - len(prefix) if room > len(prefix) else 0)]
    if len(prefix) + len(suffix) > room:
        prefix = prefix[len(prefix) - (room - len(suffix)):]
    return prefix, suffix


def editor_fim_rows(sp, texts, lm, n_rows, rng, ctx, spm_share=0.5, max_prefix=2400, max_suffix=400, answer=64):
    """n_rows rows of ctx + 1 tokens, each one FIM example as the language
    server builds it (assist/service.cpp, completion.cpp): the prefix up to
    max_prefix bytes before the cursor from a line start (the server reads
    6,000 and keeps the tokens nearest the cursor; 2,400 bytes hold more tokens
    than fit), the suffix up to max_suffix bytes cut after a whole line,
    fitted into ctx − answer tokens by fim_prompt's rule, then the middle and
    </s>. PSM or SPM at random (spm_share). A row that is not full goes on
    with a window of the left-to-right stream, so every position is trained.
    Also returns, per row, a mask of the positions whose next token is the
    middle's or its </s> (the trainer may weight them)."""
    pre, suf, mid = (sp.piece_to_id(p) for p in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    eos = sp.eos_id()
    rows = np.zeros((n_rows, ctx + 1), dtype=np.uint16)
    masks = np.zeros((n_rows, ctx), dtype=np.uint8)
    n, kinds = 0, {"psm": 0, "spm": 0}
    while n < n_rows:
        text = texts[rng.randrange(len(texts))]
        if len(text) < 400:
            continue
        span = editor_span(text, rng)
        if span is None:
            continue
        cur, end = span
        pb = text.rfind("\n", 0, max(0, cur - max_prefix)) + 1 if cur > max_prefix else 0
        se = min(len(text), end + max_suffix)
        if se < len(text):
            nl = text.rfind("\n", 0, se)
            if nl > end:
                se = nl + 1
        middle = sp.encode(text[cur:end])
        if len(middle) > ctx // 2:
            continue
        room = min(ctx - answer, ctx - len(middle) - 1) - 3
        p, s = fit_prompt(sp.encode(text[pb:cur]), sp.encode(text[end:se]), room)
        if rng.random() < spm_share:
            ids = [pre, suf] + s + [mid] + p + middle + [eos]
            kinds["spm"] += 1
        else:
            ids = [pre] + p + [suf] + s + [mid] + middle + [eos]
            kinds["psm"] += 1
        put_row(rows, masks, n, ids, len(middle), lm, rng)
        n += 1
    return rows, masks, kinds


def put_row(rows, masks, n, ids, n_middle, lm, rng):
    """Row n: ids (a FIM example ending in its middle and </s>), then a window of the
    left-to-right stream up to ctx + 1 tokens; its mask marks the middle's and </s>'s targets."""
    ctx = masks.shape[1]
    m_end = len(ids) - 1  # the </s>: targets at positions [m_end - n_middle - 1, m_end) are middle and </s>
    masks[n, max(0, m_end - n_middle - 1):min(ctx, m_end)] = 1
    if len(ids) < ctx + 1:
        o = rng.randrange(lm.size - ctx)
        ids = ids + lm[o:o + ctx + 1 - len(ids)].tolist()
    rows[n] = ids[:ctx + 1]


def _strip_docstring(src_lines, node):
    doc = node.body[0]
    lines = src_lines[node.lineno - 1:node.end_lineno]
    a, b = doc.lineno - node.lineno, doc.end_lineno - node.lineno
    code = lines[:a] + lines[b + 1:]
    indent = min((len(l) - len(l.lstrip()) for l in code if l.strip()), default=0)
    return "\n".join(l[indent:] for l in code).strip("\n")


def chat_turn(sp, user, answer, system=None):
    s, e = sp.piece_to_id("<|im_start|>"), sp.piece_to_id("<|im_end|>")
    nl = sp.encode("\n")
    head = [s] + sp.encode("system\n" + system) + [e] + nl if system else []
    return head + [s] + sp.encode("user\n" + user) + [e] + nl + [s] + sp.encode("assistant\n" + answer) + [e] + nl


def chat_pool(sp, named_texts, rng, max_code=900, max_doc=400):
    out, n = [], 0
    for name, text in named_texts:
        if not name.endswith(".py"):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.split("\n")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc or not node.body or len(node.body) < 2:
                continue
            doc = inspect.cleandoc(doc).split("\n\n")[0].strip()
            if len(doc) < 20 or len(doc) > max_doc:
                continue
            code = _strip_docstring(lines, node)
            if len(code) > max_code or len(code) < 40:
                continue
            fenced = "```python\n" + code + "\n```"
            r = rng.random()
            system = SYSTEM if rng.random() < 0.7 else None
            if r < 0.45:
                ids = chat_turn(sp, ASK_EXPLAIN + "\n\n" + fenced, doc, system)
            elif r < 0.7:
                ids = chat_turn(sp, ASK_DOCUMENT + "\n\n" + fenced, '"""' + doc + '"""', system)
            else:
                ask = rng.choice(["What does `{}` do?", "What is `{}` for?", "Explain `{}`.", "Summarize `{}`."])
                ids = chat_turn(sp, "Context:\n" + fenced + "\n\n" + ask.format(node.name), doc, system)
            out.extend(ids)
            n += 1
    return np.array(out, dtype=np.uint16), n
