#!/usr/bin/env python3
"""The man page and the bash completions of moelsp, generated from its --help
(CLI11's layout), so both say what the program does:

    tools/make_manpage.py BINARY --man OUT/moelsp.1.gz --bash OUT/moelsp

The man page has the program's options, then a section per subcommand with
its usage, positionals, options and footer. The completion offers the
subcommands, each one's options, and an option's choices ({a,b,c} in its
help) after it; elsewhere it falls back to file names.
"""
import argparse
import gzip
import os
import re
import subprocess


def help_of(binary, *sub):
    out = subprocess.run([binary, *sub, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    return out.replace(binary, "moelsp")


def parse(text):
    """{'about', 'usage', 'sections': {name: [(term, desc)]}, 'footer'}"""
    lines = text.rstrip("\n").split("\n")
    doc = {"about": "", "usage": "", "sections": {}, "footer": []}
    section = None
    for i, line in enumerate(lines):
        if line.startswith("Usage: "):
            doc["usage"] = line[len("Usage: "):]
            doc["about"] = " ".join(ln.strip() for ln in lines[:i] if ln.strip())
        elif re.fullmatch(r"[A-Z][A-Za-z ]*:", line):
            section = line[:-1]
            doc["sections"][section] = []
        elif section and line.startswith("  ") and not line.startswith("    ") and line.strip():
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            doc["sections"][section].append([parts[0], parts[1] if len(parts) > 1 else ""])
        elif section and line.startswith("    ") and doc["sections"][section]:
            entry = doc["sections"][section][-1]
            entry[1] = (entry[1] + " " + line.strip()).strip()
        elif line.strip() and doc["usage"]:
            section = None
            doc["footer"].append(line.strip())
    return doc


def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + s if s[:1] in (".", "'") else s


def entries(out, items):
    for term, desc in items:
        out += [".TP", f"\\fB{roff(term)}\\fR", roff(desc) if desc else ""]


def man_page(binary):
    top = parse(help_of(binary))
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    out = [f'.TH MOELSP 1 "" "{roff(version)}" "User Commands"', ".SH NAME", f"moelsp \\- {roff(top['about'].removeprefix('moelsp: '))}",
           ".SH SYNOPSIS", f".B moelsp\n{roff(top['usage'].removeprefix('moelsp').strip())}", ".SH DESCRIPTION",
           roff("A language server (moelsp lsp, the default when stdin is not a terminal) and an HTTP server "
                "(moelsp serve) over an embedded inference engine for Mixture-of-Experts models, with commands "
                "to get, inspect, run and measure models. Every subcommand takes --help."),
           ".SH OPTIONS"]
    entries(out, top["sections"].get("Options", []))
    out.append(".SH COMMANDS")
    for name, desc in top["sections"].get("Subcommands", []):
        sub = parse(help_of(binary, name))
        out += [f".SS {roff(sub['usage'])}", roff(desc)]
        for section in ("Positionals", "Options"):
            if sub["sections"].get(section):
                out.append(f".PP\n\\fI{section}:\\fR")
                entries(out, sub["sections"][section])
        if sub["footer"]:
            out += [".PP", roff(" ".join(sub["footer"]))]
    out += [".SH FILES", roff("~/.config/moelsp/config.toml (settings), ~/.cache/moelsp/models (moelsp pull), "
                              "/usr/share/moelsp/moelsp-default.gguf (the embedded default model), "
                              "/usr/lib/moelsp/libmoelsp_cuda.so (the CUDA backend, loaded when the CUDA runtime "
                              "is installed)."),
            ".SH SEE ALSO", roff("The README and docs/ of the moelsp sources; moelsp settings lists every setting.")]
    return "\n".join(out) + "\n"


def completion(binary):
    top = parse(help_of(binary))
    subs = [name for name, _ in top["sections"].get("Subcommands", [])]
    cases, choices = [], {}

    def opts_of(doc):
        names = []
        for term, _ in doc["sections"].get("Options", []):
            flags = term.split(" ")[0]
            m = re.search(r":\{([^}]*)\}", term)
            for flag in flags.split(","):
                names.append(flag)
                if m:
                    choices[flag] = m.group(1).replace(",", " ")
        return names

    cases.append(f'    "") opts="{" ".join(subs + opts_of(top))}" ;;')
    for name in subs:
        cases.append(f'    {name}) opts="{" ".join(opts_of(parse(help_of(binary, name))))}" ;;')
    choice_cases = "\n".join(f'    {flag}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); return ;;'
                             for flag, words in sorted(choices.items()))
    return f"""# bash completion for moelsp (generated from its --help by tools/make_manpage.py)
_moelsp() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} sub="" i opts
  local subs="{" ".join(subs)}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ " $subs " == *" ${{COMP_WORDS[i]}} "* ]]; then sub=${{COMP_WORDS[i]}}; break; fi
  done
  case $prev in
{choice_cases}
  esac
  case $sub in
{chr(10).join(cases)}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ -z $sub ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  fi
}}
complete -o default -F _moelsp moelsp
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--man", help="write the man page here, gzipped (Debian: gzip -9n)")
    ap.add_argument("--bash", help="write the bash completion script here")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    if a.man:
        os.makedirs(os.path.dirname(os.path.abspath(a.man)), exist_ok=True)
        with open(a.man, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                     compresslevel=9) as f:
            f.write(man_page(binary).encode())
    if a.bash:
        os.makedirs(os.path.dirname(os.path.abspath(a.bash)), exist_ok=True)
        with open(a.bash, "w") as f:
            f.write(completion(binary))


if __name__ == "__main__":
    main()
