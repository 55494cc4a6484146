#!/usr/bin/env python3
"""Agent turns replayed: does each turn pay only for its new tokens?

    bench/bench_agent_turns.py --moelsp build/cli/moelsp -m models/moelsp-agent.gguf \\
        [--llama-server PATH] [--recordings tests/data/agent-turns] [--json OUT]

Replays the requests real coding-agent CLIs sent (recorded by
`tests/agents/run_agents.py --record`: Codex through /v1/responses, Claude
Code through /v1/messages, OpenCode through /v1/chat/completions — each turn
the whole conversation so far plus the last tool result) against a fresh
server, streamed as the CLIs stream them, and reports per turn: the prompt's
tokens, how many the server took from its prefix cache (the APIs' own usage
fields: cached_tokens, cache_read_input_tokens), and the time to the first
generated token. Then the same turns with two agents alternating on one
server (A1 B1 A2 B2 …): each agent's turn still reuses its own prefix.

With --prompt-cache, also each agent's first turn in a fresh moelsp process,
twice over one --prompt-cache directory: the first process computes the whole
prompt and stores it; the second (a new session after a restart) reads the
stored prefix and computes only the rest.

llama-server (--llama-server, built outside the repository) gets the same
replay for a side-by-side table; its usage reports cached tokens for chat
(`timings.cache_n`), so its cache share is read there.
"""
import argparse
import glob
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, port):
    log = tempfile.NamedTemporaryFile(prefix="agent-turns-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server did not start: see {log.name}")


def events(resp):
    """(event name, data) of an SSE stream as they arrive."""
    name, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def first_token(path, name, d):
    """Whether this event carries generated output (text, reasoning, or a call)."""
    if path.startswith("/v1/chat/completions"):
        ch = (d.get("choices") or [{}])[0].get("delta", {})
        return bool(ch.get("content") or ch.get("reasoning_content") or ch.get("tool_calls"))
    if path.startswith("/v1/responses"):
        t = d.get("type", name or "")
        return t.endswith(".delta") or (t == "response.output_item.added" and d["item"]["type"] == "function_call")
    if path.startswith("/v1/messages"):
        t = d.get("type", name or "")
        return t == "content_block_delta" or (t == "content_block_start" and d["content_block"]["type"] == "tool_use")
    return False


