"""A double of the Hugging Face hub for the tests of `moelsp pull`: the hub
(its tree API and `resolve/`, which redirects) and the CDN the downloads are
redirected to, each an http.server on 127.0.0.1, plain or TLS; and a small
forward proxy (CONNECT tunnels for https, absolute-form requests for http).

    with HubDouble() as hub:
        hub.add_repo("owner/repo", {"model-Q8_0.gguf": data, "README.md": b"hi"})
        hub.endpoint            # http://127.0.0.1:PORT, for HF_ENDPOINT
        hub.hub_log.requests(path_prefix="/api/models/")

What it answers, as huggingface.co does:
- GET /api/models/OWNER/REPO/tree/REV[/PATH][?recursive=true][&cursor=N]:
  a JSON array of {"type": "file", "oid", "size", "path", "lfs": {"oid",
  "size", "pointerSize"}} (lfs for .gguf files only) and {"type":
  "directory", ...}; `page_size` entries a page, with a Link header
  `<absolute url>; rel="next"` while more follow. GET /api/models/OWNER/REPO
  (and .../revision/REV): the repository's info with its "siblings".
- A repository it lacks: 404, X-Error-Code: RepoNotFound, {"error":
  "Repository not found"}; a gated one without the right token (Authorization:
  Bearer TOKEN): 401, X-Error-Code: GatedRepo; another revision: 404
  RevisionNotFound.
- GET|HEAD /OWNER/REPO/resolve/REV/PATH: for a .gguf, 302 Found to the CDN
  (an absolute URL on the CDN's server, signed with a `sig` query parameter
  the CDN checks; or, with `relative_redirect`, a relative /cdn/... on the
  hub itself) with X-Linked-Size, X-Linked-Etag: "<sha256>", ETag and
  X-Repo-Commit; any other file: 200 with its bytes.
- The CDN: 200 with Content-Length and Accept-Ranges: bytes; Range: bytes=N-
  (or N-M) answered 206 with Content-Range: bytes N-M/TOTAL; 416 past the
  end; 403 without a signature the hub issued.

Fault injection (each keyed by the file's path in its repository):
- cut_after[path] = N: the CDN's next GET answer for it that runs to the
  file's end and is longer than N bytes (a download, whole or resumed; not a
  range of the header, `bytes=0-1048575`) sends its headers (the full
  Content-Length) and N bytes of body, then closes the connection; once,
  later answers are whole.
- stall_after[path] = N: the same, but after the N bytes it sets the
  `stalled` event and waits (until release_stalls() or close()) before it
  closes; once.
- wrong_sha[path] = True: the hub announces a wrong SHA-256 for it (the
  tree's lfs.oid and the resolve's X-Linked-Etag / ETag).
- page_size = N: the tree is paginated (0: one page).
- relative_redirect = True: resolve answers Location: /cdn/... on the hub.

Every request each server gets is kept (hub_log, cdn_log: method, path,
lower-cased headers), thread-safely.
"""
import hashlib
import hmac
import http.server
import json
import os
import select
import socket
import ssl
import struct
import subprocess
import threading
import urllib.parse

__all__ = ["HubDouble", "Proxy", "RequestLog", "make_certs", "split_gguf"]


