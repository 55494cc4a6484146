#!/usr/bin/env python3
"""Expected chat-template outputs from Python's Jinja2, for moelsp's Jinja interpreter.

Renders every template in tests/data/templates/manifest.json with every conversation in
tests/data/templates/conversations/ the way HuggingFace transformers' apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, the {% generation %}
tag, raise_exception, strftime_now and HF's own tojson filter), in each variant:
add_generation_prompt false/true and, for templates that read enable_thinking, enable_thinking
unset/true/false. strftime_now reads a fixed clock (NOW, shown as UTC) so the outputs are
reproducible; the C++ test passes the same time.

  tools/jinja_expect.py           writes tests/data/templates/expected/<template>.json
  tools/jinja_expect.py --check   renders again and fails if any committed expectation differs

Each expected file maps a case name ("tool_call add_generation_prompt=true enable_thinking=false")
to the rendered text, or to {"error": "..."} when Jinja2 raises (tests/test_jinja.cpp then expects
moelsp to refuse the case too). Needs python3 and jinja2 only (Debian: python3-jinja2).
"""

import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "templates")
NOW = 1736944496  # 2025-01-15 12:34:56 UTC; tests/test_jinja.cpp uses the same


class AssistantTracker(jinja2.ext.Extension):
    """HF's {% generation %} … {% endgeneration %}: marks assistant text; renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    """The environment of transformers' _compile_jinja_template."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    now = datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).replace(tzinfo=None)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def conversations():
    folder = os.path.join(ROOT, "conversations")
    return {name[:-5]: load_json(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
            if name.endswith(".json")}


def variants(source):
    thinking = [None, True, False] if "enable_thinking" in source else [None]
    for agp in (False, True):
        for think in thinking:
            yield agp, think


def case_name(conversation, agp, think):
    name = "%s add_generation_prompt=%s" % (conversation, str(agp).lower())
    if think is not None:
        name += " enable_thinking=%s" % str(think).lower()
    return name


def render_all(env, entry, convs):
    with open(os.path.join(ROOT, entry["file"]), encoding="utf-8") as f:
        source = f.read()
    try:
        template = env.from_string(source)
    except jinja2.exceptions.TemplateError as e:
        template, compile_error = None, {"error": "%s: %s" % (type(e).__name__, e)}
    out = {}
    for cname, conv in convs.items():
        for agp, think in variants(source):
            # The variables transformers passes: messages, tools (None without), documents,
            # add_generation_prompt, the special tokens, then the caller's keyword arguments.
            variables = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
                         "add_generation_prompt": agp}
            for key in ("bos_token", "eos_token"):
                if entry.get(key) is not None:
                    variables[key] = entry[key]
            if think is not None:
                variables["enable_thinking"] = think
            if template is None:
                out[case_name(cname, agp, think)] = compile_error
                continue
            try:
                out[case_name(cname, agp, think)] = template.render(**variables)
            except Exception as e:  # noqa: BLE001 - any Jinja or Python error is an expected refusal
                out[case_name(cname, agp, think)] = {"error": "%s: %s" % (type(e).__name__, e)}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed expectations")
    args = parser.parse_args()
    env = make_environment()
    convs = conversations()
    manifest = load_json(os.path.join(ROOT, "manifest.json"))
    expected_dir = os.path.join(ROOT, "expected")
    os.makedirs(expected_dir, exist_ok=True)
    failures = 0
    for name, entry in manifest["templates"].items():
        rendered = render_all(env, entry, convs)
        path = os.path.join(expected_dir, name + ".json")
        if args.check:
            committed = load_json(path) if os.path.exists(path) else None
            if committed != rendered:
                failures += 1
                differing = sorted(k for k in set(committed or {}) | set(rendered)
                                   if (committed or {}).get(k) != rendered.get(k))
                print("%s: differs from Jinja2 %s in %d case(s): %s" % (path, jinja2.__version__, len(differing),
                                                                      ", ".join(differing[:5])))
        else:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(rendered, f, ensure_ascii=False, indent=1, sort_keys=True)
                f.write("\n")
    if args.check:
        cases = sum(len(load_json(os.path.join(expected_dir, n + ".json"))) for n in manifest["templates"])
        print("%d templates, %d cases: %s" % (len(manifest["templates"]), cases,
                                              "all as committed" if failures == 0 else "%d differ" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
