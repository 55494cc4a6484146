"""Repository-level FIM rows (the fourth phase): other files of the same
project ahead of the FIM prompt, chosen and spelled as the language server
does, so that the model learns to use what the server sends.

The server (assist/workspace_query.cpp, repo_context.cpp, completion.cpp's
fim_prompt) puts snippets of other files ahead of the FIM tokens, each under a
comment line naming its path relative to the workspace root (`# path` in
Python, `// path` in C++), in a stable order (by path, then place), at most
half of the prompt's tokens, dropping whole snippets from the first when they
do not fit. Its evidence, strongest first:
  1. the definitions of the names near the cursor (the cursor's line up to the
     word being typed and the 4 lines above, nearest first; the names the file
     imports; the names of the 24 lines above; the first 6 lines after), then
     the names the whole file uses that only other files define (most used
     first) — each definition's first line (its signature), 240 bytes at
     most, up to two thirds of the byte budget (3 bytes a token);
  2. chunks like the text around the cursor (Okapi BM25 over identifier
     terms), up to five sixths of the budget (the estimate of 3 bytes a token
     must not overflow the token cap, which drops whole snippets).
This module re-implements that in Python over the training corpus; a
"project" is a top-level package of the standard library (`asyncio/`,
`email/`, `test/`; the top-level modules form one) or a Boost library, and
paths are relative to it, as they are to a workspace folder.

Cursors: half the rows put the cursor where the cross-file benchmark does
(bench/bench_crossfile.cpp): on a line of a function body that uses a name
another file of the project defines and the file does not define or use
above that line (the middle the rest of the line from the cursor); the other
half are the editor-shaped cursors of the third phase (examples.editor_span).
A share of rows carries no context, as when it is turned off or the index has
nothing, so that the model keeps completing without it.
"""
import math
import os
import re
from collections import Counter, defaultdict

import numpy as np

from examples import editor_span, fit_prompt, put_row

DEF_LINES, DEF_BYTES, CHUNK_BYTES, CHUNK_LINES = 1, 240, 1600, 40
BYTES_PER_TOKEN = 3
KEYWORDS = set("""and as assert async auto await bool break case catch char class const continue def default define
del delete do double elif else endif enum except export extends extern false finally float fn for from func function
global if ifdef ifndef impl import in include inline int interface is lambda let long mut namespace new none nonlocal
not null nullptr or package pass private protected pub public raise return self static std str struct super switch
template this throw true try type typename unsigned use using var void while with yield""".split())
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PY_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)")
TOP_ASSIGN = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::(?!:)[^=\n]*)?=(?!=)")
CPP_DEF = re.compile(r"^[ \t]*(?:template[ \t]*<[^>\n]*>[ \t]*)?(?:class|struct|enum(?:[ \t]+class)?|union)[ \t]+([A-Za-z_]\w*)[^;\n]*$")


def names(text):
    """The server's for_each_name: identifiers of 3+ characters that are not keywords, in order."""
    return [w for w in IDENT.findall(text) if len(w) >= 3 and w.lower() not in KEYWORDS]


def defined_name(line, cpp):
    m = (CPP_DEF if cpp else PY_DEF).match(line)
    if m:
        return m.group(1)
    if not cpp:
        m = TOP_ASSIGN.match(line)
        if m and m.group(1).lower() not in KEYWORDS:
            return m.group(1)
    return None


def project_of(path):
    """(project key, path relative to it) for a corpus file's absolute path."""
    for root in ("/usr/lib/python3.11/", "/usr/include/boost/"):
        if path.startswith(root):
            rel = path[len(root):]
            top, _, rest = rel.partition("/")
            return (root + top, rest) if rest else (root, rel)
    return (path.rsplit("/", 1)[0], path.rsplit("/", 1)[-1])


def lines_at(text, offset, max_lines, max_bytes):
    """Whole lines from `offset` (a line start): at most max_lines and max_bytes."""
    e = offset
    for _ in range(max_lines):
        if e >= len(text):
            break
        nl = text.find("\n", e)
        nxt = len(text) if nl < 0 else nl + 1
        if nxt - offset > max_bytes:
            break
        e = nxt
    out = text[offset:e]
    return out if not out or out.endswith("\n") else out + "\n"