def usage_of(path, name, d, got):
    """Fills got['prompt'], got['cached'] from the API's usage when this event has it."""
    if path.startswith("/v1/chat/completions"):
        u = d.get("usage")
        if u:
            got["prompt"] = u.get("prompt_tokens")
            got["cached"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        t = d.get("timings")  # llama-server's
        if t and "cache_n" in t:
            got["cached"] = t["cache_n"]
            got["prompt"] = t["cache_n"] + t.get("prompt_n", 0)
    elif path.startswith("/v1/responses"):
        if d.get("type") in ("response.completed", "response.incomplete"):
            u = d["response"].get("usage") or {}
            got["prompt"] = u.get("input_tokens")
            got["cached"] = (u.get("input_tokens_details") or {}).get("cached_tokens")
    elif path.startswith("/v1/messages"):
        u = d.get("usage") or (d.get("message") or {}).get("usage")
        if u and d.get("type") == "message_delta":
            cached = u.get("cache_read_input_tokens") or 0
            got["prompt"] = (u.get("input_tokens") or 0) + cached
            got["cached"] = cached


def replay_turn(port, req):
    body = json.loads(req["body"])
    body["stream"] = True
    if req["path"].startswith("/v1/chat/completions"):
        body["stream_options"] = {"include_usage": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    t0 = time.monotonic()
    c.request("POST", req["path"], body=json.dumps(body),
              headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    r = c.getresponse()
    got = {"status": r.status, "ttft_ms": None, "prompt": None, "cached": None}
    for name, data in events(r):
        if data == "[DONE]":
            continue
        try:
            d = json.loads(data)
        except ValueError:
            continue
        if got["ttft_ms"] is None and first_token(req["path"], name, d):
            got["ttft_ms"] = (time.monotonic() - t0) * 1000
        usage_of(req["path"], name, d, got)
    got["total_ms"] = (time.monotonic() - t0) * 1000
    c.close()
    return got


def run(server, cmd, port, recs, alternate):
    proc = start(cmd, port)
    rows = []
    try:
        if alternate:  # A1 B1 A2 B2 …: two agents sharing the server
            order = []
            for k in range(max(len(r["requests"]) for r in recs)):
                order += [(r, k) for r in recs if k < len(r["requests"])]
        else:
            order = [(r, k) for r in recs for k in range(len(r["requests"]))]
        for rec, k in order:
            got = replay_turn(port, rec["requests"][k])
            rows.append(dict(got, server=server, cli=rec["cli"], turn=k + 1, path=rec["requests"][k]["path"],
                             alternating=alternate))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def fresh_processes(a, recs):
    """Each agent's first turn in two fresh processes sharing a prompt cache directory."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="moelsp-prompt-cache-") as d:
        for run_no, label in ((1, "empty cache"), (2, "stored prefix")):
            port = free_port()
            cmd = [a.moelsp, "serve", "--port", str(port), "-m", a.model, "--prompt-cache", d,
                   "--prompt-cache-min-tokens", str(a.prompt_cache_min_tokens)]
            proc = start(cmd, port)
            try:
                for rec in recs:
                    got = replay_turn(port, rec["requests"][0])
                    rows.append(dict(got, cli=rec["cli"], run=label, path=rec["requests"][0]["path"]))
            finally:
                proc.terminate()  # the server finishes its prompt-cache writes before it exits
                proc.wait(timeout=60)
            if run_no == 1:
                files = [f for f in os.listdir(d) if f.endswith(".kvc")]
                print(f"prompt cache after the first process: {len(files)} files, "
                      f"{sum(os.path.getsize(os.path.join(d, f)) for f in files) / 2**20:.1f} MiB")
    print()
    print("| CLI | API | first turn of | prompt tokens | from the cache | computed | TTFT ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        p, c = r["prompt"], r["cached"]
        comp = p - c if p is not None and c is not None else "-"
        ttft = f"{r['ttft_ms']:.0f}" if r["ttft_ms"] is not None else "-"
        print(f"| {r['cli']} | {r['path'].split('?')[0]} | a fresh process, {r['run']} | {p} | {c} | {comp} | {ttft} |")
    return rows


def table(rows):
    print("| server | order | CLI | API | turn | prompt tokens | from the cache | computed | cache share | TTFT ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, c = r["prompt"], r["cached"]
        share = f"{100 * c / p:.0f} %" if p and c is not None else "-"
        comp = p - c if p is not None and c is not None else "-"
        ttft = f"{r['ttft_ms']:.0f}" if r["ttft_ms"] is not None else "-"
        print(f"| {r['server']} | {'alternating' if r['alternating'] else 'one agent'} | {r['cli']} "
              f"| {r['path'].split('?')[0]} | {r['turn']} | {p} | {c} | {comp} | {share} | {ttft} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moelsp")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--recordings", default=os.path.join(HERE, "..", "tests", "data", "agent-turns"))
    ap.add_argument("--json")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every later turn of every agent computed no more than what its prompt "
                         "grew by (moelsp's rows; a test, not a timing)")
    ap.add_argument("--prompt-cache", action="store_true",
                    help="also each first turn in two fresh moelsp processes sharing a --prompt-cache directory")
    ap.add_argument("--prompt-cache-min-tokens", type=int, default=256)
    a = ap.parse_args()
    recs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(a.recordings, "*.json")))]
    if not recs:
        raise SystemExit(f"no recordings in {a.recordings} (tests/agents/run_agents.py --record DIR makes them)")
    servers = []
    if a.moelsp:
        port = free_port()
        servers.append(("moelsp", [a.moelsp, "serve", "--port", str(port), "-m", a.model], port))
    if a.llama_server:
        port = free_port()
        servers.append(("llama-server", [a.llama_server, "--port", str(port), "-m", a.model, "--jinja"], port))
    rows = []
    for server, cmd, port in servers:
        rows += run(server, cmd, port, recs, alternate=False)
        rows += run(server, cmd, port, recs, alternate=True)
    table(rows)
    fresh = fresh_processes(a, recs) if a.prompt_cache and a.moelsp else []
    if a.json:
        json.dump({"turns": rows, "fresh_processes": fresh}, open(a.json, "w"), indent=1)
    bad = [r for r in rows + fresh if r["status"] != 200]
    if a.check:
        prev = {}
        for r in rows:
            if r["server"] != "moelsp":
                continue
            key = (r["alternating"], r["cli"])
            if r["turn"] > 1 and key in prev:
                grew = r["prompt"] - prev[key]
                computed = r["prompt"] - r["cached"]
                if computed > grew:
                    print(f"FAIL: {r['cli']} turn {r['turn']} ({'alternating' if r['alternating'] else 'alone'}) "
                          f"computed {computed} tokens; its prompt grew by {grew}")
                    bad.append(r)
            prev[key] = r["prompt"]
        for r in fresh:  # the second process found each first turn's prompt on disk
            if r["run"] == "stored prefix" and r["prompt"] >= 2 * a.prompt_cache_min_tokens and not r["cached"]:
                print(f"FAIL: {r['cli']}'s first turn in a fresh process read nothing from the prompt cache")
                bad.append(r)
        print("PASS: each later turn computed only its new tokens" +
              (", and a fresh process read each stored first turn from disk" if fresh else "") if not bad else "FAIL")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