def split_gguf(data, parts=2):
    """A GGUF file (bytes) cut into `parts` files as llama.cpp's gguf-split
    does: each a GGUF with split.no (u16), split.count (u16) and
    split.tensors.count (i32); the first also has every other metadata key;
    the tensors (their infos and data, offsets renumbered) shared out in
    order, each part's data inside it."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def skip_string():
        nonlocal pos
        n = take("Q")
        pos += n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t):
        nonlocal pos
        if t == 8:
            skip_string()
        elif t == 9:
            et, n = take("I"), take("Q")
            if et in sizes:
                pos += sizes[et] * n
            else:
                for _ in range(n):
                    skip_value(et)
        else:
            pos += sizes[t]

    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    kvs, alignment = [], 32
    for _ in range(n_kv):
        start = pos
        skip_string()
        key = data[start + 8:pos].decode()
        t = take("I")
        vstart = pos
        skip_value(t)
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, vstart)[0]
        kvs.append((key, data[start:pos]))
    infos = []
    for _ in range(n_tensors):
        start = pos
        skip_string()
        n_dims = take("I")
        pos += 8 * n_dims + 4
        off_at = pos
        infos.append([data[start:off_at], take("Q")])
    data_at = (pos + alignment - 1) // alignment * alignment
    ends = sorted({off for _, off in infos}) + [len(data) - data_at]
    extent = {off: ends[ends.index(off) + 1] - off for off in ends[:-1]}

    def kv(key, t, fmt, value):
        k = key.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + struct.pack("<" + fmt, value)

    out, per = [], -(-len(infos) // parts)
    for i in range(parts):
        mine = infos[i * per:(i + 1) * per]
        meta = [kv("split.no", 2, "H", i), kv("split.count", 2, "H", parts),
                kv("split.tensors.count", 5, "i", len(infos))]
        meta += [raw for key, raw in kvs if i == 0 or key == "general.alignment"]
        head = b"GGUF" + struct.pack("<IQQ", version, len(mine), len(meta)) + b"".join(meta)
        body, tinfo = b"", b""
        for name_shape_type, off in mine:
            tinfo += name_shape_type + struct.pack("<Q", len(body))
            chunk = data[data_at + off:data_at + off + extent[off]]
            body += chunk + b"\0" * (-len(chunk) % alignment)
        head += tinfo
        out.append(head + b"\0" * (-len(head) % alignment) + body)
    return out


def make_certs(d):
    """A throwaway CA and a server certificate for the name localhost only
    (ca.pem, srv.pem, srv.key in d), made with the openssl command."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=moelsp test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem",
        "-days", "2", "-extfile", "ext.cnf")
    return os.path.join(d, "ca.pem"), os.path.join(d, "srv.pem"), os.path.join(d, "srv.key")


class RequestLog:
    """The requests one server got, in order: dicts with method, path (as
    sent, query included) and headers (a dict, names lower-cased)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items = []

    def add(self, method, path, headers):
        with self._lock:
            self._items.append({"method": method, "path": path,
                                "headers": {k.lower(): v for k, v in headers.items()}})

    def requests(self, method=None, path_prefix=None, contains=None):
        with self._lock:
            items = list(self._items)
        return [r for r in items if (method is None or r["method"] == method)
                and (path_prefix is None or r["path"].startswith(path_prefix))
                and (contains is None or contains in r["path"])]

    def clear(self):
        with self._lock:
            self._items.clear()

    def __len__(self):
        with self._lock:
            return len(self._items)


class _Server(http.server.ThreadingHTTPServer):
    """A threading server whose TLS handshake happens in the request's thread
    (a client that never finishes one blocks nothing) and whose handler
    errors (a client gone, a refused certificate) are kept, not printed."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler, ssl_ctx=None):
        super().__init__(("127.0.0.1", 0), handler)
        self.ssl_ctx = ssl_ctx
        self.errors = []

    def handle_error(self, request, client_address):
        import sys
        self.errors.append(repr(sys.exc_info()[1]))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real hub
    timeout = 60

    def setup(self):
        if self.server.ssl_ctx is not None:
            self.request.settimeout(30)
            self.request = self.server.ssl_ctx.wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, *args):
        pass

    def send_bytes(self, status, body, headers=(), content_type="application/octet-stream", head_only=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def send_json(self, status, obj, headers=(), head_only=False):
        self.send_bytes(status, json.dumps(obj).encode(), headers, "application/json; charset=utf-8", head_only)

    def drain_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)


class _Repo:
    def __init__(self, repo_id, files, gated, token):
        self.id = repo_id
        self.files = dict(files)
        self.gated = gated
        self.token = token
        self.commit = hashlib.sha1(repo_id.encode()).hexdigest()

    def dirs(self):
        out = set()
        for p in self.files:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out


