"""Fill-in-the-middle and chat examples made from the training files.

FIM examples use the prefix-suffix-middle order the LSP server sends:
  <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|> middle </s>
each part tokenized on its own, as moelsp's fim_prompt() does.

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
