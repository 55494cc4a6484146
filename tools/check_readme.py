#!/usr/bin/env python3
"""Keeps the README true to the program (a test; the settings table has its
own in tests/test_settings.cpp):

- it stays a user's guide of at most 400 lines (the design, the protocol
  details and the benchmark tables live in docs/);
- its *Commands* list names exactly the subcommands `moelsp --help` lists,
  and docs/commands.md describes each of them;
- every relative link in the README and docs/ leads to a file that exists.

    tools/check_readme.py MOELSP_BINARY [ROOT]
"""
import pathlib
import re
import subprocess
import sys

MAX_LINES = 400


def subcommands(binary: str) -> set:
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    names, inside = set(), False
    for line in out.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and re.match(r"^  [a-z]", line):
            names.add(line.split()[0])
    return names


def commands_block(readme: str) -> set:
    """The subcommands the README's *Commands* section lists (its code block)."""
    section = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    names = set()
    for line in block.splitlines():
        m = re.match(r"^moelsp ([a-z]+)(?: / ([a-z]+))?", line)
        if m:
            names.update(n for n in m.groups() if n)
    return names


def broken_links(path: pathlib.Path) -> list:
    text = path.read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            bad.append(f"{path.name}: link to {target}: no such file")
    return bad


def main() -> int:
    binary = sys.argv[1]
    root = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else pathlib.Path(__file__).resolve().parents[1])
    readme = (root / "README.md").read_text()
    problems = []
    lines = readme.count("\n")
    if lines > MAX_LINES:
        problems.append(f"README.md has {lines} lines, more than {MAX_LINES}: move details to docs/")
    real, listed = subcommands(binary), commands_block(readme)
    if not real:
        problems.append("moelsp --help lists no subcommands")
    for name in sorted(real - listed):
        problems.append(f"README.md's Commands section does not list `moelsp {name}`")
    for name in sorted(listed - real):
        problems.append(f"README.md's Commands section lists `moelsp {name}`, which moelsp --help does not have")
    reference = (root / "docs" / "commands.md").read_text()
    for name in sorted(real):
        if not re.search(rf"^moelsp {name}\b", reference, re.M):
            problems.append(f"docs/commands.md does not describe `moelsp {name}`")
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        problems.extend(broken_links(doc))
    for p in problems:
        print(p)
    print(f"check_readme: {lines} lines, {len(real)} subcommands, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
