#!/usr/bin/env python3
"""`moelsp lsp` with the remote backend pointed at a `moelsp serve` this test
starts: greedy completions and chat are byte-identical to the embedded
backend's; a server that is down is an error named in moelsp/status, and the
LSP recovers by itself when the server is back. A secret in an excluded
file (.env) never reaches the server. Over https (a TLS proxy in
front of the same server, its certificate from a throwaway CA made with the
openssl command): the same answers with backend.caFile, on reused keep-alive
connections; refused without the CA or for a name the certificate lacks;
accepted with backend.verifyTls off.

    python3 tests/test_remote_backend.py MOELSP_BINARY

Exits 0 when every check passes, 1 with a message at the first failure.
"""
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "demo"))
from lsp_demo import Client  # noqa: E402  (the README demo's stdlib LSP client)
from hf_double import make_certs  # noqa: E402  (a throwaway CA and a localhost certificate; tests/ is on the path)

BINARY = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOELSP_BINARY", "")
TEXTS = [
    'import os\n\n\ndef list_files(path):\n    """Return the files."""\n    ',
    "def area(w, h):\n    return ",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        ",
]


def fail(msg):
    print(f"remote backend test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def serve(port=0):
    p = subprocess.Popen([BINARY, "serve", "--port", str(port)], stderr=subprocess.PIPE, text=True)
    m = re.search(r"listening on http://[\d.]+:(\d+)", p.stderr.readline())
    if not m:
        fail("moelsp serve did not start")
    return p, int(m.group(1))


def lsp(options):
    c = Client([BINARY, "lsp"])
    c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}}, "initializationOptions": options})
    c.notify("initialized", {})
    deadline = time.time() + 60
    while time.time() < deadline:
        n = c.notes.get(timeout=60)
        if n.get("method") == "moelsp/status" and n["params"]["state"] in ("ready", "error"):
            if n["params"]["state"] == "error":
                fail(f"the LSP failed to start: {n['params'].get('message')}")
            return c
    fail("the LSP was not ready within 60 s")


def answers(c):
    out = []
    for i, t in enumerate(TEXTS):
        uri = f"file:///tmp/remote{i}.py"
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": t}})
        lines = t.split("\n")
        r, _ = c.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                         "position": {"line": len(lines) - 1, "character": len(lines[-1])}, "context": {"triggerKind": 2}})
        out.append([it["insertText"] for it in r["items"]])
    r, _ = c.request("moelsp/chat", {"messages": [{"role": "user", "content": "What is a list?"}]})
    out.append(r["text"])
    return out


