#!/usr/bin/env python3
"""Coding-agent CLIs against a local server, end to end.

Codex CLI (`codex exec`, Responses API), Claude Code (`claude -p`, Messages
API) and OpenCode (`opencode run`, chat completions), pinned in
package-lock.json and installed into a cache outside the checkout, are each
configured only through their documented settings (config.toml, environment,
opencode.json) to use the server, and asked a question that needs a tool:
the first line of notes.txt, which holds a line the model cannot know. A CLI
passes when it prints that line. The same run can start `moelsp serve` and
llama-server on the same GGUF, for a side-by-side report.

    tests/agents/run_agents.py --moelsp build/server/moelsp -m MODEL.gguf \\
        [--chat-template FILE.jinja] [--llama-server PATH] [--clis codex,claude,opencode]

Nothing here recognises a test prompt: the server sees what the CLI sends.
"""
import argparse, hashlib, json, os, random, shutil, socket, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
QUESTION = "What is the first line of notes.txt? Read the file, then answer with that line."


def install_clis(cache_root):
    """The pinned CLIs installed into a cache keyed by the lock file. `npm install`
    (which keeps to the lock), not `npm ci`: opencode-ai names platform packages
    the registry does not have, which npm ci takes for a lock out of sync."""
    lock = open(os.path.join(HERE, "package-lock.json"), "rb").read()
    cache = os.path.join(cache_root, hashlib.sha256(lock).hexdigest()[:16])
    if not os.path.exists(os.path.join(cache, "node_modules", ".bin", "codex")):
        os.makedirs(cache, exist_ok=True)
        for f in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(HERE, f), cache)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=cache, check=True)
    return os.path.join(cache, "node_modules", ".bin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, port, log):
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    for _ in range(600):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return proc
        except Exception:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[0]} exited {proc.returncode}; see {log.name}")
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{cmd[0]} did not become ready")


def cli_setup(name, base, work, home, max_out):
    """The command and environment for one CLI, configured by its documented settings."""
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_DATA_HOME=os.path.join(home, ".local", "share"))
    if name == "codex":
        codex_home = os.path.join(home, ".codex")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write('model = "local"\nmodel_provider = "local"\n\n[model_providers.local]\nname = "local"\n'
                    f'base_url = "{base}/v1"\nwire_api = "responses"\n')
        env["CODEX_HOME"] = codex_home
        return ["codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", QUESTION], env
    if name == "claude":
        env.update(ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="local", DISABLE_TELEMETRY="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", CLAUDE_CODE_MAX_OUTPUT_TOKENS=str(max_out))
        return ["claude", "-p", QUESTION, "--output-format", "json"], env
    with open(os.path.join(work, "opencode.json"), "w") as f:
        # (A provider named "local" is not taken: OpenCode falls back to its own cloud model.)
        json.dump({"$schema": "https://opencode.ai/config.json",
                   "provider": {"moelsp": {"npm": "@ai-sdk/openai-compatible", "name": "moelsp",
                                           "options": {"baseURL": f"{base}/v1", "apiKey": "local"},
                                           "models": {"agent": {"name": "agent",
                                                                "limit": {"context": 32768, "output": max_out}}}}},
                   "model": "moelsp/agent", "small_model": "moelsp/agent"}, f)
    env.update(OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1")
    return ["opencode", "run", "--model", "moelsp/agent", QUESTION], env


def run_cli(name, base, bin_dir, timeout, max_out):
    work, home = tempfile.mkdtemp(prefix="agent-work-"), tempfile.mkdtemp(prefix="agent-home-")
    secret = "The owl of line one is " + "".join(random.choice("bcdfghjklmnpqrstvwxz") for _ in range(10))
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write(secret + "\nsecond line\n")
    cmd, env = cli_setup(name, base, work, home, max_out)
    env["PATH"] = bin_dir + os.pathsep + env["PATH"]
    env["PWD"] = work  # OpenCode finds its project (opencode.json) by $PWD, not the process's directory
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"), "timeout"
    seconds = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    return {"cli": name, "passed": secret in out, "rc": rc, "seconds": round(seconds, 1), "tail": out[-600:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moelsp", help="the moelsp binary")
    ap.add_argument("-m", "--model", required=True, help="the GGUF both servers load")
    ap.add_argument("--chat-template", help="a Jinja file for a GGUF without a template (both servers)")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server, built outside the repository")
    ap.add_argument("-c", "--context-size", type=int, default=0, help="context (default: each server's own)")
    ap.add_argument("--clis", default="codex,claude,opencode")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per CLI run")
    ap.add_argument("--max-output", type=int, default=2048, help="output tokens the CLIs that allow it ask for")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/moelsp/agent-clis"))
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    bin_dir = install_clis(a.cache)
    servers = []
    if a.moelsp:
        port = free_port()
        cmd = [a.moelsp, "serve", "--port", str(port), "-m", a.model]
        cmd += ["--chat-template", a.chat_template] if a.chat_template else []
        cmd += ["-c", str(a.context_size)] if a.context_size else []
        servers.append(("moelsp", cmd, port))
    if a.llama_server:
        port = free_port()
        cmd = [a.llama_server, "--port", str(port), "-m", a.model, "--jinja"]
        cmd += ["--chat-template-file", a.chat_template] if a.chat_template else []
        cmd += ["-c", str(a.context_size)] if a.context_size else []
        servers.append(("llama-server", cmd, port))
    if not servers:
        raise SystemExit("give --moelsp and/or --llama-server")
    results = []
    for server, cmd, port in servers:
        with tempfile.NamedTemporaryFile(prefix=server + "-", suffix=".log", delete=False) as log:
            proc = start(cmd, port, log)
            try:
                for cli in a.clis.split(","):
                    r = run_cli(cli, f"http://127.0.0.1:{port}", bin_dir, a.timeout, a.max_output)
                    r["server"] = server
                    results.append(r)
                    print(f"{server:13} {cli:9} {'PASS' if r['passed'] else 'FAIL'} rc={r['rc']} {r['seconds']} s",
                          flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print("\n| server | CLI | answered with the file's line | exit | seconds |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['server']} | {r['cli']} | {'yes' if r['passed'] else 'no'} | {r['rc']} | {r['seconds']} |")
    for r in results:
        if not r["passed"]:
            print(f"\n--- {r['server']} / {r['cli']}: the end of its output\n{r['tail']}")
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    sys.exit(0 if all(r["passed"] for r in results) else 1)


if __name__ == "__main__":
    main()
