#!/usr/bin/env python3
"""The layering rule of docs/design.md ("Layout"), checked on the includes.

Each top-level module may include its own headers and those of the modules
below it, never one above or beside it: lsp/ and http/ are both front ends
over assist/ and never include each other. engine/'s public headers
(engine/include) do not expose jinja/: the chat-template interpreter is an
implementation detail of engine/model.

    tools/check_layers.py [ROOT]     exit 0 when every include keeps the rule

Prints each include that breaks it, with the file and line.
"""
import pathlib
import re
import sys

# What each module may include, besides itself (ground floor first).
ALLOWED = {
    "util": set(),
    "kernels": set(),
    "jinja": {"util"},
    "engine": {"util", "kernels", "jinja"},
    "assist": {"util", "kernels", "engine"},
    "lsp": {"util", "kernels", "engine", "assist"},
    "http": {"util", "kernels", "engine", "assist"},
    "cli": {"util", "kernels", "engine", "assist", "lsp", "http"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}


def module_of(include: str, here: pathlib.Path, root: pathlib.Path):
    """The module an include names: "engine/model.h" → engine; a relative
    include ("../lsp/x.h", "server_impl.h") is resolved against the file."""
    first = include.split("/", 1)[0]
    if first in ALLOWED and not (here.parent / include).exists():
        return first
    target = (here.parent / include).resolve()
    try:
        rel = target.relative_to(root)
    except ValueError:
        return None
    return rel.parts[0] if rel.parts and rel.parts[0] in ALLOWED else None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1]).resolve()
    problems, files = [], 0
    for module, allowed in ALLOWED.items():
        base = root / module
        if not base.is_dir():
            problems.append(f"{module}/: missing (the layout in docs/design.md names it)")
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            files += 1
            public = path.is_relative_to(base / "include")
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = module_of(m.group(1), path, root)
                if target is None or target == module:
                    continue
                where = f"{path.relative_to(root)}:{n}"
                if target not in allowed:
                    problems.append(f'{where}: {module}/ includes "{m.group(1)}" ({target}/ is not below it)')
                elif module == "engine" and public and target == "jinja":
                    problems.append(f'{where}: a public engine header includes "{m.group(1)}" (jinja/ stays inside)')
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} includes against the layering rule")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
