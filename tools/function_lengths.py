#!/usr/bin/env python3
"""Function lengths in the C++ sources, for the style rule "functions rarely
over 60 lines" (docs/design.md): counts every function defined at namespace
or class level, from its signature line to its closing brace, in the
clang-formatted code (a definition's `{` ends its signature line and its `}`
stands alone at the same indentation).

    tools/function_lengths.py [--over N] [--tests] [ROOT]

Prints the functions over N lines (default 60), longest first, and the
counts over 60 and over 100. Test sources (tests/, bench/) are left out
unless --tests.
"""
import argparse
import pathlib
import re

MODULES = ["util", "kernels", "jinja", "engine", "assist", "lsp", "http", "cli"]
CONTROL = re.compile(r"^\s*(if|for|while|switch|do|else|try|catch|namespace|extern|struct|class|union|enum)\b")
SIGNATURE_END = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(->\s*[\w:<>, *&]+\s*)?\{$")


def functions(path: pathlib.Path):
    lines = path.read_text(errors="replace").splitlines()
    i = 0
    while i < len(lines):
        if not SIGNATURE_END.search(lines[i]):
            i += 1
            continue
        # The signature may start on earlier lines (wrapped arguments).
        start = i
        while start > 0 and lines[start - 1].strip() and not lines[start - 1].strip().endswith((";", "{", "}", ":")) \
                and not lines[start - 1].lstrip().startswith(("//", "#", "template")):
            start -= 1
        head = lines[start]
        indent = head[: len(head) - len(head.lstrip())]
        if CONTROL.match(head) or "=" in head.split("(")[0] or head.strip().startswith(("[", "return", ":", ".", "}")) \
                or "(" not in head or len(indent) > 2:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != indent + "}":
            if lines[end].strip() and not lines[end].startswith(indent + " ") and not lines[end].startswith("#"):
                break  # not a definition after all
            end += 1
        if end < len(lines) and lines[end] == indent + "}":
            name = re.search(r"([~\w:]+)\s*\(", head)
            yield (name.group(1) if name else head.strip()[:40]), start + 1, end - start + 1
            i = end + 1
        else:
            i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--over", type=int, default=60)
    ap.add_argument("--tests", action="store_true")
    ap.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[1]))
    a = ap.parse_args()
    root = pathlib.Path(a.root)
    dirs = MODULES + (["tests", "bench"] if a.tests else [])
    found = []
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if p.suffix in {".cpp", ".h", ".cu", ".cuh"} and p.is_file():
                for name, line, n in functions(p):
                    found.append((n, f"{p.relative_to(root)}:{line}", name))
    found.sort(reverse=True)
    for n, where, name in found:
        if n > a.over:
            print(f"{n:5d}  {where}  {name}")
    over60 = sum(1 for n, _, _ in found if n > 60)
    over100 = sum(1 for n, _, _ in found if n > 100)
    print(f"{len(found)} functions; {over60} over 60 lines, {over100} over 100")


if __name__ == "__main__":
    main()
