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

    tests/agents/run_agents.py --moelsp build/cli/moelsp -m MODEL.gguf [--slim] \\
        [--chat-template FILE.jinja] [--llama-server PATH] [--clis codex,claude,opencode]

--slim shrinks each CLI's prompt through its own documented options (a short
system prompt, only the tools a file question needs): the test command runs
it that way with models/moelsp-agent.gguf, a 12 M model trained on prompts of
up to 4,096 tokens, where the CLIs' full prompts are 10,000 to 40,000.

Nothing here recognises a test prompt: the server sees what the CLI sends.
"""
import argparse, hashlib, http.client, http.server, json, os, random, shutil, socket, subprocess, sys, tempfile
import threading, time, urllib.request

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


def read_answer(body):
    """(the tools a model's answer calls, its text), from any of the three APIs' streamed answers."""
    names, text, whole = [], [], []  # whole: Responses' finished message items, for a server that sends no deltas
    for line in body.decode(errors="replace").split("\n"):
        try:
            j = json.loads(line[len("data:"):].strip() if line.startswith("data:") else line)
        except ValueError:
            continue
        if not isinstance(j, dict):
            continue
        for c in j.get("choices") or []:  # chat completions
            d = c.get("delta") or c.get("message") or {}
            names += [t["function"]["name"] for t in d.get("tool_calls") or [] if t.get("function", {}).get("name")]
            text += [d["content"]] if isinstance(d.get("content"), str) else []
        item = j.get("item") or {}  # Responses
        if j.get("type") == "response.output_item.added" and item.get("type") == "function_call":
            names.append(item["name"])
        if j.get("type") == "response.output_text.delta":
            text.append(j["delta"])
        if j.get("type") == "response.output_item.done" and item.get("type") == "message":
            whole += [p.get("text", "") for p in item.get("content") or []]
        block, delta = j.get("content_block") or {}, j.get("delta") or {}  # Anthropic
        if j.get("type") == "content_block_start" and block.get("type") == "tool_use":
            names.append(block["name"])
        if j.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            text.append(delta["text"])
    return names, "".join(text) or "".join(whole)


class Recorder:
    """A pass-through proxy between a CLI and the server that times each model turn (one POST) and notes
    the tools the answer called: the same measure for moelsp and llama-server."""

    def __init__(self, upstream_port):
        turns = self.turns = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the answer ends when the connection closes: streams pass as they come

            def do_GET(self):
                self.forward(None)

            def do_POST(self):
                self.forward(self.rfile.read(int(self.headers.get("content-length", 0))))

            def forward(self, body):
                t0 = time.monotonic()
                up = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=900)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                up.request(self.command, self.path, body=body, headers=headers)
                r = up.getresponse()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.end_headers()
                got = bytearray()
                while chunk := r.read1(65536):
                    got += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
                if body is not None:
                    calls, text = read_answer(bytes(got))
                    try:
                        agent_loop = bool(json.loads(body).get("tools"))  # not a title request
                    except (ValueError, AttributeError):
                        agent_loop = False
                    turns.append({"path": self.path, "status": r.status, "seconds": time.monotonic() - t0,
                                  "calls": calls, "text": text, "agent_loop": agent_loop,
                                  "body": body.decode("utf-8", errors="replace")})

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


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


INSTRUCTIONS = "You are a coding agent. Use the tools to answer."


def codex_config(base, codex_home, slim):
    """config.toml. Slim: Codex's own instructions replaced by INSTRUCTIONS (model_instructions_file), and
    the tools a file question does not need (web search, sub-agents, goals, images, apps, plugins, the
    skills list) turned off, which leaves exec_command, write_stdin and request_user_input."""
    lines = ['model = "local"', 'model_provider = "local"']
    if slim:
        path = os.path.join(codex_home, "instructions.md")
        with open(path, "w") as f:
            f.write(INSTRUCTIONS + "\n")
        lines += [f'model_instructions_file = "{path}"', 'web_search = "disabled"', "",
                  "[features]", "multi_agent = false", "goals = false", "view_image = false", "apps = false",
                  "plugins = false", "", "[skills]", "include_instructions = false"]
    lines += ["", "[model_providers.local]", 'name = "local"', f'base_url = "{base}/v1"', 'wire_api = "responses"']
    return "\n".join(lines) + "\n"


def opencode_config(base, max_out, slim):
    """opencode.json. Slim: the build agent's prompt replaced by INSTRUCTIONS and every tool but read
    turned off. (A provider named "local" is not taken: OpenCode falls back to its own cloud model.)"""
    config = {"$schema": "https://opencode.ai/config.json",
              "provider": {"moelsp": {"npm": "@ai-sdk/openai-compatible", "name": "moelsp",
                                      "options": {"baseURL": f"{base}/v1", "apiKey": "local"},
                                      "models": {"agent": {"name": "agent",
                                                           "limit": {"context": 32768, "output": max_out}}}}},
              "model": "moelsp/agent", "small_model": "moelsp/agent"}
    if slim:
        off = ["bash", "edit", "write", "glob", "grep", "list", "patch", "todowrite", "todoread", "webfetch",
               "websearch", "codesearch", "task", "skill", "question"]
        config["tools"] = {name: False for name in off}
        config["agent"] = {"build": {"prompt": INSTRUCTIONS}}
    return config


def cli_setup(name, base, work, home, max_out, slim):
    """The command and environment for one CLI, configured by its documented settings only."""
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_DATA_HOME=os.path.join(home, ".local", "share"))
    if name == "codex":
        codex_home = os.path.join(home, ".codex")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write(codex_config(base, codex_home, slim))
        env["CODEX_HOME"] = codex_home
        return ["codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", QUESTION], env
    if name == "claude":
        env.update(ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="local", DISABLE_TELEMETRY="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", CLAUDE_CODE_MAX_OUTPUT_TOKENS=str(max_out))
        # Slim: --bare (no hooks, plugins, CLAUDE.md discovery), only the Read tool, INSTRUCTIONS as the system prompt.
        extra = ["--bare", "--tools", "Read", "--system-prompt", INSTRUCTIONS] if slim else []
        return ["claude", "-p", QUESTION, "--output-format", "json"] + extra, env
    with open(os.path.join(work, "opencode.json"), "w") as f:
        json.dump(opencode_config(base, max_out, slim), f)
    env.update(OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1")
    return ["opencode", "run", "--model", "moelsp/agent", QUESTION], env


def run_cli(name, port, bin_dir, timeout, max_out, slim):
    recorder = Recorder(port)
    base = f"http://127.0.0.1:{recorder.port}"
    work, home = tempfile.mkdtemp(prefix="agent-work-"), tempfile.mkdtemp(prefix="agent-home-")
    secret = "The owl of line one is " + "".join(random.choice("bcdfghjklmnpqrstvwxz") for _ in range(10))
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write(secret + "\nsecond line\n")
    cmd, env = cli_setup(name, base, work, home, max_out, slim)
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
    recorder.close()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    turns = recorder.turns
    # Passed: the model's last answer in the agent loop (requests with tools; not a title request) quotes
    # the line, and the CLI printed it. The line in the CLI's output alone is not enough: Codex prints
    # the command's output too.
    loop = [t for t in turns if t["agent_loop"]]
    answer = loop[-1]["text"] if loop else ""
    passed = secret in answer and secret in out
    return {"cli": name, "passed": passed, "rc": rc, "seconds": round(seconds, 1), "turns": len(turns),
            "seconds_per_turn": round(sum(t["seconds"] for t in turns) / len(turns), 2) if turns else None,
            "calls": [c for t in turns for c in t["calls"]], "statuses": [t["status"] for t in turns],
            "secret": secret, "answer": answer.strip(), "tail": out[-600:],
            "requests": [{"path": t["path"], "body": t["body"]} for t in loop]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moelsp", help="the moelsp binary")
    ap.add_argument("-m", "--model", help="the GGUF both servers load")
    ap.add_argument("--chat-template", help="a Jinja file for a GGUF without a template (both servers)")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server, built outside the repository")
    ap.add_argument("-c", "--context-size", type=int, default=0, help="context (default: each server's own)")
    ap.add_argument("--clis", default="codex,claude,opencode")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per CLI run")
    ap.add_argument("--max-output", type=int, default=2048, help="output tokens the CLIs that allow it ask for")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/moelsp/agent-clis"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--slim", action="store_true",
                    help="shrink each CLI's prompt through its documented options (a short system prompt, only "
                         "the tools a file question needs): what a small model with a short context can take")
    ap.add_argument("--install-only", action="store_true", help="install the pinned CLIs into the cache and stop")
    ap.add_argument("--record", metavar="DIR",
                    help="write each CLI's agent-loop requests, as it sent them, to DIR/CLI.json (the first "
                         "server's passing attempt): what bench/bench_agent_turns.py replays")
    ap.add_argument("--attempts", type=int, default=1,
                    help="runs per CLI, each with a new random line, until one passes (a small model's copying "
                         "is right most of the time, not always)")
    a = ap.parse_args()
    bin_dir = install_clis(a.cache)
    if a.install_only:
        return
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
    if not servers or not a.model:
        raise SystemExit("give -m MODEL and --moelsp and/or --llama-server")
    results = []
    for server, cmd, port in servers:
        with tempfile.NamedTemporaryFile(prefix=server + "-", suffix=".log", delete=False) as log:
            proc = start(cmd, port, log)
            try:
                for cli in a.clis.split(","):
                    # Each attempt has a new random line. A small model copies it right most of the
                    # time, not always; a broken protocol or parser fails every attempt.
                    tries = []
                    while len(tries) < a.attempts and not (tries and tries[-1]["passed"]):
                        tries.append(run_cli(cli, port, bin_dir, a.timeout, a.max_output, a.slim))
                    r = dict(tries[-1], server=server, attempts=len(tries))
                    requests = r.pop("requests")
                    if a.record and server == servers[0][0] and r["passed"]:
                        os.makedirs(a.record, exist_ok=True)
                        with open(os.path.join(a.record, cli + ".json"), "w") as f:
                            json.dump({"cli": cli, "model": os.path.basename(a.model), "slim": a.slim,
                                       "requests": requests}, f, indent=1)
                    results.append(r)
                    print(f"{server:13} {cli:9} {'PASS' if r['passed'] else 'FAIL'} (attempt {len(tries)}) "
                          f"rc={r['rc']} {r['seconds']} s, "
                          f"{r['turns']} turns, {r['seconds_per_turn']} s/turn, calls {r['calls']}", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print("\n| server | CLI | answered with the file's line | attempts | tools the model called | model turns | s/turn "
          "| exit | seconds |\n|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['server']} | {r['cli']} | {'yes' if r['passed'] else 'no'} | {r['attempts']} "
              f"| {', '.join(r['calls']) or '-'} | {r['turns']} | {r['seconds_per_turn']} | {r['rc']} | {r['seconds']} |")
    for r in results:
        print(f"\n--- {r['server']} / {r['cli']}: notes.txt begins '{r['secret']}'; the model's last answer:\n"
              f"{r['answer'][:400]}")
        if not r["passed"]:
            print(f"--- the end of the CLI's output:\n{r['tail']}")
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    sys.exit(0 if all(r["passed"] for r in results) else 1)


if __name__ == "__main__":
    main()