class TlsProxy:
    """HTTPS (or, without cert and key, plain HTTP) in front of an http server;
    counts connections and requests and keeps every request body."""

    def __init__(self, upstream_port, cert=None, key=None):
        proxy = self
        self.connections = 0
        self.requests = 0
        self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def setup(self):
                super().setup()
                proxy.connections += 1

            def log_message(self, *args):
                pass

            def do_POST(self):
                proxy.requests += 1
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.bodies.append(body.decode("utf-8", "replace"))
                up = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
                up.request("POST", self.path, body=body, headers=headers)
                r = up.getresponse()
                data = r.read()
                self.send_response(r.status)
                self.send_header("Content-Type", r.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                up.close()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def chat_until_answered(c, failure, seconds=60):
    """Asks a chat again until it is answered (the server is coming back)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            return c.request("moelsp/chat", {"messages": [{"role": "user", "content": "What is a list?"}]})
        except RuntimeError:
            time.sleep(0.5)
    fail(failure)


class DyingServer:
    """A remote that starts an answer and dies in the middle of it: streams
    two events of a chat, then, when told, resets the connection and stops
    listening (as a killed process would)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.streaming = threading.Event()
        self.die = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for word in ("Once", " upon"):
            event = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            conn.sendall(f"data: {json.dumps(event)}\n\n".encode())
        self.streaming.set()
        self.die.wait(60)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, as a crash does
        conn.close()
        self.sock.close()


def check_killed_mid_stream(budget):
    """The remote dies in the middle of a streamed chat: the chat ends with an
    error at once (no hang, no half answer as a success); a server started
    again on the same address is used by the next request."""
    dying = DyingServer()
    c = lsp({**budget, "backend": {"url": f"http://127.0.0.1:{dying.port}", "fimTemplate": "suffix"}})
    outcome = {}

    def chat():
        try:
            c.request("moelsp/chat", {"messages": [{"role": "user", "content": "Tell a story."}]})
            outcome["result"] = "answered"
        except RuntimeError as e:
            outcome["result"] = str(e)

    t = threading.Thread(target=chat, daemon=True)
    t.start()
    if not dying.streaming.wait(30):
        fail("the chat never reached the remote")
    time.sleep(0.3)
    if "result" in outcome:
        fail(f"the chat ended while its answer was still streaming: {outcome}")
    t0 = time.time()
    dying.die.set()
    t.join(timeout=30)
    if t.is_alive():
        fail("a chat whose server died mid-stream did not end within 30 s")
    if outcome["result"] == "answered":
        fail("a chat whose server died mid-stream reported success")
    took = time.time() - t0
    restarted, _ = serve(dying.port)
    try:
        chat_until_answered(c, "the LSP did not recover when a server came back on the address")
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=10)
    print(f"remote backend: killed mid-stream → the chat ends with an error after {took:.2f} s "
          f"({outcome['result'][:50]!r}); a server back on the address → answers again")


def check_https(port, embedded, budget):
    with tempfile.TemporaryDirectory() as d:
        ca, cert, key = make_certs(d)
        proxy = TlsProxy(port, cert, key)
        try:
            url = f"https://localhost:{proxy.port}"
            c = lsp({**budget, "backend": {"url": url, "fimTemplate": "suffix", "caFile": ca}})
            got = answers(c)
            if got != embedded:
                fail(f"https answers differ from embedded ones:\n  embedded {embedded!r}\n  https    {got!r}")
            # A completion that stops early (the end of its block, a loop)
            # closes its connection with the stream unfinished; two chats that
            # run to their end share one.
            c.request("moelsp/chat", {"messages": [{"role": "user", "content": "What is a list?"}]})
            if proxy.connections >= proxy.requests:
                fail(f"no keep-alive reuse: {proxy.connections} connections for {proxy.requests} requests")
            print(f"https: the same answers with backend.caFile; {proxy.requests} requests on {proxy.connections} "
                  "connection(s)")

            def chat_error(options):
                c = lsp({**budget, "backend": options})
                try:
                    c.request("moelsp/chat", {"messages": [{"role": "user", "content": "Hi"}]})
                except RuntimeError as e:
                    return str(e)
                return None

            e = chat_error({"url": url})  # the system's CAs do not know ours
            if not e or "certificate verify failed" not in e:
                fail(f"an unknown CA was not refused: {e!r}")
            e = chat_error({"url": f"https://127.0.0.1:{proxy.port}", "caFile": ca})  # the name is not in the cert
            if not e or "TLS handshake" not in e:
                fail(f"a name the certificate lacks was not refused: {e!r}")
            if chat_error({"url": url, "verifyTls": False}) is not None:
                fail("backend.verifyTls false did not accept the certificate")
            print("https: an unknown CA and a wrong name are refused with the reason; verifyTls off accepts")
        finally:
            proxy.close()


def wait_index(c, files):
    """Until the workspace index has walked its folders and holds `files` files."""
    deadline = time.time() + 60
    while time.time() < deadline:
        st, _ = c.request("moelsp/status", {})
        ix = st.get("index", {})
        if ix.get("state") == "ready" and ix.get("files", 0) >= files:
            return ix
        time.sleep(0.1)
    fail(f"the workspace index did not get ready with {files} files: {st.get('index')}")