class Project:
    """One project's files, their definitions and chunks, and a BM25 index over the chunks."""

    def __init__(self, members):
        self.files = members  # [(rel, text, cpp)]
        self.defs = defaultdict(list)  # name -> [(file index, offset of the line)]
        self.chunks = []  # (file index, begin, end)
        for fi, (rel, text, cpp) in enumerate(members):
            off, start, since = 0, 0, 0
            for line in text.split("\n"):
                d = defined_name(line, cpp)
                if d:
                    self.defs[d].append((fi, off))
                if (d or since >= CHUNK_LINES) and off > start:
                    self.chunks.append((fi, start, off))
                    start, since = off, 0
                since += 1
                off += len(line) + 1
            if len(text) > start:
                self.chunks.append((fi, start, len(text)))
        self.postings = defaultdict(list)  # term -> [(chunk, tf)]
        self.lengths = []
        for ci, (fi, b, e) in enumerate(self.chunks):
            terms = Counter(w.lower() for w in IDENT.findall(self.files[fi][1][b:e])
                            if len(w) >= 2 and w.lower() not in KEYWORDS)
            self.lengths.append(sum(terms.values()))
            for t, tf in terms.items():
                self.postings[t].append((ci, tf))
        self.avg = sum(self.lengths) / max(1, len(self.lengths))

    def similar(self, query, exclude_file, top=32, k1=1.2, b=0.75):
        n = len(self.chunks)
        qtf = Counter(w.lower() for w in IDENT.findall(query) if len(w) >= 2 and w.lower() not in KEYWORDS)
        terms = sorted((len(self.postings.get(t, ())), t) for t in list(qtf)[:96] if t in self.postings)
        score, visited = defaultdict(float), 0
        for df, t in terms:
            if df > n / 8 + 16 or visited + df > 200000:
                break
            visited += df
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5)) * min(qtf[t], 3)
            for ci, tf in self.postings[t]:
                score[ci] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.lengths[ci] / self.avg))
        ranked = sorted(score.items(), key=lambda kv: -kv[1])[:top]
        return [ci for ci, _ in ranked if self.chunks[ci][0] != exclude_file]


def build_projects(paths, texts):
    groups = defaultdict(list)
    for path, text in zip(paths, texts):
        key, rel = project_of(path)
        groups[key].append((rel, text, not path.endswith(".py"), path))
    projects, where = {}, {}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        projects[key] = Project([(rel, text, cpp) for rel, text, cpp, _ in members])
        for fi, (_, _, _, path) in enumerate(members):
            where[path] = (key, fi)
    return projects, where


def names_near(prefix, suffix, cpp):
    """The server's names_near: names near the cursor first, without repeats or names the visible text defines."""
    defined = {d for line in (prefix + "\n" + suffix).split("\n") if (d := defined_name(line, cpp))}
    out, seen = [], set()

    def add(ws):
        for w in ws:
            if w not in defined and w not in seen:
                seen.add(w)
                out.append(w)

    ls = prefix.split("\n")
    cur = re.sub(r"\w+$", "", ls[-1])
    add(reversed(names(cur)))
    add(reversed(names("\n".join(ls[-5:-1]))))
    for line in ls[:-1]:
        if line.startswith(("from ", "import ", "#include")):
            add(names(line))
    add(reversed(names("\n".join(ls[-25:-1]))))
    add(names("\n".join(suffix.split("\n")[:6])))
    return out[:24]


def context_snippets(proj, fi, prefix, suffix, whole, budget_bytes):
    """[(rel, text)] the server would send for a cursor in file fi, in its stable order."""
    rel, _, cpp = proj.files[fi]
    near = names_near(prefix, suffix, cpp)
    own = {d for line in whole.split("\n") if (d := defined_name(line, cpp))}
    counts = Counter(w for w in names(whole) if w in proj.defs and w not in own and w not in near)
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:24]]
    picks, taken, used, limit = [], set(), 0, budget_bytes

    def take(f, begin, max_lines, max_bytes):
        nonlocal used
        cost = len(proj.files[f][0]) + 4
        if used + cost >= limit:
            return
        text = lines_at(proj.files[f][1], begin, max_lines, min(max_bytes, limit - used - cost))
        if text:
            used += len(text) + cost
            picks.append((proj.files[f][0], begin, text))

    for name in near + ranked:
        if used >= budget_bytes * 2 // 3:
            break
        cands = [(f, o) for f, o in proj.defs.get(name, ()) if f != fi and (f, o) not in taken]
        if not cands:
            continue
        f, o = max(cands, key=lambda c: len(os.path.commonprefix([proj.files[c[0]][0], rel])))
        taken.add((f, o))
        take(f, o, DEF_LINES, DEF_BYTES)
    limit = budget_bytes * 5 // 6
    if used < limit:
        query = "\n".join(prefix.split("\n")[-25:-1]) + "\n" + "\n".join(suffix.split("\n")[:6])
        for ci in proj.similar(query, fi):
            if used >= limit:
                break
            f, b, e = proj.chunks[ci]
            if (f, b) not in taken:
                taken.add((f, b))
                take(f, b, 64, CHUNK_BYTES)
    picks.sort(key=lambda p: (p[0], p[1]))
    return [(r, t) for r, _, t in picks]


