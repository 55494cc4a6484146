#!/usr/bin/env python3
"""`moelsp pull`, `moelsp models` and `moelsp rm` against a double of the
Hugging Face hub (tests/hf_double.py: the hub's tree API and resolve/, which
redirects to a CDN on another server), never the network:

(a) owner/repo:Q8_0 fetches that file only, byte-identical, its absolute path
    the last line of stdout, the repository's files read from the tree API;
(b) a split quant (hf://, lower-case) fetches both parts, the tree's pages
    followed through their Link headers;
(c) what the cache already holds is not fetched again (by quant, by path);
(d) a connection cut in the middle of the body is resumed with a Range
    request; a run killed in the middle is resumed from its .part by the next;
    the files are byte-identical; hf://owner/repo picks the Q4_K_M file;
(e) a SHA-256 that does not match is refused: nothing at the final path,
    no .part left;
(f) a gated repository: refused without HF_TOKEN (or with a wrong one), the
    message naming HF_TOKEN; fetched with it, the token sent to the hub and
    not to the CDN it redirects to;
(g) a repository not found, one without GGUF files, a quant it lacks (the
    message lists those it has), a hub that refuses connections: exit 1 and
    a `moelsp pull: ` message naming the problem;
(h) through a proxy: http_proxy (absolute-form requests), NO_PROXY bypassing
    it, https_proxy and HTTPS_PROXY over TLS (CONNECT tunnels; the throwaway
    CA from SSL_CERT_FILE; without it the certificate is refused);
(i) `moelsp models` lists the cached files with their sizes (a .part as
    partial or not at all; MOELSP_MODELS_DIR, --dir winning over it);
    `moelsp rm` removes a model (all its parts), and says so when nothing
    matches;
(j) a relative redirect (Location: /cdn/... on the hub itself) is followed.

The payloads are a real small GGUF (tests/data/reference/glm4moe-ref.gguf)
with a few bytes that differ per file appended, so a wrong file is told from
the right one; the split quant is that GGUF split in two as gguf-split does
(each part a GGUF holding half the tensors): `pull` reads the first part's
header and refuses a file that is not a usable GGUF before downloading.

    python3 tests/test_pull.py MOELSP_BINARY

Exits 0 when every check passes, 1 with a message at the first failure.
"""
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_double import HubDouble, Proxy, make_certs, split_gguf  # noqa: E402

sys.stdout.reconfigure(line_buffering=True)  # the checks' lines in order with a failure's
BINARY = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOELSP_BINARY", "")
TIMEOUT = 60  # seconds, every run of the binary
TOKEN = "hf_pullTestToken0123456789"

GGUF = open(os.path.join(HERE, "data", "reference", "glm4moe-ref.gguf"), "rb").read()


def payload(name):
    """The real GGUF, then bytes of its own: each file differs from the others."""
    return GGUF + random.Random(name).randbytes(1000 + len(name))


CODER = "acme/Coder-GGUF"
Q8 = "Coder-Q8_0.gguf"
Q4KM = "Coder-Q4_K_M.gguf"
SPLIT = ["Q4_0/Coder-Q4_0-00001-of-00002.gguf", "Q4_0/Coder-Q4_0-00002-of-00002.gguf"]
CODER_FILES = {"README.md": b"# Coder\n\nGGUF quantizations.\n", Q8: payload(Q8), Q4KM: payload(Q4KM),
               **dict(zip(SPLIT, split_gguf(GGUF, 2)))}
RESUME = "acme/Resume-GGUF"
Q5KM = "Resume-Q5_K_M.gguf"
BAD = "acme/Bad-GGUF"
BAD_FILE = "Bad-Q4_K_M.gguf"
GATED = "acme/Gated-GGUF"
GATED_FILE = "Gated-Q4_K_M.gguf"
WEIGHTS = "acme/Weights"  # safetensors only
FOREIGN = "acme/Mamba-GGUF"  # a GGUF of an architecture moelsp does not run, and a file that is no GGUF
MAMBA_FILE = "Mamba-Q8_0.gguf"
NOT_GGUF = "Mamba-F16.gguf"
CHANGED = "acme/Changed-GGUF"  # replaced on the hub while a download of it was partial
CHANGED_FILE = "Changed-Q4_K_M.gguf"


def foreign_gguf():
    """A GGUF v3 whose architecture is `mamba`, one F32 tensor, then 3 MB: only its header may be read."""
    def string(t):
        b = t.encode()
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    head += string("general.architecture") + struct.pack("<I", 8) + string("mamba")
    head += string("x") + struct.pack("<IQIQ", 1, 32, 0, 0)  # 1 dim of 32, F32, offset 0
    head += b"\0" * (-len(head) % 32)
    return head + b"\0" * 128 + random.Random("mamba").randbytes(3_000_000)