def _is_lfs(path):
    return path.lower().endswith(".gguf")


class HubDouble:
    """The hub and its CDN (see the module's docstring). With cert and key
    (PEM paths) both speak TLS; hub_host / cdn_host are the names their URLs
    use (both 127.0.0.1-bound): by default the hub is 127.0.0.1 and the CDN
    localhost over http (two hosts, as the real hub and its CDN are), both
    localhost over TLS (the certificate's only name)."""

    def __init__(self, cert=None, key=None, hub_host=None, cdn_host=None, page_size=0, relative_redirect=False):
        ctx = None
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
        self.scheme = "https" if ctx else "http"
        self.hub_host = hub_host or ("localhost" if ctx else "127.0.0.1")
        self.cdn_host = cdn_host or "localhost"
        self.page_size = page_size
        self.relative_redirect = relative_redirect
        self.cut_after = {}
        self.stall_after = {}
        self.wrong_sha = {}
        self.hub_log = RequestLog()
        self.cdn_log = RequestLog()
        self._repos = {}
        self._lock = threading.Lock()
        self._secret = os.urandom(16)
        self._release = threading.Event()
        self.stalled = threading.Event()  # set when an answer reaches its stall_after point
        self.hub = _Server(self._hub_handler(), ctx)
        self.cdn = _Server(self._cdn_handler(), ctx)
        self.hub_port = self.hub.server_address[1]
        self.cdn_port = self.cdn.server_address[1]
        for s in (self.hub, self.cdn):
            threading.Thread(target=s.serve_forever, daemon=True).start()

    # -- configuration -------------------------------------------------------

    @property
    def endpoint(self):
        """The hub's URL, for HF_ENDPOINT."""
        return f"{self.scheme}://{self.hub_host}:{self.hub_port}"

    @property
    def cdn_base(self):
        return f"{self.scheme}://{self.cdn_host}:{self.cdn_port}"

    def add_repo(self, repo_id, files, gated=False, token=None):
        """files: {path in the repository: bytes}. gated: the API and resolve
        answer 401 unless Authorization is `Bearer <token>` (any bearer token
        when token is None)."""
        with self._lock:
            self._repos[repo_id] = _Repo(repo_id, files, gated, token)

    def sha256(self, repo_id, path):
        return hashlib.sha256(self._repos[repo_id].files[path]).hexdigest()

    def release_stalls(self):
        """Ends the answers stall_after holds (they close their connection)."""
        release, self._release = self._release, threading.Event()
        self.stalled.clear()
        release.set()

    def clear_logs(self):
        self.hub_log.clear()
        self.cdn_log.clear()

    def close(self):
        self._release.set()
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- what the hub announces ---------------------------------------------

    def _announced_sha(self, repo, path):
        sha = hashlib.sha256(repo.files[path]).hexdigest()
        if self.wrong_sha.get(path):
            sha = hashlib.sha256(b"not the bytes served: " + sha.encode()).hexdigest()
        return sha

    def _entry(self, repo, path):
        data = repo.files[path]
        if not _is_lfs(path):
            return {"type": "file", "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
                    "size": len(data), "path": path}
        sha = self._announced_sha(repo, path)
        pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n").encode()
        return {"type": "file", "oid": hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest(),
                "size": len(data), "path": path,
                "lfs": {"oid": sha, "size": len(data), "pointerSize": len(pointer)}}

    def _tree(self, repo, under, recursive):
        entries = []
        for d in repo.dirs():
            entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
        entries += [self._entry(repo, p) for p in repo.files]
        prefix = under + "/" if under else ""
        out = []
        for e in sorted(entries, key=lambda e: e["path"]):
            if not e["path"].startswith(prefix):
                continue
            if not recursive and "/" in e["path"][len(prefix):]:
                continue
            out.append(e)
        return out

    def _sign(self, repo_id, path):
        return hmac.new(self._secret, f"{repo_id}/{path}".encode(), hashlib.sha256).hexdigest()[:32]

    def _authorized(self, repo, headers):
        if not repo.gated:
            return True
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            return False
        return repo.token is None or auth[7:].strip() == repo.token

    # -- the servers ---------------------------------------------------------

    def _hub_handler(self):
        double = self

        class Hub(_Handler):
            def do_GET(self):
                self.answer(head_only=False)

            def do_HEAD(self):
                self.answer(head_only=True)

            def do_POST(self):
                double.hub_log.add("POST", self.path, self.headers)
                self.drain_body()
                self.send_json(405, {"error": "method not allowed"})

            def answer(self, head_only):
                double.hub_log.add(self.command, self.path, self.headers)
                url = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(url.path)
                query = urllib.parse.parse_qs(url.query)
                if path.startswith("/cdn/"):  # the relative redirect's target
                    return serve_cdn(self, path, query, double.hub_log, head_only, logged=True)
                if path.startswith("/api/models/"):
                    return self.api(path[len("/api/models/"):], query, head_only)
                parts = path.lstrip("/").split("/", 4)
                if len(parts) == 5 and parts[2] == "resolve":
                    return self.resolve(f"{parts[0]}/{parts[1]}", parts[3], parts[4], head_only)
                self.send_json(404, {"error": "Not found"}, head_only=head_only)

            def repo_or_error(self, repo_id, head_only):
                repo = double._repos.get(repo_id)
                if repo is None:
                    self.send_json(404, {"error": "Repository not found"}, [("X-Error-Code", "RepoNotFound")],
                                   head_only)
                    return None
                if not double._authorized(repo, self.headers):
                    msg = (f"Access to model {repo_id} is restricted. You must have access to it and be "
                           "authenticated to access it. Please log in.")
                    self.send_json(401, {"error": msg}, [("X-Error-Code", "GatedRepo"),
                                                         ("X-Error-Message", msg)], head_only)
                    return None
                return repo

            def api(self, rest, query, head_only):
                segs = rest.split("/")
                if len(segs) < 2:
                    return self.send_json(404, {"error": "Not found"}, head_only=head_only)
                repo = self.repo_or_error(f"{segs[0]}/{segs[1]}", head_only)
                if repo is None:
                    return
                if len(segs) >= 4 and segs[2] in ("tree", "revision"):
                    if segs[3] != "main":
                        return self.send_json(404, {"error": f"Invalid rev id: {segs[3]}"},
                                              [("X-Error-Code", "RevisionNotFound")], head_only)
                if len(segs) == 2 or (len(segs) == 4 and segs[2] == "revision"):
                    info = {"id": repo.id, "modelId": repo.id, "sha": repo.commit, "gated": repo.gated or False,
                            "private": False, "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
                    return self.send_json(200, info, head_only=head_only)
                if len(segs) >= 4 and segs[2] == "tree":
                    under = "/".join(segs[4:]).strip("/")
                    recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
                    entries = double._tree(repo, under, recursive)
                    start = int(query.get("cursor", ["0"])[0] or 0)
                    headers = []
                    if double.page_size:
                        page = entries[start:start + double.page_size]
                        if start + double.page_size < len(entries):
                            q = {k: v[0] for k, v in query.items()}
                            q["cursor"] = str(start + double.page_size)
                            nxt = (f"{double.endpoint}/api/models/{rest}?" + urllib.parse.urlencode(q))
                            headers.append(("Link", f'<{nxt}>; rel="next"'))
                        entries = page
                    return self.send_json(200, entries, headers, head_only)
                self.send_json(404, {"error": "Not found"}, head_only=head_only)

            def resolve(self, repo_id, rev, path, head_only):
                repo = self.repo_or_error(repo_id, head_only)
                if repo is None:
                    return
                if rev != "main":
                    return self.send_json(404, {"error": f"Invalid rev id: {rev}"},
                                          [("X-Error-Code", "RevisionNotFound")], head_only)
                if path not in repo.files:
                    return self.send_json(404, {"error": "Entry not found"}, [("X-Error-Code", "EntryNotFound")],
                                          head_only)
                data = repo.files[path]
                if not _is_lfs(path):
                    return self.send_bytes(200, data, [("ETag", '"%s"' % double._entry(repo, path)["oid"]),
                                                       ("X-Repo-Commit", repo.commit)],
                                           head_only=head_only)
                sha = double._announced_sha(repo, path)
                target = (f"/cdn/{repo_id}/{urllib.parse.quote(path)}?sig={double._sign(repo_id, path)}"
                          f"&expires=4102444800")
                location = target if double.relative_redirect else double.cdn_base + target
                body = f"Found. Redirecting to {location}".encode()
                self.send_bytes(302, body, [("Location", location), ("X-Linked-Size", str(len(data))),
                                            ("X-Linked-Etag", f'"{sha}"'), ("ETag", f'"{sha}"'),
                                            ("X-Repo-Commit", repo.commit)],
                                content_type="text/plain; charset=utf-8", head_only=head_only)

        def serve_cdn(h, path, query, log, head_only, logged):
            """The CDN's answer (also the hub's, for a relative redirect)."""
            if not logged:
                log.add(h.command, h.path, h.headers)
            rest = path[len("/cdn/"):]
            segs = rest.split("/", 2)
            if len(segs) < 3:
                return h.send_bytes(404, b"not found", content_type="text/plain", head_only=head_only)
            repo_id, fpath = f"{segs[0]}/{segs[1]}", segs[2]
            repo = double._repos.get(repo_id)
            if repo is None or fpath not in repo.files:
                return h.send_bytes(404, b"not found", content_type="text/plain", head_only=head_only)
            if not hmac.compare_digest(query.get("sig", [""])[0], double._sign(repo_id, fpath)):
                return h.send_bytes(403, b"<Error><Code>AccessDenied</Code></Error>",
                                    content_type="application/xml", head_only=head_only)
            data = repo.files[fpath]
            total = len(data)
            start, end, status = 0, total - 1, 200
            rng = h.headers.get("Range")
            if rng:
                try:
                    unit, spec = rng.split("=", 1)
                    a, b = spec.split(",")[0].strip().split("-", 1)
                    if unit.strip() != "bytes" or not a:
                        raise ValueError(rng)
                    start = int(a)
                    end = min(int(b), total - 1) if b else total - 1
                except ValueError:
                    return h.send_bytes(400, b"bad range", content_type="text/plain", head_only=head_only)
                if start >= total or start > end:
                    return h.send_bytes(416, b"", [("Content-Range", f"bytes */{total}")], head_only=head_only)
                status = 206
            sha = hashlib.sha256(data).hexdigest()
            h.send_response(status)
            h.send_header("Content-Type", "application/octet-stream")
            h.send_header("Content-Length", str(end - start + 1))
            h.send_header("Accept-Ranges", "bytes")
            h.send_header("ETag", f'"{sha}"')
            if status == 206:
                h.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            h.end_headers()
            if head_only:
                return
            body = memoryview(data)[start:end + 1]
            cut = stall = None
            # Only an answer that runs to the file's end (a download, not a
            # range of its header) and is longer than N bytes is cut.
            with double._lock:
                if h.command == "GET" and end == total - 1:
                    if double.cut_after.get(fpath, len(body)) < len(body):
                        cut = double.cut_after.pop(fpath)
                    elif double.stall_after.get(fpath, len(body)) < len(body):
                        stall = double.stall_after.pop(fpath)
            limit = cut if cut is not None else stall
            if limit is not None:
                h.wfile.write(body[:limit])
                h.wfile.flush()
                if stall is not None:
                    release = double._release
                    double.stalled.set()
                    release.wait(120)
                h.close_connection = True
                try:
                    h.request.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            for i in range(0, len(body), 1 << 16):
                h.wfile.write(body[i:i + (1 << 16)])

        self._serve_cdn = serve_cdn

        return Hub

    def _cdn_handler(self):
        double = self

        class Cdn(_Handler):
            def do_GET(self):
                self.answer(False)

            def do_HEAD(self):
                self.answer(True)

            def answer(self, head_only):
                url = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(url.path)
                if not path.startswith("/cdn/"):
                    double.cdn_log.add(self.command, self.path, self.headers)
                    return self.send_bytes(404, b"not found", content_type="text/plain", head_only=head_only)
                double._serve_cdn(self, path, urllib.parse.parse_qs(url.query), double.cdn_log, head_only,
                                  logged=False)

        return Cdn


class Proxy:
    """A forward proxy on 127.0.0.1: `CONNECT host:port` opens a tunnel (for
    https); an absolute-form request (`GET http://host:port/path`) is sent on
    in origin form over a new connection, the answer relayed as it comes and
    the client's connection closed after it. `seen` keeps (method, target)
    of each request, in order."""

    def __init__(self):
        proxy = self
        self.seen = []
        self.auth = []  # each request's Proxy-Authorization ("" when none)
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            rbufsize = 0  # nothing past the request's head is read into a buffer the tunnel would miss

            def log_message(self, *args):
                pass

            def record(self):
                with proxy._lock:
                    proxy.seen.append((self.command, self.path))
                    proxy.auth.append(self.headers.get("Proxy-Authorization", ""))

            def do_CONNECT(self):
                self.record()
                host, _, port = self.path.rpartition(":")
                try:
                    up = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
                except (OSError, ValueError) as e:
                    self.send_error(502, f"cannot connect to {self.path}: {e}")
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True
                relay(self.connection, up)

            def forward(self):
                self.record()
                url = urllib.parse.urlsplit(self.path)
                if url.scheme != "http" or not url.hostname:
                    self.send_error(400, "absolute-form http:// URL expected")
                    return
                try:
                    up = socket.create_connection((url.hostname, url.port or 80), timeout=30)
                except OSError as e:
                    self.send_error(502, f"cannot connect to {url.netloc}: {e}")
                    return
                target = url.path or "/"
                if url.query:
                    target += "?" + url.query
                lines = [f"{self.command} {target} HTTP/1.1"]
                for k, v in self.headers.items():
                    if k.lower() in ("proxy-connection", "proxy-authorization", "connection", "keep-alive"):
                        continue
                    lines.append(f"{k}: {v}")
                lines.append("Connection: close")
                up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    up.sendall(self.rfile.read(n))
                self.wfile.flush()
                self.close_connection = True
                try:
                    while True:
                        chunk = up.recv(1 << 16)
                        if not chunk:
                            break
                        self.connection.sendall(chunk)
                except OSError:
                    pass
                finally:
                    up.close()
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

            do_GET = do_HEAD = do_POST = forward

        def relay(a, b):
            socks = [a, b]
            try:
                while True:
                    r, _, _ = select.select(socks, [], [], 60)
                    if not r:
                        return
                    for s in r:
                        data = s.recv(1 << 16)
                        if not data:
                            return
                        (b if s is a else a).sendall(data)
            except OSError:
                return
            finally:
                b.close()

        self.httpd = _Server(Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def targets(self, method=None):
        with self._lock:
            return [t for m, t in self.seen if method is None or m == method]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main():
    """A hub for other tests (the VS Code end-to-end test): serves each
    --repo OWNER/NAME=FILE_IN_REPO=SOURCE_FILE, prints its endpoint on a line,
    and runs until stdin closes."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=FILE=SOURCE")
    args = ap.parse_args()
    repos = {}
    for spec in args.repo:
        repo, name, source = spec.split("=", 2)
        with open(source, "rb") as f:
            repos.setdefault(repo, {})[name] = f.read()
    with HubDouble() as hub:
        for repo, files in repos.items():
            hub.add_repo(repo, files)
        print(hub.endpoint, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