def check_secrets(port, budget):
    """A secret never reaches the remote server: not from an excluded file
    (the `exclude` setting's defaults: .env*), open or not, nor from a file
    the project's .gitignore hides; not as other files' context, not from a
    completion inside it, not as chat context. A file that is neither, and
    that the editor never opened, does reach it through the workspace index
    (so the capture can see context at all), until the setting excludes it."""
    proxy = TlsProxy(port)
    root = tempfile.mkdtemp(prefix="moelsp-proj-")
    try:
        secret, secret2 = "sk-live-5ecret0123456789", "sk-live-gitignored-987654"
        disk = {".env": f"API_TOKEN={secret}\n",
                "util.py": "def helper_marker_fn():\n    return 42\n",
                ".gitignore": "local_settings.py\n",
                "local_settings.py": f"def helper_local_fn():\n    return '{secret2}'\n"}
        for name, text in disk.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        uri = lambda name: "file://" + os.path.join(root, name)  # noqa: E731
        c = Client([BINARY, "lsp"])
        c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}},
                                 "rootUri": uri(""), "workspaceFolders": [{"uri": uri(""), "name": "proj"}],
                                 "initializationOptions": {**budget, "backend": {
                                     "url": f"http://127.0.0.1:{proxy.port}", "fimTemplate": "suffix"}}})
        c.notify("initialized", {})
        # The editor opens the secrets and the file being edited, never util.py.
        files = {".env": disk[".env"], "local_settings.py": disk["local_settings.py"],
                 "app.py": "import util\n\n\ndef main():\n    return helper_marker_fn() + helper_local_fn() + "}
        for name, text in files.items():
            c.notify("textDocument/didOpen", {"textDocument": {"uri": uri(name), "languageId": "python", "version": 1,
                                                               "text": text}})
        ix = wait_index(c, 2)  # util.py and app.py

        def complete(name):
            lines = files[name].split("\n")
            r, _ = c.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri(name)}, "position": {
                "line": len(lines) - 1, "character": len(lines[-1])}, "context": {"triggerKind": 2}})
            return r["items"]

        complete("app.py")
        sent = "\n".join(proxy.bodies)
        if "def helper_marker_fn" not in sent:
            fail(f"util.py's definition (from the workspace index) did not reach the server: {sent[:400]!r}")
        for s_ in (secret, "API_TOKEN", secret2, "def helper_local_fn"):
            if s_ in sent:
                fail(f"{s_!r} (an excluded or gitignored file's text) was sent to the remote server: {sent[:400]!r}")
        before = proxy.requests
        for name in (".env", "local_settings.py"):
            if complete(name) or proxy.requests != before:
                fail(f"a completion inside {name} offered something or asked the remote server")
        try:
            c.request("moelsp/chat", {"uri": uri(".env"),
                                      "messages": [{"role": "user", "content": "What is in this file?"}]})
            err = None
        except RuntimeError as e:
            err = str(e)
        if not err or "excluded" not in err or proxy.requests != before:
            fail(f"chat with .env as context was not refused before any request: {err!r}")
        c.notify("workspace/didChangeConfiguration", {"settings": {"exclude": "util.py,.env*"}})
        proxy.bodies.clear()
        complete("app.py")
        if "helper_marker_fn():" in "\n".join(proxy.bodies):
            fail("util.py's text was sent after the exclude setting named it")
        print(f"remote backend: util.py's definition came from the workspace index ({ix['files']} files, "
              f"{ix['chunks']} chunks); .env and a gitignored file never reached the server ({before} requests "
              "seen); the exclude setting took effect without a restart")
    finally:
        proxy.close()
        shutil.rmtree(root, ignore_errors=True)