def fail(msg):
    print(f"pull test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def add_repos(hub):
    hub.add_repo(CODER, CODER_FILES)
    hub.add_repo(RESUME, {Q5KM: payload(Q5KM)})
    hub.add_repo(BAD, {BAD_FILE: payload(BAD_FILE)})
    hub.add_repo(GATED, {GATED_FILE: payload(GATED_FILE), "README.md": b"gated\n"}, gated=True, token=TOKEN)
    hub.add_repo(WEIGHTS, {"config.json": b"{}\n", "model.safetensors": b"\0" * 4096, "README.md": b"w\n"})
    hub.add_repo(FOREIGN, {MAMBA_FILE: foreign_gguf(), NOT_GGUF: random.Random("x").randbytes(3_000_000)})


class Env:
    """The environment every run gets: none of the caller's hub, proxy, CA or
    cache settings; HOME and XDG_CACHE_HOME in the test's folder (a run that
    ignored --dir would fill them, not the user's cache)."""

    def __init__(self, root):
        self.base = {k: v for k, v in os.environ.items() if k.upper() not in (
            "HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HTTP_PROXY",
            "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "MOELSP_MODELS_DIR",
            "XDG_CACHE_HOME")}
        self.base["HOME"] = os.path.join(root, "home")
        self.base["XDG_CACHE_HOME"] = os.path.join(root, "home", ".cache")
        os.makedirs(self.base["HOME"], exist_ok=True)

    def run(self, args, **env):
        e = dict(self.base)
        e.update(env)
        try:
            return subprocess.run([BINARY, *args], env=e, capture_output=True, timeout=TIMEOUT, text=True,
                                  encoding="utf-8", errors="replace")
        except subprocess.TimeoutExpired:
            fail(f"`moelsp {' '.join(args)}` did not end within {TIMEOUT} s")

    def pull(self, ref, d, **env):
        return self.run(["pull", ref, "--dir", d], **env)


def describe(p):
    return f"exit {p.returncode}; stdout {p.stdout[-400:]!r}; stderr {p.stderr[-800:]!r}"


def last_line(p):
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def expect_pulled(p, what, d, repo, path, files):
    """Exit 0, stdout's last line the absolute path of `path`, the bytes the
    hub holds; no .part beside it."""
    if p.returncode != 0:
        fail(f"{what}: {describe(p)}")
    want = os.path.join(d, repo, path)
    got = last_line(p)
    if not os.path.isabs(got) or os.path.realpath(got) != os.path.realpath(want):
        fail(f"{what}: stdout's last line is {got!r}, not {want}")
    same_bytes(what, want, files[path])


def same_bytes(what, path, data):
    if not os.path.isfile(path):
        fail(f"{what}: {path} is missing")
    with open(path, "rb") as f:
        if f.read() != data:
            fail(f"{what}: {path} differs from the hub's bytes")
    if os.path.exists(path + ".part"):
        fail(f"{what}: {path}.part is left beside the file")


def expect_failure(p, what, *needles, any_of=()):
    """Exit 1 and a `moelsp pull: ` line on stderr holding every needle (and one of any_of)."""
    if p.returncode != 1:
        fail(f"{what}: expected exit 1: {describe(p)}")
    lines = [ln for ln in p.stderr.replace("\r", "\n").splitlines() if ln.startswith("moelsp pull: ")]
    if not lines:
        fail(f"{what}: no `moelsp pull: ` message on stderr: {describe(p)}")
    text = "\n".join(lines)
    for n in needles:
        if n.lower() not in text.lower():
            fail(f"{what}: the message does not name {n!r}: {text!r}")
    if any_of and not any(n.lower() in text.lower() for n in any_of):
        fail(f"{what}: the message names none of {any_of}: {text!r}")
    return lines[-1]


def ggufs_under(d):
    out = set()
    for root, _, names in os.walk(d):
        for n in names:
            if n.endswith(".gguf") or n.endswith(".part"):
                out.add(os.path.relpath(os.path.join(root, n), d))
    return out


def cdn_gets(hub, path, log=None):
    """The GETs the CDN (or the hub, for a relative redirect) got for a file."""
    return [r for r in (log or hub.cdn_log).requests(method="GET") if r["path"].split("?")[0].endswith("/" + path)]


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- the checks ----------------------------------------------------------------


def check_quant(env, hub, d):
    hub.clear_logs()
    p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=hub.endpoint)
    expect_pulled(p, f"pull {CODER}:Q8_0", d, CODER, Q8, CODER_FILES)
    trees = hub.hub_log.requests(method="GET", path_prefix=f"/api/models/{CODER}/tree/main")
    if not trees:
        fail(f"the hub got no tree call: {[r['path'] for r in hub.hub_log.requests()]}")
    if not cdn_gets(hub, Q8):
        fail("the CDN got no GET for the file")
    if ggufs_under(d) != {f"{CODER}/{Q8}"}:
        fail(f"pulling Q8_0 left other files in the cache: {sorted(ggufs_under(d))}")
    print(f"pull: (a) {CODER}:Q8_0 → {last_line(p)}, byte-identical, through the tree API "
          f"({len(trees)} page(s)) and the CDN")


def check_split(env, hub, d):
    hub.clear_logs()
    p = env.pull(f"hf://{CODER}:q4_0", d, HF_ENDPOINT=hub.endpoint)
    expect_pulled(p, f"pull hf://{CODER}:q4_0", d, CODER, SPLIT[0], CODER_FILES)
    same_bytes("the second part", os.path.join(d, CODER, SPLIT[1]), CODER_FILES[SPLIT[1]])
    for part in SPLIT:
        if not cdn_gets(hub, os.path.basename(part)):
            fail(f"the CDN got no GET for {part}")
    trees = [r["path"] for r in hub.hub_log.requests(method="GET", path_prefix=f"/api/models/{CODER}/tree/")]
    if len(trees) < 2 or not any("cursor=" in t for t in trees):
        fail(f"the tree's pages (Link: rel=\"next\") were not followed: {trees}")
    print(f"pull: (b) a split quant (hf://, lower-case) fetched both parts; the tree read in {len(trees)} pages")


def check_cached(env, hub, d):
    hub.clear_logs()
    stamps = {f: os.stat(os.path.join(d, CODER, f)).st_mtime_ns for f in [Q8, *SPLIT]}
    for ref, path in ((f"{CODER}:Q8_0", Q8), (f"hf://{CODER}/{Q8}", Q8), (f"{CODER}:Q4_0", SPLIT[0])):
        p = env.pull(ref, d, HF_ENDPOINT=hub.endpoint)
        expect_pulled(p, f"pull {ref} again", d, CODER, path, CODER_FILES)
    gets = hub.cdn_log.requests(method="GET")
    if gets:
        fail(f"files in the cache were fetched again: {[r['path'] for r in gets]}")
    for f, t in stamps.items():
        if os.stat(os.path.join(d, CODER, f)).st_mtime_ns != t:
            fail(f"{f}, in the cache, was written again")
    print("pull: (c) what the cache holds is not fetched again (by quant, by path, a split quant): the CDN got no GET")


