#!/usr/bin/env python3
"""Checks editor-clients/helix/languages.toml, the Helix configuration for moelsp.

Helix itself is not installed here (not in Debian 12), so the file is checked
by parsing it, then the command it configures is started and spoken to the way
Helix does (initialize with completion support, initialized,
didChangeConfiguration with the config, didOpen, a completion request,
shutdown, exit):

    MOELSP_BINARY=build/cli/moelsp /usr/bin/python3 editor-clients/tests/helix_config_test.py

MOELSP_BINARY replaces the configured command ("moelsp", looked up on PATH
without it); MOELSP_HELIX_CONFIG checks another file. Stdlib only (tomllib: Python 3.11+). Exits 0 when every check
passes, 1 with a message on the first failure.
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.environ.get("MOELSP_HELIX_CONFIG") or os.path.join(HERE, "..", "helix", "languages.toml")

# Language names and language-server names that Helix 25.07 defines (its own
# languages.toml); a user file may only refer to these (or define new ones).
HELIX_LANGUAGES = set("""
    ada adl agda alloy amber astro awk bash bass beancount bibtex bicep bitbake blade blueprint c
    c-sharp cabal caddyfile cairo capnp cel circom clarity clojure cmake codeql comment common-lisp
    cpon cpp crystal css csv cue cylc d dart dbml debian devicetree dhall diff djot docker-compose
    dockerfile dot dtd dune dunstrc earthfile edoc eex ejs elisp elixir elm elvish env erb erlang
    esdl fennel fga fidl fish forth fortran fsharp gas gdscript gemini gherkin ghostty
    git-attributes git-commit git-config git-ignore git-notes git-rebase gjs gleam glimmer glsl gn
    go godot-resource gomod gotmpl gowork gpr graphql gren groovy gts hare haskell
    haskell-persistent hcl heex helm hocon hoon hosts html htmldjango hurl hyprlang idris iex ini
    ink inko janet java javascript jinja jjdescription jq jsdoc json json-ld json5 jsonc jsonnet jsx
    julia just kdl koka kotlin koto latex ld ldif lean ledger llvm llvm-mir llvm-mir-yaml log lpf
    lua luau mail make markdoc markdown markdown-rustdoc markdown.inline matlab mermaid meson mint
    mojo move msbuild nasm nestedtext nginx nickel nim nix nu nunjucks ocaml ocaml-interface odin
    ohm opencl openscad org pascal passwd pem perl pest php php-only pkgbuild pkl po pod ponylang
    powershell prisma prolog properties protobuf prql pug purescript python qml quarto quint r
    racket regex rego rescript rmarkdown robot ron rst ruby rust rust-format-args
    rust-format-args-macro sage scala scheme scss slang slint smali smithy sml snakemake solidity
    sourcepawn spade spicedb sql sshclientconfig starlark strace supercollider svelte sway swift
    systemd t32 tablegen tact task tcl teal templ tera textproto tfvars thrift tlaplus todotxt toml
    tsq tsx twig typescript typespec typst ungrammar unison uxntal v vala vento verilog vhdl vhs vue
    wast wat webc werk wesl wgsl wit wren xit xml xtc yaml yara yuck zig
