#!/usr/bin/env python3
"""A test double of the user's own language server (pyright, clangd…) for the
editor-client tests: it answers textDocument/definition for a name that a
`def NAME` line of any file in its root defines (the file's first such line),
nothing else. Full document sync. Stdlib only."""
import json
import os
import re
import sys

root = sys.argv[1]
docs = {}


def read():
    headers = {}
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return json.loads(sys.stdin.buffer.read(int(headers["content-length"])))


def send(msg):
    body = json.dumps(msg).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def definition(params):
    text = docs.get(params["textDocument"]["uri"], "")
    lines = text.split("\n")
    pos = params["position"]
    line = lines[pos["line"]] if pos["line"] < len(lines) else ""
    for m in re.finditer(r"[A-Za-z_]\w*", line):
        if m.start() <= pos["character"] <= m.end():
            name = m.group(0)
            break
    else:
        return None
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            with open(path) as fh:
                for i, l in enumerate(fh):
                    if re.match(r"\s*def %s\b" % re.escape(name), l):
                        r = {"start": {"line": i, "character": 0}, "end": {"line": i, "character": len(l.rstrip())}}
                        return {"uri": "file://" + path, "range": r}
    return None


while True:
    m = read()
    method, mid = m.get("method"), m.get("id")
    p = m.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"capabilities": {"textDocumentSync": 1,
                                                                      "definitionProvider": True}}})
    elif method == "textDocument/didOpen":
        docs[p["textDocument"]["uri"]] = p["textDocument"]["text"]
    elif method == "textDocument/didChange":
        docs[p["textDocument"]["uri"]] = p["contentChanges"][-1]["text"]
    elif method == "textDocument/definition":
        send({"jsonrpc": "2.0", "id": mid, "result": definition(p)})
    elif method == "shutdown":
        send({"jsonrpc": "2.0", "id": mid, "result": None})
    elif method == "exit":
        sys.exit(0)
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": method}})
