#!/usr/bin/env python3
"""Runs vim9_test.vim (the Vim 9 plugin against a real `moelsp lsp`) in a
pseudo-terminal, so Vim's insert mode, timers and redraws behave as they do
for a person; nothing is typed into the terminal, the test feeds its own keys.

    MOELSP_BINARY=build/cli/moelsp /usr/bin/python3 editor-clients/tests/run_vim9_test.py

Environment: MOELSP_BINARY (required), MOELSP_VIM (the vim to run, default `vim`),
MOELSP_VIM9_RESULT (the test's log, default a temporary file). Prints the
test's log; exits 0 when it passed, 1 otherwise. Stdlib only, Linux.
"""
import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time

TIMEOUT_S = 150  # the test stops itself after 120 s


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    binary = os.environ.get("MOELSP_BINARY", "")
    if not binary or not os.access(binary, os.X_OK):
        print("run_vim9_test: set MOELSP_BINARY to the moelsp executable", file=sys.stderr)
        return 1
    env = dict(os.environ, MOELSP_BINARY=os.path.abspath(binary), TERM="xterm")
    own_dir = None if env.get("MOELSP_VIM9_RESULT") else tempfile.mkdtemp(prefix="moelsp_vim9_")
    result = env.get("MOELSP_VIM9_RESULT") or os.path.join(own_dir, "result.log")
    env["MOELSP_VIM9_RESULT"] = result
    vim = env.get("MOELSP_VIM") or "vim"
    argv = [vim, "-Nu", "NONE", "-i", "NONE", "-n", "--not-a-term", "-S", os.path.join(here, "vim9_test.vim")]

    pid, fd = pty.fork()
    if pid == 0:  # the child: Vim on the terminal's other end
        try:
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    deadline = time.monotonic() + TIMEOUT_S
    timed_out = False
    while True:  # drain the screen output until Vim closes the terminal
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                if not os.read(fd, 65536):
                    break
            except OSError:  # EIO: the child is gone
                break
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os.close(fd)

    text = open(result, encoding="utf-8", errors="replace").read() if os.path.exists(result) else ""
    sys.stdout.write(text)
    lines = text.splitlines()
    passed = not timed_out and code == 0 and bool(lines) and lines[-1].endswith(" PASS")
    if timed_out:
        print(f"vim9 test FAILED: Vim did not finish within {TIMEOUT_S} s")
    elif not passed:
        print(f"vim9 test FAILED (vim exit code {code}; log: {result})")
    else:
        print("vim9 test passed")
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
