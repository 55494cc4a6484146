#!/usr/bin/env python3
"""The Debian package as a user gets it: `cpack` in the build directory
writes the .deb; `dpkg -i` installs it into a temporary root (--root, so the
machine's own dpkg database is untouched, and --force-depends since that
root has none of the libraries it depends on: they are this machine's, the
Depends field is checked instead); then the installed binary runs from there:
--version, an inline completion over LSP from the packaged default model
(found beside the binary, not in the sources), the CUDA plugin found beside
it, the man page rendered, the bash completion completing; `dpkg -r` leaves
nothing behind.

usage: test_deb.py BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "demo"))
from lsp_demo import Client  # noqa: E402  (the README demo's stdlib LSP client)


def fail(msg):
    print(f"test_deb FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def dpkg(root, *args):
    return run(["dpkg", f"--root={root}", "--force-not-root", "--log=/dev/null", *args])


def completion_from(binary, root):
    """An inline completion from the installed server on its default model."""
    c = Client([binary, "lsp"])
    try:
        c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}}})
        c.notify("initialized", {})
        for _ in range(600):
            st, _ = c.request("moelsp/status")
            if st.get("state") in ("ready", "error"):
                break
            __import__("time").sleep(0.1)
        model = st.get("message", "")
        if st.get("state") != "ready" or os.path.join(root, "usr/share/moelsp/moelsp-default.gguf") not in model:
            fail(f"the installed server did not load the packaged model: {json.dumps(st)[:600]}")
        r, ms = c.complete_at_end("file:///tmp/deb_test.py", "def area(width, height):\n    return ")
        items = r.get("items", []) if isinstance(r, dict) else []
        if not items or not items[0].get("insertText", "").strip():
            fail(f"no completion from the installed server: {r!r}")
        c.request("shutdown")
        c.notify("exit", None)
        c.proc.wait(timeout=30)
        return items[0]["insertText"], ms
    finally:
        if c.proc.poll() is None:
            c.proc.kill()


def main():
    if len(sys.argv) != 2:
        fail("usage: test_deb.py BUILD_DIR")
    build = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="moelsp-deb-")
    try:
        out, root = os.path.join(tmp, "out"), os.path.join(tmp, "root")
        run(["cpack", "-B", out], cwd=build)
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        if len(debs) != 1:
            fail(f"cpack wrote {debs} in {out}")
        deb = os.path.join(out, debs[0])
        fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Depends"]).stdout
        for want in ("Package: moelsp", "Architecture: amd64", "libc6", "libsentencepiece0", "libspdlog"):
            if want not in fields:
                fail(f"the package's control has no {want!r}:\n{fields}")
        if "cuda" in fields.split("Depends:")[1].split("\n")[0]:
            fail(f"the package depends on CUDA (it must install on machines without it):\n{fields}")
        admin = os.path.join(root, "var", "lib", "dpkg")
        for d in ("updates", "info", "triggers"):
            os.makedirs(os.path.join(admin, d))
        open(os.path.join(admin, "status"), "w").close()
        dpkg(root, "--force-depends", "-i", deb)
        binary = os.path.join(root, "usr", "bin", "moelsp")
        version = run([binary, "--version"]).stdout.strip()
        if not version.startswith("moelsp 0.1.0"):
            fail(f"--version: {version!r}")
        text, ms = completion_from(binary, root)
        plugin = os.path.join(root, "usr", "lib", "moelsp", "libmoelsp_cuda.so")
        if os.path.exists(plugin):  # a CUDA build: the plugin beside the binary loads (libcudart is here)
            prof = run([binary, "profile"], env={**os.environ, "MOELSP_CUDA_PLUGIN": ""}).stdout
            if "could not be loaded" in prof:
                fail(f"the installed CUDA plugin did not load:\n{prof}")
        man = run(["man", "-l", os.path.join(root, "usr/share/man/man1/moelsp.1.gz")],
                  env={**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": ""}).stdout
        for want in ("moelsp pull [OPTIONS] ref", "--suggest", "COMMANDS"):
            if want not in man:
                fail(f"the man page lacks {want!r}")
        comp = os.path.join(root, "usr/share/bash-completion/completions/moelsp")
        words = run(["bash", "-c", f'source "{comp}"; COMP_WORDS=(moelsp models --s); COMP_CWORD=2; _moelsp; '
                     'echo "${COMPREPLY[*]}"']).stdout.split()
        if "--suggest" not in words:
            fail(f"bash completion of `moelsp models --s`: {words}")
        listed = dpkg(root, "-L", "moelsp").stdout.split()
        dpkg(root, "-r", "moelsp")
        left = [p for p in listed if os.path.isfile(os.path.join(root, p.lstrip("/")))]
        if left:
            fail(f"dpkg -r left {left}")
        print(f"test_deb: {debs[0]} ({os.path.getsize(deb) >> 20} MiB) installed into a temporary root; "
              f"{version}; a completion from the packaged model in {ms:.0f} ms: {text.splitlines()[0]!r}; "
              f"man page and bash completion work; dpkg -r removed {len(listed)} paths")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