""".split())
HELIX_SERVERS = set("""
    ada-gpr-language-server ada-language-server als amber-lsp ameba-ls angular
    ansible-language-server asm-lsp astro-ls awk-language-server basedpyright bash-language-server
    bass beancount-language-server bicep-langserver bitbake-language-server blueprint-compiler buf
    cairo-language-server circom-lsp cl-lsp clangd clarinet clojure-lsp cmake-language-server codeql
    crystalline cs csharp-ls cuelsp dart dhall-lsp-server djlsp docker-compose-langserver
    docker-langserver dot-language-server dts-lsp earthlyls elixir-ls elm-language-server elp elvish
    ember-language-server erlang-ls fennel-ls fish-lsp forc forth-lsp fortls fsharp-ls gleam
    glsl_analyzer golangci-lint-lsp gopls graphql-language-service harper-ls haskell-language-server
    helm_ls hyprls idris2-lsp intelephense jdtls jedi jq-lsp jsonnet-language-server julia just-lsp
    koka kotlin-language-server koto-ls lean ltex-ls ltex-ls-plus lua-language-server luau
    markdoc-ls markdown-oxide marksman mesonlsp metals mint mojo-lsp-server neocmakelsp nil
    nimlangserver nimlsp nixd nls nu-lsp ocamllsp ols omnisharp openscad-lsp pasls pbkit
    perlnavigator pest-language-server pkl-lsp prisma-language-server protols
    purescript-language-server pylsp pylyzer pyrefly pyright qmlls quint-language-server r racket
    regols rescript-language-server robotframework_ls ruby-lsp ruff rust-analyzer serve-d slangd
    slint-lsp solargraph solc sourcekit-lsp sourcepawn-studio spade-language-server starpls
    superhtml svelteserver svlangserver swipl systemd-lsp tailwindcss-ls taplo teal-language-server
    templ termux-language-server terraform-ls texlab tinymist tombi ts_query_ls ty
    typescript-language-server typespec vala-language-server vale-ls vhdl_ls vlang-language-server
    vscode-css-language-server vscode-eslint-language-server vscode-html-language-server
    vscode-json-language-server vuels wasm-language-tools wgsl-analyzer yaml-language-server yls zls
""".split())
# Languages the file must cover at least.
REQUIRED = {"python", "rust", "c", "cpp", "javascript", "typescript", "go", "java", "lua", "bash"}


def fail(msg: str) -> None:
    print(f"helix config test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


def server_name(entry) -> str:
    return entry if isinstance(entry, str) else entry.get("name", "") if isinstance(entry, dict) else ""


def check_config() -> dict:
    try:
        with open(CONFIG, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{CONFIG}: {e}")
    servers = cfg.get("language-server", {})
    check(isinstance(servers, dict) and "moelsp" in servers, "no [language-server.moelsp]")
    moelsp = servers["moelsp"]
    check(moelsp.get("command") == "moelsp", f"command should be \"moelsp\", got {moelsp.get('command')!r}")
    check(moelsp.get("args") == ["lsp"], f"args should be [\"lsp\"], got {moelsp.get('args')!r}")
    check(isinstance(moelsp.get("config", {}), dict), "config (initializationOptions) must be a table")
    known = set(moelsp) - {"command", "args", "config", "environment", "timeout", "required-root-patterns"}
    check(not known, f"unknown keys in [language-server.moelsp]: {sorted(known)}")

    languages = cfg.get("language", [])
    check(isinstance(languages, list) and languages, "no [[language]] entries")
    names = [lang.get("name") for lang in languages]
    check(len(names) == len(set(names)), f"a language appears twice: {names}")
    for lang in languages:
        name = lang.get("name")
        check(name in HELIX_LANGUAGES, f"{name!r} is not a Helix language name")
        ls = lang.get("language-servers")
        check(isinstance(ls, list) and len(ls) >= 2, f"{name}: language-servers must list the usual server and moelsp")
        first = server_name(ls[0])
        check(first != "moelsp", f"{name}: another server must come first, moelsp adds completions to it")
        check(first in HELIX_SERVERS, f"{name}: first server {first!r} is not one Helix defines")
        entries = [e for e in ls if server_name(e) == "moelsp"]
        check(len(entries) == 1, f"{name}: moelsp must be listed once")
        entry = entries[0]
        # Completion items, and its commands (:lsp-workspace-command moelsp.snooze):
        # Helix's feature names (helix-core/src/syntax.rs, LanguageServerFeature).
        check(isinstance(entry, dict) and entry.get("only-features") == ["completion", "workspace-command"],
              f"{name}: moelsp must be {{ name = \"moelsp\", only-features = [\"completion\", "
              f"\"workspace-command\"] }}, got {entry!r}")
        for e in ls:
            n = server_name(e)
            check(n in HELIX_SERVERS or n in servers, f"{name}: server {n!r} is defined neither by Helix nor here")
            if isinstance(e, dict):
                check(set(e) <= {"name", "only-features", "except-features"}, f"{name}: bad server entry {e!r}")
    missing = REQUIRED - set(names)
    check(not missing, f"languages missing: {sorted(missing)}")
    print(f"languages.toml: {len(languages)} languages, each with its usual server first and moelsp for completion")
    return moelsp


class Lsp:
    """A minimal LSP client on a child's stdin/stdout."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        self.messages = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1
        self.write_lock = threading.Lock()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cv:
                        self.messages.append(None)
                        self.cv.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                key, _, value = line.decode("ascii", "replace").partition(":")
                if key.lower() == "content-length":
                    length = int(value)
            msg = json.loads(out.read(length))
            if "method" in msg and "id" in msg:  # a request from the server: answer as Helix would
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            with self.cv:
                self.messages.append(msg)
                self.cv.notify_all()

    def send(self, msg):
        body = json.dumps(msg).encode()
        try:
            with self.write_lock:  # the reader thread answers the server's requests
                self.proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            fail(f"the server is gone (exit code {self.proc.wait()}); stderr:\n" + self.err())

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for m in self.messages:
                    if m is None:
                        fail(f"the server closed its output while waiting for {what}; stderr:\n" + self.err())
                    if pred(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0:
                    fail(f"no {what} within {timeout} s; stderr:\n" + self.err())
                self.cv.wait(left)

    def request(self, method, params, timeout=30):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        msg = self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout, f"answer to {method}")
        check("error" not in msg, f"{method} failed: {msg.get('error')}")
        return msg.get("result")

    def err(self):
        return b"".join(self.stderr[-30:]).decode("utf-8", "replace")