def leave_part(env, hub, ref, d, final, stall):
    """Runs `pull ref` until the CDN stalls after `stall` bytes, then kills
    it: returns the .part it left beside `final` (at least stall / 2 bytes)."""
    hub.clear_logs()
    hub.stall_after[os.path.basename(final)] = stall
    e = dict(env.base, HF_ENDPOINT=hub.endpoint)
    proc = subprocess.Popen([BINARY, "pull", ref, "--dir", d], env=e, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    part = final + ".part"
    try:
        if not hub.stalled.wait(TIMEOUT):
            fail(f"the run of {ref} to be killed never reached the CDN's stall")
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.exists(part) and os.path.getsize(part) >= stall // 2):
            time.sleep(0.05)
        if not os.path.exists(part) or os.path.getsize(part) < stall // 2:
            fail(f"no .part holding what arrived (>= {stall // 2} bytes of {stall}) beside {final}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        hub.release_stalls()
    if os.path.exists(final):
        fail("a killed run left a file at the final path")
    return part


def check_resume(env, hub, d):
    # A cut in the middle of the body: resumed with a Range request within the run.
    hub.clear_logs()
    cut = 1_500_000
    hub.cut_after[Q4KM] = cut
    p = env.pull(f"hf://{CODER}", d, HF_ENDPOINT=hub.endpoint)  # several quants: Q4_K_M is the default
    expect_pulled(p, f"pull hf://{CODER} with a cut after {cut} bytes", d, CODER, Q4KM, CODER_FILES)
    gets = cdn_gets(hub, Q4KM)
    ranges = [r["headers"].get("range") for r in gets]
    if len(gets) < 2 or not ranges[-1]:
        fail(f"no second GET with a Range header after the cut: {ranges}")
    m = re.fullmatch(r"bytes=(\d+)-", ranges[-1].replace(" ", ""))
    if not m or not 0 < int(m.group(1)) <= cut:
        fail(f"the resume asked for {ranges[-1]!r}, not bytes=N- with 0 < N <= {cut}")
    resumed_at = int(m.group(1))

    # A run killed in the middle (the CDN stalls after 2 MB): the next run resumes from the .part.
    final = os.path.join(d, RESUME, Q5KM)
    have = os.path.getsize(leave_part(env, hub, f"{RESUME}:Q5_K_M", d, final, 2_000_000))
    p = env.pull(f"{RESUME}:Q5_K_M", d, HF_ENDPOINT=hub.endpoint)
    expect_pulled(p, "the run after a killed one", d, RESUME, Q5KM, {Q5KM: payload(Q5KM)})
    gets = cdn_gets(hub, Q5KM)
    rng = (gets[-1]["headers"].get("range") or "").replace(" ", "") if gets else ""
    if rng != f"bytes={have}-":
        fail(f"the run after a killed one asked for {rng!r}, not bytes={have}- (the .part's size)")
    print(f"pull: (d) a cut after {cut} bytes resumed with Range: bytes={resumed_at}- in the same run; a run killed "
          f"at {have} bytes resumed from its .part by the next; both byte-identical (and hf://owner/repo chose Q4_K_M)")


def check_changed(env, hub, root):
    """A file replaced on the hub after a partial download (a re-uploaded
    quant): the next pull starts again at once, rather than append the new
    file's rest to the old file's start and fail the checksum at the end."""
    d = os.path.join(root, "changed")
    old = payload(CHANGED_FILE)
    hub.add_repo(CHANGED, {CHANGED_FILE: old})
    final = os.path.join(d, CHANGED, CHANGED_FILE)
    part = leave_part(env, hub, f"{CHANGED}:Q4_K_M", d, final, 3_000_000)
    have = os.path.getsize(part)
    recorded = os.getxattr(part, "user.moelsp.sha256").decode()
    if recorded != hashlib.sha256(old).hexdigest():
        fail(f"the .part records {recorded!r}, not the SHA-256 the hub listed")
    new = bytearray(old)
    new[1_400_000] ^= 0xFF  # in the tensor data (the header ends at 1.17 MB), inside the .part
    hub.add_repo(CHANGED, {CHANGED_FILE: bytes(new)})
    hub.clear_logs()
    p = env.pull(f"{CHANGED}:Q4_K_M", d, HF_ENDPOINT=hub.endpoint)
    expect_pulled(p, "a pull after the file changed on the hub", d, CHANGED, CHANGED_FILE, {CHANGED_FILE: bytes(new)})
    gets = cdn_gets(hub, CHANGED_FILE)
    if not gets or gets[-1]["headers"].get("range") or "changed on the hub" not in p.stderr:
        fail(f"the pull after the change did not start again: {[g['headers'].get('range') for g in gets]}; "
             f"{describe(p)}")
    note = next(ln for ln in p.stderr.splitlines() if "changed on the hub" in ln)
    print(f"pull: (r) a file replaced on the hub while {have} bytes of it waited in a .part: fetched again from "
          f"the start ({note.strip()[:100]!r})")


def check_checksum(env, hub, root):
    d = os.path.join(root, "bad")
    hub.clear_logs()
    hub.wrong_sha[BAD_FILE] = True
    p = env.pull(f"{BAD}:Q4_K_M", d, HF_ENDPOINT=hub.endpoint)
    msg = expect_failure(p, "a SHA-256 that does not match", any_of=("SHA-256", "checksum"))
    if not cdn_gets(hub, BAD_FILE):
        fail("the file with a wrong SHA-256 was never fetched (nothing was checked)")
    left = ggufs_under(d)
    if left:
        fail(f"a download whose checksum did not match left {sorted(left)}")
    print(f"pull: (e) a wrong SHA-256 refused, nothing left at the final path nor a .part: {msg[:110]!r}")


def check_gated(env, hub, root):
    d = os.path.join(root, "gated")
    p = env.pull(f"{GATED}:Q4_K_M", d, HF_ENDPOINT=hub.endpoint)
    msg = expect_failure(p, "a gated repository without a token", "HF_TOKEN")
    p = env.pull(f"{GATED}:Q4_K_M", d, HF_ENDPOINT=hub.endpoint, HF_TOKEN="hf_notTheRightOne")
    expect_failure(p, "a gated repository with a wrong token", "HF_TOKEN")
    hub.clear_logs()
    p = env.pull(f"{GATED}:Q4_K_M", d, HF_ENDPOINT=hub.endpoint, HF_TOKEN=TOKEN)
    expect_pulled(p, "a gated repository with HF_TOKEN", d, GATED, GATED_FILE, {GATED_FILE: payload(GATED_FILE)})
    want = f"Bearer {TOKEN}"
    hub_reqs = hub.hub_log.requests()
    if not hub_reqs or any(r["headers"].get("authorization") != want for r in hub_reqs):
        fail(f"not every request to the hub carried Authorization: {want}: "
             f"{[(r['path'], r['headers'].get('authorization')) for r in hub_reqs]}")
    cdn_reqs = hub.cdn_log.requests()
    if not cdn_reqs:
        fail("the CDN got no request")
    if any("authorization" in r["headers"] for r in cdn_reqs):
        fail(f"the token was sent to the CDN ({hub.cdn_base}), another host than the hub's")
    print(f"pull: (f) a gated repository: refused without HF_TOKEN ({msg[:80]!r}…) and with a wrong one; with it, "
          f"fetched, the token sent to the hub ({len(hub_reqs)} requests), never to the CDN")


def check_errors(env, hub, root):
    d = os.path.join(root, "errors")
    p = env.pull("acme/Nope-GGUF:Q4_K_M", d, HF_ENDPOINT=hub.endpoint)
    m1 = expect_failure(p, "a repository not found", "acme/Nope-GGUF", "not found")
    p = env.pull(f"hf://{WEIGHTS}", d, HF_ENDPOINT=hub.endpoint)
    m2 = expect_failure(p, "a repository without GGUF files", "no GGUF")
    p = env.pull(f"{CODER}:Q2_K", d, HF_ENDPOINT=hub.endpoint)
    m3 = expect_failure(p, "a quant the repository lacks", "Q2_K", "Q8_0", "Q4_K_M", "Q4_0")
    p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    m4 = expect_failure(p, "a hub that refuses connections", "cannot connect")
    # A listing whose paths would leave the cache: never taken.
    hub.add_repo("acme/Evil-GGUF", {"../../../evil-Q4_0.gguf": payload("evil"), "/tmp/abs-Q4_0.gguf": payload("abs")})
    p = env.pull("acme/Evil-GGUF:Q4_0", d, HF_ENDPOINT=hub.endpoint)
    expect_failure(p, "paths that leave the cache", "no GGUF")
    if os.path.exists(os.path.join(root, "evil-Q4_0.gguf")) or os.path.exists(os.path.join(d, "..", "evil-Q4_0.gguf")):
        fail("a path from the hub's listing wrote outside the cache")
    if ggufs_under(d):
        fail(f"failed pulls left files: {sorted(ggufs_under(d))}")
    reasons = "; ".join(repr(m[len("moelsp pull: "):][:70]) for m in (m1, m2, m3, m4))
    print(f"pull: (g) exit 1 with the reason: {reasons}")


def check_header_first(env, hub, root):
    """A file moelsp cannot run is refused from its header alone: the CDN
    sees range requests for the first bytes, never the whole file."""
    d = os.path.join(root, "foreign")
    reasons = []
    for quant, needles in (("Q8_0", ("mamba", "cannot run", "nothing was downloaded")),
                           ("F16", ("not a usable GGUF", "nothing was downloaded"))):
        path = MAMBA_FILE if quant == "Q8_0" else NOT_GGUF
        p = env.pull(f"{FOREIGN}:{quant}", d, HF_ENDPOINT=hub.endpoint)
        reasons.append(expect_failure(p, f"a file moelsp cannot run ({path})", *needles))
        gets = cdn_gets(hub, path)
        if not gets:
            fail(f"{path}: its header was never asked for")
        for r in gets:
            rng = {k.lower(): v for k, v in r["headers"].items()}.get("range", "")
            if not rng.startswith("bytes=0-") or rng == "bytes=0-":
                fail(f"{path}: the CDN got a GET for more than the header (Range {rng!r})")
    if ggufs_under(d):
        fail(f"refused pulls left files: {sorted(ggufs_under(d))}")
    print("pull: (k) refused from the header before any download: " +
          "; ".join(repr(m[len("moelsp pull: "):][:90]) for m in reasons))


def lsp_client(env, **extra):
    """`moelsp lsp` under the README demo's stdlib LSP client, in env's environment."""
    sys.path.insert(0, os.path.join(HERE, "..", "tools", "demo"))
    from lsp_demo import Client
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env.base, **extra)
    try:
        return Client([BINARY, "lsp"])
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def lsp_session(env, **extra):
    """lsp_client's server, shut down as an editor does at the end (killed if it hangs)."""
    c = lsp_client(env, **extra)
    try:
        yield c
        c.request("shutdown")
        c.notify("exit", None)
        c.proc.wait(timeout=30)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()


def check_lsp_pull(env, hub, root):
    """The editor's server with `model` a reference not in the cache: the
    embedded model answers completions while the pull runs (moelsp/status
    and $/progress show it), then the pulled file is loaded in its place."""
    d = os.path.join(root, "lsp-cache")
    ref = f"{RESUME}:Q5_K_M"
    hub.stalled.clear()
    hub.stall_after[Q5KM] = 1_000_000
    with lsp_session(env, MOELSP_MODELS_DIR=d, HF_ENDPOINT=hub.endpoint) as c:
        c.request("initialize", {"capabilities": {"window": {"workDoneProgress": True},
                                                  "textDocument": {"inlineCompletion": {}}},
                                 "initializationOptions": {"model": ref}})
        c.notify("initialized", {})
        if not hub.stalled.wait(60):
            fail("the LSP did not start pulling its model reference")
        deadline = time.time() + 60
        st = {}
        while time.time() < deadline:
            st, _ = c.request("moelsp/status")
            if st.get("state") in ("ready", "busy"):
                break
            time.sleep(0.1)
        pull = st.get("pull", {})
        if st.get("state") not in ("ready", "busy") or pull.get("state") != "pulling" or pull.get("ref") != ref:
            fail(f"while pulling, the embedded model should serve and the status show the pull: {json.dumps(st)[:600]}")
        embedded = st.get("model")
        r, ms = c.complete_at_end("file:///tmp/pull_lsp.py", "def add(a, b):\n    return ", trigger=2)
        if not isinstance(r, dict) or "items" not in r:
            fail(f"a completion while pulling got {r!r}")
        if "pull" not in st.get("summaryLine", "") + st.get("summary", ""):
            fail(f"the status summary does not mention the pull: {st.get('summary')!r}")
        hub.release_stalls()  # the connection is cut: the pull resumes and ends
        deadline = time.time() + 90
        while time.time() < deadline:
            st, _ = c.request("moelsp/status")
            if st.get("state") == "ready" and Q5KM in st.get("message", ""):
                break
            time.sleep(0.2)
        else:
            fail(f"the pulled model was not loaded: {json.dumps(st)[:600]}")
        if st.get("pull", {}).get("state") != "done" or st.get("model") == embedded:
            fail(f"after the pull: {json.dumps(st)[:600]}")
        progress = []
        while not c.notes.empty():
            n = c.notes.get_nowait()
            if n.get("method") == "$/progress" and n["params"].get("token") == "moelsp/pull":
                progress.append(n["params"]["value"]["kind"])
        if not progress or progress[0] != "begin" or progress[-1] != "end":
            fail(f"$/progress for the pull: {progress}")
        same_bytes("the pulled file", os.path.join(d, RESUME, Q5KM), hub._repos[RESUME].files[Q5KM])
    print(f"pull: (l) the LSP with model {ref}: the embedded model ({embedded}) answered a completion in "
          f"{ms:.0f} ms while the pull ran; $/progress {progress[0]}…{progress[-1]} ({len(progress)}); then "
          f"{st.get('model')!r} loaded from the cache")


def check_lsp_no_network(env, hub, root):
    """The editor's server with `model` a reference and no hub to be had:
    the pull fails once, with one message saying why, and the embedded
    model keeps answering."""
    with lsp_session(env, MOELSP_MODELS_DIR=os.path.join(root, "lsp-offline"),
                     HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}") as c:
        c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}},
                                 "initializationOptions": {"model": f"{CODER}:Q8_0"}})
        c.notify("initialized", {})
        deadline = time.time() + 60
        st = {}
        while time.time() < deadline:
            st, _ = c.request("moelsp/status")
            if st.get("pull", {}).get("state") == "failed" and st.get("state") == "ready":
                break
            time.sleep(0.1)
        else:
            fail(f"without a network: {json.dumps(st)[:600]}")
        uri = "file:///tmp/offline.py"
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                           "text": "def add(a, b):\n    return "}})
        r, _ = c.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                         "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}})
        if not isinstance(r, dict) or not r.get("items"):
            fail(f"the embedded model did not answer without a network: {r!r}")
        time.sleep(0.5)
        shown = []
        while not c.notes.empty():
            n = c.notes.get_nowait()
            if n.get("method") == "window/showMessage":
                shown.append(n["params"]["message"])
        if len(shown) != 1 or "cannot connect" not in shown[0] or "embedded model serves" not in shown[0]:
            fail(f"without a network, the messages shown: {shown}")
    print(f"pull: (q) the LSP without a network: one message ({shown[0][:90]!r}…), the embedded model answering")