def check_editor_definitions(port, budget):
    """moelsp/didResolveDefinitions (the editor's language servers' answers)
    puts a definition the index cannot see (a library in the workspace's
    .venv, a folder the index skips) into the prompt, ahead of the index's
    picks; an excluded or gitignored file it names is never sent, nor, with
    a remote backend, a file outside the workspace (no .gitignore there says
    what is private)."""
    proxy = TlsProxy(port)
    root, lib = tempfile.mkdtemp(prefix="moelsp-proj-"), tempfile.mkdtemp(prefix="moelsp-lib-")
    try:
        secret = "sk-live-defs-4242424242"
        os.makedirs(os.path.join(root, ".venv", "site", "geomlib"))
        hull = os.path.join(root, ".venv", "site", "geomlib", "hull.py")
        with open(hull, "w") as f:
            f.write('import math\n\n\ndef convex_hull_area(points):\n    """Hull area (library marker)."""\n'
                    "    return 0.0\n")
        outside = os.path.join(lib, "outside_lib.py")
        with open(outside, "w") as f:
            f.write("def outside_fn():\n    return 'outside marker'\n")
        disk = {".gitignore": "private.py\n", "private.py": f"def private_fn():\n    return '{secret}'\n",
                ".env": f"TOKEN={secret}\n"}
        for name, text in disk.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        uri = lambda path: "file://" + path  # noqa: E731
        app = os.path.join(root, "app.py")
        text = ("from geomlib.hull import convex_hull_area\nfrom private import private_fn\n\n\n"
                "def main(pts):\n    return convex_hull_area(pts) + private_fn() + load_env() + outside_fn() + ")
        c = Client([BINARY, "lsp"])
        c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}},
                                 "rootUri": uri(root), "workspaceFolders": [{"uri": uri(root), "name": "proj"}],
                                 "initializationOptions": {**budget, "backend": {
                                     "url": f"http://127.0.0.1:{proxy.port}", "fimTemplate": "suffix"}}})
        c.notify("initialized", {})
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri(app), "languageId": "python", "version": 1,
                                                           "text": text}})
        wait_index(c, 1)
        lines = text.split("\n")

        def complete():  # (asked for: the answer cache would repeat the first answer without a request)
            proxy.bodies.clear()
            c.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri(app)}, "position": {
                "line": len(lines) - 1, "character": len(lines[-1])}, "context": {"triggerKind": 1}})
            return "\n".join(proxy.bodies)

        if "library marker" in complete():
            fail("a library outside the workspace reached the prompt before the editor named it")
        at = lambda line: {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 5}}  # noqa: E731
        c.notify("moelsp/didResolveDefinitions", {"textDocument": {"uri": uri(app)}, "definitions": [
            {"name": "convex_hull_area", "location": {"uri": uri(hull), "range": at(3)}},
            {"name": "private_fn", "location": {"uri": uri(os.path.join(root, "private.py")), "range": at(0)}},
            {"name": "load_env", "location": {"uri": uri(os.path.join(root, ".env")), "range": at(0)}},
            {"name": "not_near_the_cursor", "location": {"uri": uri(hull), "range": at(0)}},
            {"name": "outside_fn", "location": {"uri": uri(outside), "range": at(0)}}]})
        sent = complete()
        if "def convex_hull_area(points):" not in sent or "library marker" not in sent:
            fail(f"the editor's definition did not reach the prompt: {sent[:600]!r}")
        if ".venv/site/geomlib/hull.py" not in sent:
            fail(f"the library snippet is not headed by its path in the workspace: {sent[:600]!r}")
        if "outside marker" in sent:
            fail("a file outside the workspace went to the remote backend")
        if secret in sent or "private_fn():\n    return" in sent:
            fail(f"a gitignored or excluded file the editor named was sent: {sent[:600]!r}")
        if "import math" in sent:
            fail("a definition whose name is not near the cursor was sent")
        # The lines just edited in another open file join the context too.
        other = os.path.join(root, "notes.py")
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri(other), "languageId": "python", "version": 1,
                                                           "text": "import os\n" * 30}})
        c.notify("textDocument/didChange", {"textDocument": {"uri": uri(other), "version": 2}, "contentChanges": [
            {"range": at(20), "text": "def recent_edit_marker(x):\n    return x\n"}]})
        sent = complete()
        if "def recent_edit_marker(x):" not in sent:
            fail(f"the lines just edited in notes.py did not reach the prompt: {sent[:800]!r}")
        # ...and the lines another editor shows (a split with a file being called into).
        shown = os.path.join(root, "shown.py")
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri(shown), "languageId": "python", "version": 1,
                                                           "text": "x = 1\n" * 40 + "def viewed_marker_fn(y):\n"
                                                                   "    return y\n"}})
        if "viewed_marker_fn" in complete():
            fail("a file that is open but not shown reached the prompt")
        c.notify("moelsp/didChangeVisibleRanges", {"textDocument": {"uri": uri(shown)},
                                                   "ranges": [{"start": {"line": 36, "character": 0},
                                                               "end": {"line": 42, "character": 0}}]})
        if "def viewed_marker_fn(y):" not in complete():
            fail("the lines another editor shows did not reach the prompt")
        st, _ = c.request("moelsp/status", {})
        ed = st["index"]["editorDefinitions"]
        if st["index"]["viewedRanges"] != 1:
            fail(f"index.viewedRanges: {st['index']['viewedRanges']}")
        if ed["received"] != 5 or ed["sent"] < 1:
            fail(f"index.editorDefinitions: {ed}")
        print(f"editor definitions: a .venv library's convex_hull_area reached the prompt only once the editor named "
              f"it ({ed}); the gitignored, excluded and outside files it named did not; another file's edit and another editor's visible lines reached it too")
    finally:
        proxy.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(lib, ignore_errors=True)