def crossfile_span(proj, fi, text, rng):
    """A (cursor, end of line) where bench_crossfile puts its cases, or None: an indented line that
    uses a name only other files of the project define, not used or defined above it in this file."""
    _, _, cpp = proj.files[fi]
    cands, off = [], 0
    for line in text.split("\n"):
        ind = len(line) - len(line.lstrip(" \t"))
        if ind > 0 and line.strip() and not defined_name(line, cpp):
            for w in names(line):
                if w in proj.defs and all(f != fi for f, _ in proj.defs[w]):
                    cands.append((off, off + len(line), ind, w))
                    break
        off += len(line) + 1
    rng.shuffle(cands)
    for b, e, ind, w in cands[:8]:
        if re.search(r"\b%s\b" % re.escape(w), text[:b]) is None:
            at = text.find(w, b)
            cur = b + ind if rng.random() < 0.6 else rng.randint(b + ind, at)
            return cur, e
    return None


def repo_fim_rows(sp, paths, texts, lm, n_rows, rng, ctx, spm_share=0.75, answer=64, no_context=0.2,
                  crossfile_share=0.5, max_prefix=6000, max_suffix=400):
    """n_rows rows of ctx + 1 tokens: [context] then one FIM example as fim_prompt builds it, the
    rest of the row a window of the left-to-right stream. Also a mask of the targets that are the
    middle or its </s>, and counts of what was made."""
    pre, suf, mid = (sp.piece_to_id(p) for p in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    eos = sp.eos_id()
    projects, where = build_projects(paths, texts)
    keyed = [(p, t) for p, t in zip(paths, texts) if p in where and len(t) >= 400]
    rows = np.zeros((n_rows, ctx + 1), dtype=np.uint16)
    masks = np.zeros((n_rows, ctx), dtype=np.uint8)
    stats = Counter()
    n = 0
    prompt = ctx - answer  # the server's prompt budget: n_ctx − completion.maxTokens (64)
    while n < n_rows:
        path, text = keyed[rng.randrange(len(keyed))]
        key, fi = where[path]
        proj = projects[key]
        cross = rng.random() < crossfile_share
        span = crossfile_span(proj, fi, text, rng) if cross else editor_span(text, rng)
        if span is None:
            continue
        cur, end = span
        pb = text.rfind("\n", 0, cur - max_prefix) + 1 if cur > max_prefix else 0
        se = min(len(text), end + max_suffix)
        if se < len(text) and (nl := text.rfind("\n", 0, se)) > end:
            se = nl + 1
        middle = sp.encode(text[cur:end])
        if not middle or len(middle) > answer:
            continue
        context = []
        if rng.random() >= no_context:
            cap = prompt // 2 if rng.random() < 0.8 else rng.randint(prompt // 8, prompt // 2)
            snippets = context_snippets(proj, fi, text[pb:cur], text[end:se], text[:cur] + text[end:],
                                        cap * BYTES_PER_TOKEN)
            mark = "//" if proj.files[fi][2] else "#"
            parts = [sp.encode(f"{mark} {r}\n{t}") for r, t in snippets]
            while parts and sum(map(len, parts)) > cap:
                parts.pop(0)
            context = [i for p in parts for i in p]
            stats["snippets"] += len(parts)
            kept = snippets[len(snippets) - len(parts):]
            wanted = set(names(text[cur:end]))
            if cross and any(defined_name(l, proj.files[fi][2]) in wanted for _, t in kept for l in t.split("\n")):
                stats["crossfile_with_definition"] += 1
        room = min(prompt, ctx - len(middle) - 1) - 3 - len(context)
        p, s = fit_prompt(sp.encode(text[pb:cur]), sp.encode(text[end:se]), room)
        if rng.random() < spm_share:
            ids = context + [pre, suf] + s + [mid] + p + middle + [eos]
        else:
            ids = context + [pre] + p + [suf] + s + [mid] + middle + [eos]
        stats["crossfile" if cross else "editor"] += 1
        stats["with_context"] += bool(context)
        stats["context_tokens"] += len(context)
        put_row(rows, masks, n, ids, len(middle), lm, rng)
        n += 1
    return rows, masks, dict(stats)