def check_cli_model_ref(env, hub, root):
    """-m takes a reference: pulled first when not in the cache, read from it when it is."""
    d = os.path.join(root, "cli-ref")
    hub.clear_logs()
    args = ["tokenize", "-m", f"{CODER}:Q8_0", "-p", "def main():", "--ids"]
    p = env.run(args, MOELSP_MODELS_DIR=d, HF_ENDPOINT=hub.endpoint)
    if p.returncode != 0 or not re.fullmatch(r"[0-9 ]+", last_line(p)):
        fail(f"tokenize -m REF (not cached): {describe(p)}")
    same_bytes("tokenize -m REF", os.path.join(d, CODER, Q8), CODER_FILES[Q8])
    ids = last_line(p)
    hub.clear_logs()
    p = env.run(args, MOELSP_MODELS_DIR=d, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    if p.returncode != 0 or last_line(p) != ids:
        fail(f"tokenize -m REF (cached, the hub unreachable): {describe(p)}")
    p = env.run(["tokenize", "-m", f"{CODER}:Q2_K", "-p", "x"], MOELSP_MODELS_DIR=d, HF_ENDPOINT=hub.endpoint)
    expect_failure_of("tokenize", p, "a missing quant with -m", "Q2_K", "Q8_0")
    print("pull: (m) -m owner/repo:QUANT pulled before tokenize ran, then read from the cache with the hub unreachable")


def expect_failure_of(command, p, what, *needles):
    if p.returncode == 0 or not all(n in p.stderr for n in needles) or f"moelsp {command}:" not in p.stderr:
        fail(f"{what}: {describe(p)}")


GUIDE = {  # what `moelsp models --suggest` asks the hub for (cli/model_guide.cpp)
    "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF": ["Q4_K_M", "Q5_K_M", "Q8_0"],
    "bartowski/zai-org_GLM-4.7-Flash-GGUF": ["Q4_K_M", "Q8_0"],
    "ggml-org/gpt-oss-20b-GGUF": ["MXFP4"],
    "bartowski/DeepSeek-Coder-V2-Lite-Instruct-GGUF": ["Q4_K_M", "Q8_0"],
}


def check_guide(env, hub, root):
    """models --suggest: a row per suggested file with its size and the plan
    from its header; the CDN is asked only for the headers' first bytes."""
    for repo, quants in GUIDE.items():
        name = repo.split("/")[1].removesuffix("-GGUF")
        hub.add_repo(repo, {f"{name}-{q}.gguf": payload(f"{repo}-{q}") for q in quants})
    hub.clear_logs()
    p = env.run(["models", "--suggest"], HF_ENDPOINT=hub.endpoint)
    if p.returncode != 0:
        fail(f"models --suggest: {describe(p)}")
    size = f"{len(payload('x-Q4_K_M')) / 2**20:.0f} MiB"
    for repo, quants in GUIDE.items():
        for q in quants:
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith(f"{repo}:{q} ")), None)
            if line is None or "fits: RAM" not in line or "context" not in line or size not in line:
                fail(f"models --suggest has no plan for {repo}:{q}: {p.stdout!r}")
    for r in hub.cdn_log.requests(method="GET"):
        rng = r["headers"].get("range", "")
        if not rng.startswith("bytes=0-") or rng == "bytes=0-":
            fail(f"models --suggest downloaded more than a header: {r}")
    p = env.run(["models", "--suggest", "--json"], HF_ENDPOINT=hub.endpoint)
    rows = json.loads(p.stdout) if p.returncode == 0 else []
    if sorted(r["ref"] for r in rows) != sorted(f"{repo}:{q}" for repo, qs in GUIDE.items() for q in qs) or \
            not all(r["fits"] and r["where"] == "RAM" and r["context"] > 0 for r in rows):
        fail(f"models --suggest --json: {describe(p)}")
    # Without the hub: one message, then the estimates from the models' cards
    # (the real sizes, GiB, not the double's payloads).
    p = env.run(["models", "--suggest"], HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    offline = p.stderr.strip()
    lines = [ln for ln in p.stdout.splitlines() if "/" in ln.split(" ")[0]]
    if p.returncode != 0 or "cannot connect" not in p.stderr or "estimates" not in p.stderr or \
            p.stderr.count("\n") != 1 or len(lines) != sum(map(len, GUIDE.values())) or \
            not all("GiB" in ln for ln in lines) or "estimated from the model's configuration" not in p.stdout:
        fail(f"models --suggest without a hub: {describe(p)}")
    p = env.run(["models", "--suggest", "--machine", "32G", "--machine", "64G,24G", "--json"],
                HF_ENDPOINT=hub.endpoint)
    tables = json.loads(p.stdout) if p.returncode == 0 else []
    if [t["machine"] for t in tables] != ["32 GB RAM", "64 GB RAM + 24 GB GPU"] or \
            not all(len(t["rows"]) == len(rows) for t in tables):
        fail(f"models --suggest --machine: {describe(p)}")
    p = env.run(["models", "--suggest", "--machine", "lots"], HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    if p.returncode != 2 or "machine 'lots'" not in p.stderr:
        fail(f"models --suggest --machine lots: {describe(p)}")
    print(f"pull: (n) models --suggest planned {sum(map(len, GUIDE.values()))} files from their headers alone, for "
          f"this machine and two described ones; without the hub one message: {offline[:100]!r}")


def check_lsp_models(env, hub, root):
    """moelsp/models, what the editors' pickers show: the cache at once (a
    split model once), then the guide's rows; a suggested reference picked
    (a settings change) is pulled and loaded in place."""
    d = os.path.join(root, "lsp-models")
    shutil.copytree(os.path.join(root, "cache"), d)
    with lsp_session(env, MOELSP_MODELS_DIR=d, HF_ENDPOINT=hub.endpoint) as c:
        c.request("initialize", {"capabilities": {"window": {"workDoneProgress": True}}})
        c.notify("initialized", {})
        m, ms_cache = c.request("moelsp/models", {})
        labels = [e["label"] for e in m.get("cached", [])]
        if f"{CODER}/{Q8}" not in labels or f"{CODER}/{SPLIT[0]}" not in labels or f"{CODER}/{SPLIT[1]}" in labels \
                or "suggested" in m or m.get("cacheDir") != d or not m.get("embedded"):
            fail(f"moelsp/models (the cache): {json.dumps(m)[:800]}")
        if any(e["path"] != os.path.join(d, e["label"]) or e["bytes"] <= 0 for e in m["cached"]):
            fail(f"moelsp/models: cached paths and sizes: {m['cached']}")
        m, ms_guide = c.request("moelsp/models", {"suggest": True})
        rows = {r["ref"]: r for r in m.get("suggested", [])}
        want = [f"{repo}:{q}" for repo, qs in GUIDE.items() for q in qs]
        if sorted(rows) != sorted(want) or not all(r["fits"] and r["context"] > 0 and r["bytes"] > 0
                                                   and r["where"] == "RAM" and not r["cached"] for r in rows.values()):
            fail(f"moelsp/models suggested: {json.dumps(m)[:1200]}")
        pick = want[-1]
        c.notify("workspace/didChangeConfiguration", {"settings": {"moelsp": {"model": pick}}})
        deadline = time.time() + 90
        while time.time() < deadline:
            st, _ = c.request("moelsp/status")
            if st.get("state") == "ready" and st.get("pull", {}).get("state") == "done":
                break
            time.sleep(0.2)
        else:
            fail(f"the picked model was not pulled and loaded: {json.dumps(st)[:600]}")
        m, _ = c.request("moelsp/models", {"suggest": True})
        got = {r["ref"]: r["cached"] for r in m["suggested"]}
        if not got.get(pick) or m["model"]["setting"] != pick or not m["model"]["file"].startswith(d):
            fail(f"after the pick: {json.dumps(m)[:1200]}")
        try:
            c.request("moelsp/models", {"suggest": "yes"})
            fail("moelsp/models with suggest: \"yes\" was answered")
        except RuntimeError as e:
            if "suggest: expected a boolean" not in str(e):
                fail(f"moelsp/models with a bad param: {e}")
    print(f"pull: (o) moelsp/models: {len(labels)} cached in {ms_cache:.0f} ms, {len(rows)} suggested in "
          f"{ms_guide:.0f} ms; picking {pick} pulled and loaded it")


def check_full_disk(env, hub, root):
    """A disk too small, and a disk that fills during the download: each
    refused with the reason, nothing partial left. The disk is a 16 MiB
    tmpfs in a user and mount namespace of the pull's own (unshare -rm); the
    second download stalls past its header (read first, 1 MiB) while the disk
    fills, then resumes into it."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        print(f"pull: (p) SKIPPED: no user namespaces here for a small disk (unshare -rm: {probe.stderr!r})")
        return
    big, small = "acme/Big-GGUF", "acme/Full-GGUF"
    hub.add_repo(big, {"Big-Q8_0.gguf": GGUF + bytes(12 << 20)})
    hub.add_repo(small, {"Full-Q8_0.gguf": GGUF + random.Random("full").randbytes(4 << 20)})
    marker = os.path.join(root, "full-disk-stalled")
    script = """
set -e
d=$1; marker=$2; shift 2
mkdir -p "$d" && mount -t tmpfs -o size=16m tmpfs "$d"
"$@" pull acme/Big-GGUF:Q8_0 --dir "$d" >/dev/null 2>"$d/.big.err" && echo "big: pulled" || echo "big: $(cat "$d/.big.err")"
"$@" pull acme/Full-GGUF:Q8_0 --dir "$d" >/dev/null 2>"$d/.full.err" & pid=$!
i=0
until ls "$d"/acme/Full-GGUF/*.part >/dev/null 2>&1 || [ $i -gt 600 ]; do i=$((i+1)); sleep 0.05; done
head -c 16000000 /dev/zero > "$d/filler" 2>/dev/null || true   # something else fills the disk
touch "$marker"
wait $pid && echo "full: pulled" || echo "full: $(cat "$d/.full.err")"
echo "left: $(cd "$d" && find . -name '*.gguf' -o -name '*.part' | sort | tr '\n' ' ')"
"""
    hub.stalled.clear()
    hub.stall_after["Full-Q8_0.gguf"] = 2_000_000
    e = dict(env.base, HF_ENDPOINT=hub.endpoint)
    proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script, "sh", os.path.join(root, "small-disk"), marker,
                             BINARY], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists(marker) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    hub.release_stalls()  # the connection is cut; the resume writes into a full disk
    out, err = proc.communicate(timeout=TIMEOUT)
    m = re.fullmatch(r"big: (.*)\nfull: (.*)\nleft: (.*)\n", out, re.S)
    if not m:
        fail(f"the small disk's script: {out!r} {err!r}")
    lines = {"big": m.group(1).strip(), "full": m.group(2).strip().splitlines()[-1], "left": m.group(3)}
    if "more are needed" not in lines["big"] or "free" not in lines["big"]:
        fail(f"a model larger than the disk: {out!r} {err!r}")
    full = lines["full"]
    if "pulled" in full or "done" in m.group(2) or not re.search(r"No space left", full):
        fail(f"a disk that filled during the download: {out!r} {err!r}")
    if lines["left"].strip():
        fail(f"a full disk left partial files: {out!r}")
    print(f"pull: (p) a 16 MiB disk: {lines['big'][len('moelsp pull: '):][:90]!r}; filled during the download: "
          f"{full[len('moelsp pull: '):][:90]!r}; nothing partial left")


def check_proxy(env, hub, root):
    # Plain http through http_proxy: absolute-form requests to the hub and to the CDN.
    d = os.path.join(root, "proxy-http")
    with Proxy() as px:
        # A proxy URL with credentials: Proxy-Authorization (Basic), and never the password in a message.
        authed = px.url.replace("http://", "http://ann:s3cret@")
        p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=hub.endpoint, http_proxy=authed, no_proxy="", NO_PROXY="")
        expect_pulled(p, "a pull through http_proxy", d, CODER, Q8, CODER_FILES)
        gets = px.targets("GET")
        if not any(t.startswith(f"{hub.endpoint}/api/models/{CODER}/tree/") for t in gets):
            fail(f"the proxy saw no absolute-form GET of the tree: {px.seen}")
        if not any(t.startswith(f"{hub.cdn_base}/cdn/") for t in gets):
            fail(f"the proxy saw no absolute-form GET to the CDN: {px.seen}")
        if not px.auth or any(a != "Basic YW5uOnMzY3JldA==" for a in px.auth):
            fail(f"the proxy's credentials were not sent as Basic authorization: {px.auth}")
        n_http = len(px.seen)
    p = env.pull(f"{CODER}:Q8_0", os.path.join(root, "proxy-down"), HF_ENDPOINT=hub.endpoint,
                 http_proxy=f"http://ann:s3cret@127.0.0.1:{closed_port()}", no_proxy="", NO_PROXY="")
    expect_failure(p, "a proxy that is down", "proxy", "cannot connect")
    if "s3cret" in p.stderr:
        fail(f"the proxy's password is in a message: {p.stderr!r}")
    # NO_PROXY: the hosts it names are reached directly (the proxy here is not there).
    d = os.path.join(root, "proxy-bypass")
    p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=hub.endpoint, http_proxy=f"http://127.0.0.1:{closed_port()}",
                 NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    expect_pulled(p, "a pull with NO_PROXY naming the hub and the CDN", d, CODER, Q8, CODER_FILES)
    # https through https_proxy: CONNECT tunnels, the CA from SSL_CERT_FILE.
    certs = os.path.join(root, "certs")
    os.makedirs(certs)
    ca, cert, key = make_certs(certs)
    with HubDouble(cert, key) as tls, Proxy() as px:
        tls.add_repo(CODER, CODER_FILES)
        d = os.path.join(root, "proxy-https")
        p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=tls.endpoint, SSL_CERT_FILE=ca, https_proxy=px.url,
                     no_proxy="", NO_PROXY="")
        expect_pulled(p, "a pull over TLS through https_proxy", d, CODER, Q8, CODER_FILES)
        tunnels = set(px.targets("CONNECT"))
        want = {f"{tls.hub_host}:{tls.hub_port}", f"{tls.cdn_host}:{tls.cdn_port}"}
        if not want <= tunnels:
            fail(f"the proxy did not see CONNECT to the hub and the CDN ({sorted(want)}): {px.seen}")
        if px.targets("GET"):
            fail(f"https went through the proxy in the clear: {px.seen}")
        # The upper-case name too.
        before = len(px.targets("CONNECT"))
        d = os.path.join(root, "proxy-https-upper")
        p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=tls.endpoint, SSL_CERT_FILE=ca, HTTPS_PROXY=px.url, NO_PROXY="")
        expect_pulled(p, "a pull over TLS through HTTPS_PROXY", d, CODER, Q8, CODER_FILES)
        if len(px.targets("CONNECT")) <= before:
            fail(f"HTTPS_PROXY (upper-case) was not used: {px.seen}")
        # Without the test's CA the certificate is refused.
        d = os.path.join(root, "tls-no-ca")
        tls.clear_logs()
        p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=tls.endpoint)
        msg = expect_failure(p, "TLS without the CA that signed the hub's certificate")
        if tls.cdn_log.requests(method="GET"):
            fail("a hub whose certificate was refused still led to a download")
    print(f"pull: (h) through http_proxy ({n_http} absolute-form requests), past it with NO_PROXY, and over TLS "
          f"through https_proxy and HTTPS_PROXY (CONNECT {', '.join(sorted(tunnels))}); without the CA refused: "
          f"{msg[:70]!r}")


def size_shown(line, size):
    """Whether the line shows `size` bytes in KiB / MiB / GiB (as rounded)."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB)", line):
        digits = len(num.split(".")[1]) if "." in num else 0
        if abs(float(num) * units[unit] - size) <= (0.5 * 10 ** -digits + 0.001) * units[unit] + 0.01 * size:
            return True
    return False


def check_models_rm(env, hub, d):
    partial = os.path.join(d, "acme", "Other-GGUF", "Other-Q6_K.gguf.part")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as f:
        f.write(b"GGUF" + b"\0" * 200_000)
    expect = {f"{CODER}/{Q8}": len(CODER_FILES[Q8]), f"{CODER}/{Q4KM}": len(CODER_FILES[Q4KM]),
              f"{CODER}/{SPLIT[0]}": len(CODER_FILES[SPLIT[0]]), f"{CODER}/{SPLIT[1]}": len(CODER_FILES[SPLIT[1]]),
              f"{RESUME}/{Q5KM}": len(payload(Q5KM))}

    def models(*args, **e):
        p = env.run(["models", *args], **e)
        if p.returncode != 0:
            fail(f"moelsp models {' '.join(args)}: {describe(p)}")
        return [ln for ln in p.stdout.splitlines() if ln.strip()]

    lines = models("--dir", d)
    for rel, size in expect.items():
        mine = [ln for ln in lines if rel in ln]
        if not mine:
            fail(f"moelsp models does not list {rel}: {lines}")
        if not size_shown(mine[0], size):
            fail(f"moelsp models does not show {rel}'s size ({size} bytes) in MiB/GiB: {mine[0]!r}")
    for ln in lines:
        if "Other-Q6_K.gguf" in ln and "partial" not in ln.lower():
            fail(f"a .part is listed as a whole model: {ln!r}")
    total = lines[-1]
    if any(rel in total for rel in expect) or not re.search(r"\d\s*(KiB|MiB|GiB)", total):
        fail(f"moelsp models' last line is not a total: {total!r}")
    if not any(f"{CODER}/{Q8}" in ln for ln in models(MOELSP_MODELS_DIR=d)):
        fail("moelsp models without --dir does not read MOELSP_MODELS_DIR")
    empty = os.path.join(os.path.dirname(d), "empty-cache")
    os.makedirs(empty, exist_ok=True)
    if not any(f"{CODER}/{Q8}" in ln for ln in models("--dir", d, MOELSP_MODELS_DIR=empty)):
        fail("--dir does not win over MOELSP_MODELS_DIR")

    p = env.run(["rm", f"{CODER}:Q8_0", "--dir", d])
    if p.returncode != 0:
        fail(f"moelsp rm {CODER}:Q8_0: {describe(p)}")
    if os.path.exists(os.path.join(d, CODER, Q8)):
        fail("moelsp rm left the file")
    after = models("--dir", d)
    if any(Q8 in ln for ln in after) or not any(Q4KM in ln for ln in after):
        fail(f"after rm of Q8_0, moelsp models lists: {after}")
    p = env.run(["rm", f"{CODER}/{SPLIT[0]}", "--dir", d])
    if p.returncode != 0 or any(os.path.exists(os.path.join(d, CODER, s)) for s in SPLIT):
        fail(f"moelsp rm of a split model's first part by its path did not remove every part: {describe(p)}")
    p = env.run(["rm", f"{CODER}:Q8_0", "--dir", d])
    if p.returncode != 1 or not p.stderr.strip():
        fail(f"moelsp rm of what the cache lacks: expected exit 1 and a message: {describe(p)}")
    print(f"pull: (i) moelsp models listed {len(expect)} files with their sizes and a total ({total.strip()[:60]!r}), "
          f"the .part as partial or not at all; rm removed Q8_0, then both Q4_0 parts by path; rm of nothing: "
          f"{p.stderr.strip()[:60]!r}")


def check_relative_redirect(env, root):
    d = os.path.join(root, "relative")
    with HubDouble(relative_redirect=True) as hub:
        hub.add_repo(CODER, CODER_FILES)
        p = env.pull(f"{CODER}:Q8_0", d, HF_ENDPOINT=hub.endpoint)
        expect_pulled(p, "a pull whose resolve redirects to a relative Location", d, CODER, Q8, CODER_FILES)
        if not cdn_gets(hub, Q8, hub.hub_log):
            fail(f"the relative Location (/cdn/...) was not fetched from the hub: "
                 f"{[r['path'] for r in hub.hub_log.requests()]}")
    print("pull: (j) a relative redirect (Location: /cdn/... on the hub) followed, byte-identical")


def main():
    if not BINARY or not os.access(BINARY, os.X_OK):
        fail("give the moelsp binary as the first argument")
    p = subprocess.run([BINARY, "pull", "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        fail(f"the binary has no `pull` subcommand: {describe(p)}")
    root = tempfile.mkdtemp(prefix="moelsp-pull-")
    checks = 0
    try:
        env = Env(root)
        cache = os.path.join(root, "cache")
        with HubDouble(page_size=2) as hub:
            add_repos(hub)
            for check in (check_quant, check_split, check_cached, check_resume):
                check(env, hub, cache)
                checks += 1
            for check in (check_changed, check_checksum, check_gated, check_errors, check_header_first, check_lsp_pull,
                          check_lsp_no_network, check_cli_model_ref, check_guide, check_lsp_models, check_full_disk,
                          check_proxy):
                check(env, hub, root)
                checks += 1
            check_models_rm(env, hub, cache)
            checks += 1
        check_relative_redirect(env, root)
        checks += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"test_pull: {checks} checks passed")


if __name__ == "__main__":
    main()