def main():
    if not BINARY or not os.access(BINARY, os.X_OK):
        fail("give the moelsp binary as the first argument")
    server, port = serve()
    try:
        deadline = time.time() + 60
        import urllib.request
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            except Exception:
                time.sleep(0.2)
        # A generous budget: the embedded engine's is counted from its first
        # token; the remote's the same way, but a busy machine still varies.
        # No other files' context here: the remote side sees it inside its
        # prompt, the embedded engine ahead of its FIM tokens (as llama.cpp's
        # /infill does), so their answers may differ. check_secrets covers it.
        budget = {"completion": {"timeBudgetMs": 20000, "contextTokens": 0}}
        embedded = answers(lsp(budget))
        remote_lsp = lsp({**budget, "backend": {"url": f"http://127.0.0.1:{port}", "fimTemplate": "suffix"}})
        remote = answers(remote_lsp)
        if embedded != remote:
            fail(f"remote answers differ from embedded ones:\n  embedded {embedded!r}\n  remote   {remote!r}")
        if not any(embedded[:-1]) or not embedded[-1]:
            fail(f"nothing to compare: {embedded!r}")
        st, _ = remote_lsp.request("moelsp/status", {})
        if st.get("backend", {}).get("url") != f"http://127.0.0.1:{port}" or st["backend"]["lastError"]:
            fail(f"moelsp/status does not show a healthy backend: {st.get('backend')}")
        print(f"remote backend: {len(TEXTS)} completions and a chat byte-identical to the embedded backend")
        check_https(port, embedded, budget)
        check_secrets(port, {"completion": {"timeBudgetMs": 20000}})
        check_editor_definitions(port, {"completion": {"timeBudgetMs": 20000}})

        check_killed_mid_stream(budget)

        # The server goes away: a clear error, named in the status; back: answers again.
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        r = None
        try:
            remote_lsp.request("moelsp/chat", {"messages": [{"role": "user", "content": "Hi"}]})
        except RuntimeError as e:
            r = str(e)
        if not r or "cannot connect" not in r:
            fail(f"a chat with the server down: {r!r}")
        st, _ = remote_lsp.request("moelsp/status", {})
        if "cannot connect" not in st["backend"]["lastError"]:
            fail(f"the status does not name the failure: {st['backend']}")
        server, _ = serve(port)
        chat_until_answered(remote_lsp, "the LSP did not recover when the server came back")
        st, _ = remote_lsp.request("moelsp/status", {})
        if st["backend"]["lastError"]:
            fail(f"the error stays after recovery: {st['backend']}")
        print("remote backend: down → a clear error; back → answers again")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    print("remote backend test passed")


if __name__ == "__main__":
    main()
