#!/usr/bin/env python3
"""`moelsp lsp` as a process: a client that closes the server's stdout (but
keeps stdin open) gets an exit with a message, not a silent death by SIGPIPE;
a model that fails to load is logged as an error on stderr at the default
level and in --log-file; memory taken by a large document (20 MB opened,
completed in, replaced five times in one write, closed) is given back.

    python3 tests/test_lsp_process.py MOELSP_BINARY
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

BINARY = sys.argv[1] if len(sys.argv) > 1 else ""


def fail(msg):
    print(f"lsp process test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def frame(obj):
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "demo"))
from lsp_demo import Client  # noqa: E402  (the README demo's stdlib LSP client)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024


def large_document_memory():
    model = os.path.join(HERE, "data", "reference", "qwen3moe-ref.gguf")
    if not os.path.exists(model):
        fail(f"missing test data {model}")
    c = Client([BINARY, "lsp"])
    c.request("initialize", {"capabilities": {}, "initializationOptions": {
        "model": model, "completion": {"debounceMs": 0, "maxTokens": 8}}})
    c.notify("initialized", {})
    while True:
        m = c.notes.get(timeout=60)
        if m.get("method") == "moelsp/status" and m["params"]["state"] in ("ready", "error"):
            if m["params"]["state"] != "ready":
                fail(f"the model did not load: {m}")
            break
    uri = "file:///big.py"

    def complete(line):  # raises on an error answer
        c.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": 4}, "context": {"triggerKind": 2}})

    # The baseline: the engine has run once (its buffers are allocated).
    c.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": "def f(x):\n    \n"}})
    complete(1)
    c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    c.request("moelsp/status")
    base = rss_mb(c.proc.pid)
    doc = "".join(f"    value = compute(value, {i})\n" for i in range(600000))  # 20 MB
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": doc}})
    for k in range(3):
        complete(300000 + k)
    # Five whole-text replacements in one write.
    c.proc.stdin.write(b"".join(frame({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": 2 + k}, "contentChanges": [{"text": doc}]}}) for k in range(5)))
    c.proc.stdin.flush()
    complete(100)
    opened = rss_mb(c.proc.pid)
    c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    c.request("moelsp/status")
    closed = rss_mb(c.proc.pid)
    c.request("shutdown")
    c.notify("exit", None)
    c.proc.wait(timeout=20)
    mb = len(doc) / 2**20
    print(f"a {mb:.0f} MB document: RSS {base:.0f} MB before, {opened:.0f} MB open (after 4 completions and 5 "
          f"replacements), {closed:.0f} MB after closing")
    # Open: the document and a little; each completion used to copy it (and
    # glibc kept every transient copy of the messages mapped).
    if opened - base > 3 * mb:
        fail(f"RSS grew {opened - base:.0f} MB for a {mb:.0f} MB document")
    if closed - base > mb:
        fail(f"closing the document gave back too little: {closed - base:.0f} MB above the baseline")


def main():
    if not BINARY or not os.access(BINARY, os.X_OK):
        fail("give the moelsp binary as the first argument")
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "moelsp.log")
        # stdout is a pipe whose read end we close at once; stdin stays open.
        r, w = os.pipe()
        p = subprocess.Popen([BINARY, "--log-file", log, "lsp", "-m", "/no/such/model.gguf"], stdin=subprocess.PIPE,
                             stdout=w, stderr=subprocess.PIPE)
        os.close(w)
        os.close(r)
        p.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}))
        p.stdin.flush()
        try:
            code = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("the server kept running with its stdout closed")
        err = p.stderr.read().decode(errors="replace")
        p.stdin.close()
        if code == -signal.SIGPIPE:
            fail("killed by SIGPIPE")
        if code == 0 or "closed moelsp's output" not in err:
            fail(f"exit {code} without saying why: {err[-300:]!r}")
        print(f"stdout closed by the client: exit {code} with \"the client closed moelsp's output\"")

        # A failed load is an error on stderr at the default level (warn), and in the log file.
        p = subprocess.Popen([BINARY, "--log-file", log, "lsp", "-m", "/no/such/model.gguf"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}))
        p.stdin.flush()
        time.sleep(1.5)
        out, err = p.communicate(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}) +
                                 frame({"jsonrpc": "2.0", "method": "exit"}), timeout=20)
        err = err.decode(errors="replace")
        if p.returncode != 0:
            fail(f"shutdown + exit gave {p.returncode}")
        if "[error]" not in err or "/no/such/model.gguf" not in err:
            fail(f"the failed load is not an error on stderr: {err[-400:]!r}")
        with open(log) as f:
            text = f.read()
        if "/no/such/model.gguf" not in text:
            fail(f"--log-file does not have it: {text[-300:]!r}")
        if b"window/showMessage" not in out:
            fail("the client was not shown the failure")
        print("a failed load: an error on stderr and in --log-file, and window/showMessage to the client")
    large_document_memory()
    print("lsp process test passed")


if __name__ == "__main__":
    main()
