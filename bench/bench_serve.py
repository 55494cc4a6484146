#!/usr/bin/env python3
"""`moelsp serve` against llama.cpp's `llama-server` on the same GGUF, the
same prompts and the same settings, at several concurrencies: time to first
token (p50, p95), decode tokens/s per stream (median) and aggregate tokens/s.

    bench/bench_serve.py -m MODEL.gguf --peer PATH/llama-server [--moelsp build/cli/moelsp]
                         [-t THREADS] [-c CTX] [--concurrency 1,4,8] [--requests-per-stream 3]
                         [--max-tokens 64] [--out result.json]

Each server runs alone (one, then the other) with the same thread count; each
stream sends its requests one after another through /v1/completions with
stream: true, greedy, a prompt of its own (so neither server's prefix cache
helps), and `ignore_eos` so both generate max_tokens. A warm-up request goes
first. Ratios are moelsp / llama-server: above 1 is better for tokens/s,
below 1 is better for time to first token. Standard library only.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

PROMPT_BODY = '''import os
import sys


def read_config(path):
    """Read a key = value file into a dict, skipping comments."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def main(argv):
    cfg = read_config(argv[1])
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc, seconds=600):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode} before it was ready")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    sys.exit("the server was not ready in time")


def one_request(port, prompt, max_tokens):
    """Streams one completion; returns (ttft_s, n_tokens, decode_s)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "cache_prompt": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    t_first = t_last = None
    n = 0
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue
            e = json.loads(data)
            choices = e.get("choices") or [{}]  # llama-server may end with a usage/timings event
            text = choices[0].get("text") or ""
            if text:
                now = time.perf_counter()
                t_first = t_first or now
                t_last = now
                n += 1
    c.close()
    if t_first is None:
        raise RuntimeError("no tokens")
    return t_first - t0, n, t_last - t_first


def run_level(port, concurrency, per_stream, max_tokens, tag):
    results, errors = [], []

    def stream(k):
        for i in range(per_stream):
            prompt = f"# {tag} stream {k} request {i}\n" + PROMPT_BODY
            try:
                results.append(one_request(port, prompt, max_tokens))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"{tag}: {len(errors)} requests failed: {errors[:3]}")
    ttft = sorted(r[0] for r in results)
    per_stream_tps = [(n - 1) / d for _, n, d in results if n > 1 and d > 0]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "ttft_p50_ms": 1000 * statistics.median(ttft),
        "ttft_p95_ms": 1000 * ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))],
        "decode_tps_per_stream": statistics.median(per_stream_tps) if per_stream_tps else 0.0,
        "aggregate_tps": sum(r[1] for r in results) / wall,
        "tokens": sum(r[1] for r in results),
    }


def bench_server(name, cmd, port, levels, per_stream, max_tokens, log):
    print(f"starting {name}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_health(port, proc)
        one_request(port, "# warm-up\n" + PROMPT_BODY, 8)
        out = []
        for c in levels:
            r = run_level(port, c, per_stream, max_tokens, name)
            print(f"  {name} c={c}: TTFT p50 {r['ttft_p50_ms']:.0f} ms, p95 {r['ttft_p95_ms']:.0f} ms; "
                  f"{r['decode_tps_per_stream']:.1f} tok/s per stream, {r['aggregate_tps']:.1f} aggregate",
                  file=sys.stderr)
            out.append(r)
        return out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--moelsp", default=os.path.join(os.path.dirname(__file__), "..", "build", "server", "moelsp"))
    ap.add_argument("--peer", required=True, help="path to llama.cpp's llama-server")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-c", "--ctx", type=int, default=1024, help="context per stream")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    slots = max(levels)
    logdir = os.environ.get("TMPDIR", "/tmp")
    results = {}
    with open(os.path.join(logdir, "bench_serve_moelsp.log"), "w") as log:
        port = free_port()
        results["moelsp"] = bench_server(
            "moelsp", [a.moelsp, "serve", "--port", str(port), "-m", a.model, "-t", str(a.threads), "-c", str(a.ctx),
                       "--kv-tokens", str(a.ctx * slots), "--max-batch", str(slots)],
            port, levels, a.requests_per_stream, a.max_tokens, log)
    with open(os.path.join(logdir, "bench_serve_llama.log"), "w") as log:
        port = free_port()
        results["llama-server"] = bench_server(
            "llama-server", [a.peer, "--port", str(port), "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads),
                             "-c", str(a.ctx * slots), "--parallel", str(slots), "--no-webui"],
            port, levels, a.requests_per_stream, a.max_tokens, log)
    print(f"\nmodel {a.model}, {a.threads} threads, {a.max_tokens} tokens per request, "
          f"{a.requests_per_stream} requests per stream")
    print("| concurrency | TTFT p50 ms (moelsp / llama-server) | TTFT p95 ms | decode tok/s per stream | aggregate tok/s |")
    print("|---|---|---|---|---|")
    for m, l in zip(results["moelsp"], results["llama-server"]):
        print(f"| {m['concurrency']} | {m['ttft_p50_ms']:.0f} / {l['ttft_p50_ms']:.0f} "
              f"({m['ttft_p50_ms'] / l['ttft_p50_ms']:.2f}×) | {m['ttft_p95_ms']:.0f} / {l['ttft_p95_ms']:.0f} | "
              f"{m['decode_tps_per_stream']:.1f} / {l['decode_tps_per_stream']:.1f} "
              f"({m['decode_tps_per_stream'] / max(l['decode_tps_per_stream'], 1e-9):.2f}×) | "
              f"{m['aggregate_tps']:.1f} / {l['aggregate_tps']:.1f} ({m['aggregate_tps'] / max(l['aggregate_tps'], 1e-9):.2f}×) |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "threads": a.threads, "max_tokens": a.max_tokens, **results}, f, indent=1)


if __name__ == "__main__":
    main()