def check_server(moelsp: dict) -> None:
    binary = os.environ.get("MOELSP_BINARY") or shutil.which(moelsp["command"])
    check(binary and os.access(binary, os.X_OK),
          f"cannot run {moelsp['command']!r}: set MOELSP_BINARY to the moelsp executable")
    argv = [binary] + moelsp["args"]
    config = moelsp.get("config", {})
    lsp = Lsp(argv)
    try:
        # Helix's client capabilities, in the parts that matter here.
        result = lsp.request("initialize", {
            "processId": os.getpid(),
            "clientInfo": {"name": "helix", "version": "25.07.1"},
            "rootUri": "file:///tmp",
            "initializationOptions": config,
            "capabilities": {
                "textDocument": {
                    "completion": {"completionItem": {"snippetSupport": True, "insertReplaceSupport": True},
                                   "completionItemKind": {}},
                    "synchronization": {"didSave": True},
                },
                "workspace": {"configuration": True, "didChangeConfiguration": {"dynamicRegistration": False},
                              "executeCommand": {"dynamicRegistration": False}},
                "window": {"workDoneProgress": True},
            },
        })
        caps = (result or {}).get("capabilities", {})
        check("completionProvider" in caps, f"initialize: no completionProvider in {caps}")
        check("inlineCompletionProvider" not in caps, "initialize: inline completion declared to a client without it")
        lsp.notify("initialized", {})
        lsp.notify("workspace/didChangeConfiguration", {"settings": config})  # as Helix does after initialized
        print(f"`{' '.join(argv)}` initialized: completionProvider {json.dumps(caps['completionProvider'])}")

        status = lsp.wait_for(lambda m: m.get("method") == "moelsp/status"
                              and m["params"].get("state") in ("ready", "error"), 60, "moelsp/status ready")
        check(status["params"]["state"] == "ready", f"the model did not load: {status['params'].get('message')}")
        uri = "file:///tmp/moelsp_helix_test.py"
        lsp.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "import os\n\n\ndef main():\n    "}})
        items = lsp.request("textDocument/completion", {
            "textDocument": {"uri": uri}, "position": {"line": 4, "character": 4},
            "context": {"triggerKind": 1}})
        check(isinstance(items, dict) and isinstance(items.get("items"), list), f"completion: {items!r}")
        for item in items["items"]:
            check(isinstance(item.get("label"), str) and item["label"], f"completion item without a label: {item}")
        print(f"completion: {len(items['items'])} item(s) {[i['label'] for i in items['items']]}")

        check(lsp.request("shutdown", None) is None, "shutdown: result should be null")
        lsp.notify("exit", None)
        code = lsp.proc.wait(timeout=10)
        check(code == 0, f"the server exited with {code} after shutdown and exit")
    finally:
        if lsp.proc.poll() is None:
            lsp.proc.kill()
            lsp.proc.wait()


def main() -> int:
    moelsp = check_config()
    check_server(moelsp)
    print("helix config test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
