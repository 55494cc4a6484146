#!/usr/bin/env python3
"""`moelsp lsp` as a process: a client that closes the server's stdout (but
keeps stdin open) gets an exit with a message, not a silent death by SIGPIPE;
a model that fails to load is logged as an error on stderr at the default
level and in --log-file.

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
    print("lsp process test passed")


if __name__ == "__main__":
    main()
