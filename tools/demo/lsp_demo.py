#!/usr/bin/env python3
"""The README's main command: drive `moelsp lsp` as an editor would.

Starts the server on the embedded default model, initializes, opens
tools/demo/sample.py with one line cut out at each of three holes, asks for an
inline completion at each hole (the cursor inside a function), types a few
characters of the suggestion to show type-through, asks a chat question about
the file, and prints what came back with latencies. Python standard library
only (no pip, no npm): JSON-RPC over the server's stdin/stdout.

usage: lsp_demo.py MOELSP_BINARY [SAMPLE_FILE] [--model FILE]
"""
import json
import os
import subprocess
import sys
import threading
import time
import queue

HOLES = [  # (line to cut out, text before the cursor on that line is kept)
    ("                yield os.path.join(dirpath, name)\n", "                "),
    ("        counts[word] = counts.get(word, 0) + 1\n", "        counts["),
    ("    return lines\n", "    "),
]
QUESTION = "What does `find_files` do?"


class Client:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.next_id = 0
        self.replies = {}
        self.cond = threading.Condition()
        self.notes = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.replies["eof"] = True
                        self.cond.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            msg = json.loads(out.read(length))
            if "id" in msg and "method" in msg:  # a request from the server
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            elif "id" in msg:
                with self.cond:
                    self.replies[msg["id"]] = msg
                    self.cond.notify_all()
            else:
                self.notes.put(msg)

    def send(self, msg):
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params=None, timeout=60):
        self.next_id += 1
        rid = self.next_id
        t0 = time.monotonic()
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self.cond:
            if not self.cond.wait_for(lambda: rid in self.replies or "eof" in self.replies, timeout):
                raise RuntimeError(f"{method}: no answer in {timeout} s")
            if rid not in self.replies:
                raise RuntimeError(f"{method}: the server exited:\n" + b"".join(self.stderr).decode(errors="replace"))
            msg = self.replies.pop(rid)
        ms = (time.monotonic() - t0) * 1000
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error'].get('message')}")
        return msg.get("result"), ms

    def complete_at_end(self, uri, text, trigger=1):
        """Opens `text` as a Python document at `uri` and asks for an inline
        completion at its end (trigger 1: asked for, 2: as typed): the
        result and its latency in ms."""
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                              "text": text}})
        return self.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                            "position": position(text, len(text)), "context": {"triggerKind": trigger}})


def position(text, offset):
    line = text.count("\n", 0, offset)
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return {"line": line, "character": len(text[offset - col:offset].encode("utf-16-le")) // 2}


def show(label, text):
    print(f"  {label:<9}", json.dumps(text) if text is not None else "(none)")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    binary = args[0]
    sample_path = args[1] if len(args) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample.py")
    argv = [binary, "lsp"]
    if "--model" in sys.argv:
        argv += ["--model", sys.argv[sys.argv.index("--model") + 1]]
    sample = open(sample_path, encoding="utf-8").read()
    t_start = time.monotonic()
    c = Client(argv)
    init, ms = c.request("initialize", {
        "processId": os.getpid(), "rootUri": None,
        "capabilities": {"textDocument": {"inlineCompletion": {}}, "window": {"workDoneProgress": True}},
        "initializationOptions": {"completion": {"maxTokens": 48}, "chat": {"maxTokens": 80}}})
    c.notify("initialized", {})
    print(f"initialize: {init['serverInfo']['name']} {init['serverInfo'].get('version', '')} answered in {ms:.0f} ms")
    # Wait for the model (moelsp/status notifications).
    t0 = time.monotonic()
    while True:
        note = c.notes.get(timeout=60)
        if note.get("method") == "moelsp/status" and note["params"].get("state") in ("ready", "error"):
            st = note["params"]
            break
    if st["state"] != "ready":
        sys.exit(f"model failed to load: {st.get('message')}")
    status, _ = c.request("moelsp/status")
    plan = status.get("plan", {})
    print(f"model: {status.get('model')} ready in {(time.monotonic() - t0) * 1000:.0f} ms "
          f"({plan.get('backend')}, {plan.get('threads')} threads, context {plan.get('contextSize')})")

    uri = "file://" + os.path.abspath(sample_path)
    version = 1
    for n, (line, keep) in enumerate(HOLES, 1):
        at = sample.find(line)
        if at < 0:
            sys.exit(f"sample file lacks the line {line!r}")
        text = sample[:at] + keep + sample[at + len(line):]  # the line cut out after `keep`
        cursor = at + len(keep)
        method = "textDocument/didOpen" if n == 1 else "textDocument/didChange"
        if n == 1:
            c.notify(method, {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}})
        else:
            version += 1
            c.notify(method, {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]})
        here = position(text, cursor)
        fn = text.rfind("\ndef ", 0, cursor)
        print(f"\n[{n}] inline completion at line {here['line'] + 1}, column {here['character'] + 1}, inside "
              f"`{text[fn + 5:text.find('(', fn)]}`:")
        res, ms = c.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": here, "context": {"triggerKind": 2}})
        items = res.get("items", []) if res else []
        show("typed", text[text.rfind("\n", 0, cursor) + 1:cursor])
        show("got", items[0]["insertText"] if items else None)
        show("original", line[len(keep):].rstrip("\n"))
        print(f"  latency   {ms:.0f} ms")
        if n == 1 and items and len(items[0]["insertText"]) > 3:
            # Type the suggestion's first three characters: the server answers from its cache.
            typed = items[0]["insertText"][:3]
            version += 1
            text = text[:cursor] + typed + text[cursor:]
            c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                "contentChanges": [{"text": text}]})
            res, ms = c.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": position(text, cursor + len(typed)),
                "context": {"triggerKind": 2}})
            items = res.get("items", []) if res else []
            print(f"  typed {typed!r} more: {items[0]['insertText'] if items else '(none)'!r} in {ms:.0f} ms "
                  "(type-through)")

    version += 1
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": sample}]})
    print(f"\n[chat] {QUESTION}  (the whole file as context)")
    streamed = []
    res, ms = c.request("moelsp/chat", {"messages": [{"role": "user", "content": QUESTION}], "uri": uri,
                                        "partialResultToken": "demo-chat"}, timeout=120)
    while not c.notes.empty():
        note = c.notes.get()
        if note.get("method") == "$/progress" and note["params"].get("token") == "demo-chat":
            streamed.append(note["params"]["value"].get("text", ""))
    print("  " + res["text"].strip().replace("\n", "\n  "))
    print(f"  ({len(streamed)} streamed parts, finish: {res['finishReason']}, {res.get('tokensPerSecond', 0):.0f} tokens/s, "
          f"{ms:.0f} ms)")

    status, _ = c.request("moelsp/status")
    c.request("shutdown")
    c.notify("exit", None)
    code = c.proc.wait(timeout=10)
    print(f"\nshutdown: exit code {code}; whole session {time.monotonic() - t_start:.1f} s; "
          f"server's completion telemetry: {json.dumps(status.get('completions', {}))}")
    sys.exit(code)


if __name__ == "__main__":
    main()
