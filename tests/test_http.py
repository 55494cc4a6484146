#!/usr/bin/env python3
"""`moelsp serve` driven by real HTTP clients: Python's http.client and curl
(streaming). Starts the server on a free port with the embedded default
model, checks every endpoint, the error answers, the API key, a client that
leaves mid-stream, and a clean exit on SIGTERM.

    python3 tests/test_http.py MOELSP_BINARY

Exits 0 when every check passes, 1 with a message at the first failure.
Standard library only (plus the curl binary).
"""
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

BINARY = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOELSP_BINARY", "")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = 0


def fail(msg):
    print(f"http test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    global CHECKS
    CHECKS += 1
    if not cond:
        fail(msg)


class Server:
    def __init__(self, *args):
        self.proc = subprocess.Popen([BINARY, "serve", "--port", "0", *args], stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            fail(f"no 'listening on' line from moelsp serve: {line!r}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw) if raw else None, dict(r.getheaders())
        except json.JSONDecodeError:
            return r.status, raw.decode(errors="replace"), dict(r.getheaders())

    def wait_ready(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            status, body, _ = self.request("GET", "/health")
            if status == 200:
                return
            check(status == 503, f"/health while loading: {status} {body}")
            time.sleep(0.2)
        fail("the model did not load within 60 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("moelsp serve did not exit within 10 s of SIGTERM")


def sse(url, body, headers=()):
    """Streams through curl -N; returns the events' data fields."""
    args = ["curl", "-sN", url, "-H", "Content-Type: application/json", "-d", json.dumps(body)]
    for h in headers:
        args += ["-H", h]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    return [line[6:] for line in out.split("\n") if line.startswith("data: ")]


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "http")


def replay_plugins(s):
    """llama.vim's and llama.vscode's own request bodies (tests/data/http, taken
    from their source): each answered with what the plugin reads back."""
    def at(obj, path, sep):
        for part in path.replace("[0]", f"{sep}0").split(sep):
            obj = obj[int(part)] if isinstance(obj, list) else obj[part]
        return obj

    for name in sorted(os.listdir(DATA)):
        case = json.load(open(os.path.join(DATA, name)))
        headers = {k: v for k, v in case["headers"].items() if k.lower() != "content-type"}
        c = http.client.HTTPConnection(s.host, s.port, timeout=120)
        c.request("POST", case["path"], body=json.dumps(case["body"], separators=(",", ":")),
                  headers={"Content-Type": "application/json", **headers})
        r = c.getresponse()
        raw = r.read().decode()
        c.close()
        check(r.status == 200, f"{name}: HTTP {r.status} {raw[:200]}")
        body = json.loads(raw)
        if name.startswith("llama_vim_infill") and case["body"].get("n_predict"):
            # llama.vim drops an answer unless it matches this, and reads flat keys.
            check(re.match(r'\{.*"content"\s*:"', raw), f"{name}: llama.vim would not accept {raw[:80]!r}")
            asked = set(case["body"]["response_fields"])
            check(set(body) == asked, f"{name}: response_fields {sorted(asked)} gave {sorted(body)}")
            for f in case["response_fields_read"]:
                if f in asked:
                    check(f in body, f"{name}: no {f}")
        elif name.startswith("llama_vim_infill"):
            check(body == {}, f"{name}: response_fields [''] should give {{}}, not {raw[:80]}")
        elif name == "llama_vscode_infill.json":
            items = body if isinstance(body, list) else [body]
            check(1 <= len(items) <= case["body"]["n_cmpl"], f"{name}: {len(items)} answers for n_cmpl")
            for item in items:
                for f in case["response_fields_read"]:
                    if f.startswith("error"):
                        continue
                    v = at(item, f, ".")
                    check(isinstance(v, str) if f == "content" else isinstance(v, (int, float)),
                          f"{name}: {f} is {v!r}")
        elif name.startswith("llama_vscode_infill"):
            check(isinstance(body, dict) and body.get("content") == "", f"{name}: the warm-up answered {raw[:80]}")
        else:
            for f in case["response_fields_read"]:
                check(isinstance(at(body, f, "."), str), f"{name}: {f} missing in {raw[:200]}")
    print(f"plugins: {len(os.listdir(DATA))} request bodies of llama.vim and llama.vscode answered as they read them")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def load(s, clients=8, seconds=15):
    """`clients` threads stream completions for `seconds`: every response must
    end in [DONE] with one id throughout (nothing dropped, cut or mixed up)."""
    done, problems = [0] * clients, []

    def worker(k):
        end = time.time() + seconds
        while time.time() < end and not problems:
            c = http.client.HTTPConnection(s.host, s.port, timeout=60)
            body = json.dumps({"prompt": f"# client {k}\ndef f{k}(x):", "max_tokens": 24, "stream": True,
                               "temperature": 0.7, "seed": k})
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            events = [ln[6:] for ln in r.read().decode().split("\n") if ln.startswith("data: ")]
            c.close()
            if r.status != 200 or not events or events[-1] != "[DONE]":
                problems.append(f"client {k}: status {r.status}, last event {events[-1:] if events else None}")
                return
            ids = {json.loads(e)["id"] for e in events[:-1]}
            if len(ids) != 1:
                problems.append(f"client {k}: a response mixed ids {ids}")
                return
            done[k] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done, problems


READ_TOOL = {"name": "read", "description": "Read a file.",
             "parameters": {"type": "object", "properties": {"filePath": {"type": "string"}}, "required": ["filePath"]}}


def agent_turns_reuse_the_prefix(srv):
    """An agent's second turn re-sends the first turn's prompt, its call and the tool's output: only the
    new tail is computed, the rest comes from the prefix cache, reported in each API's usage field."""
    system = "You are a coding agent. Use the tools to answer.\n" + "Be brief. " * 150
    question = "What is the first line of notes.txt?"
    result = "1: Polar bears eat kelp\n2: second line"
    chat = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "tools": [{"type": "function", "function": READ_TOOL}], "max_tokens": 64}
    status, first, _ = srv.request("POST", "/v1/chat/completions", chat)
    check(status == 200, f"agent turn 1: {status} {first}")
    calls = first["choices"][0]["message"].get("tool_calls") or []
    check(calls and calls[0]["function"]["name"] == "read", f"the agent model did not call read: {first}")
    chat["messages"] += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": calls[0]["id"], "content": result}]
    status, second, _ = srv.request("POST", "/v1/chat/completions", chat)
    cached, prompt1 = second["usage"]["prompt_tokens_details"]["cached_tokens"], first["usage"]["prompt_tokens"]
    check(status == 200 and cached >= prompt1 - 16, f"chat turn 2 computed its prefix again: {cached} of {prompt1}")
    # The same conversation through the Anthropic and Responses APIs: its prefix is cached already.
    msgs = {"system": system, "max_tokens": 64, "tools": [{"name": "read", "description": READ_TOOL["description"],
                                                           "input_schema": READ_TOOL["parameters"]}],
            "messages": [{"role": "user", "content": question},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read",
                                                            "input": {"filePath": "notes.txt"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": result}]}]}
    status, m, _ = srv.request("POST", "/v1/messages", msgs)
    check(status == 200 and m["usage"]["cache_read_input_tokens"] >= prompt1 - 16, f"/v1/messages turn 2: {m}")
    resp = {"instructions": system, "tools": [dict(READ_TOOL, type="function")], "max_output_tokens": 64,
            "input": [{"role": "user", "content": question},
                      {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": '{"filePath": "notes.txt"}'},
                      {"type": "function_call_output", "call_id": "call_1", "output": result}]}
    status, r, _ = srv.request("POST", "/v1/responses", resp)
    check(status == 200 and r["usage"]["input_tokens_details"]["cached_tokens"] >= prompt1 - 16, f"/v1/responses: {r}")
    print(f"agent turn 2 on the agent model: prompt {second['usage']['prompt_tokens']} tokens, {cached} cached "
          f"(turn 1's prompt: {prompt1}); /v1/messages read {m['usage']['cache_read_input_tokens']} from the cache, "
          f"/v1/responses {r['usage']['input_tokens_details']['cached_tokens']}")


def main():
    if not BINARY or not os.access(BINARY, os.X_OK):
        fail("give the moelsp binary as the first argument")
    if not shutil.which("curl"):
        fail("curl is not installed (tools/setup.sh installs it)")
    # llama.vscode's chat requests name its own model setting (default "google/gemini-2.5-flash").
    s = Server("--served-model-name", "google/gemini-2.5-flash")
    try:
        s.wait_ready()
        status, body, _ = s.request("GET", "/v1/models")
        check(status == 200 and body["data"] and body["data"][0]["id"], f"/v1/models: {body}")
        model = body["data"][0]["id"]

        # /v1/completions: greedy is reproducible; streaming gives the same text.
        req = {"model": model, "prompt": "def fibonacci(n):", "max_tokens": 16, "temperature": 0}
        status, a, _ = s.request("POST", "/v1/completions", req)
        check(status == 200, f"/v1/completions: {status} {a}")
        check(a["object"] == "text_completion" and a["choices"][0]["text"], f"/v1/completions body: {a}")
        check(a["usage"]["completion_tokens"] > 0 and a["usage"]["total_tokens"] > a["usage"]["prompt_tokens"], "usage")
        _, b, _ = s.request("POST", "/v1/completions", req)
        check(a["choices"][0]["text"] == b["choices"][0]["text"], "greedy /v1/completions differs between two runs")
        events = sse(s.url + "/v1/completions", {**req, "stream": True})
        check(events and events[-1] == "[DONE]", f"stream does not end with [DONE]: {events[-3:]}")
        chunks = [json.loads(e) for e in events[:-1]]
        check(len(chunks) >= 3, f"too few stream events: {len(chunks)}")
        check("".join(c["choices"][0]["text"] for c in chunks) == a["choices"][0]["text"],
              "the streamed text differs from the non-streamed one")
        check(chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), "no finish_reason at the end")
        # token ids as the prompt, and fill in the middle with `suffix`
        status, t, _ = s.request("POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0})
        check(status == 200, f"token-id prompt: {status} {t}")
        status, f, _ = s.request("POST", "/v1/completions",
                                 {"prompt": "def area(w, h):\n    return ", "suffix": "\n", "max_tokens": 8, "temperature": 0})
        check(status == 200 and isinstance(f["choices"][0]["text"], str), f"suffix (FIM): {status} {f}")

        # /v1/chat/completions, plain and streamed
        chat = {"model": model, "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "What is a list in Python?"}],
                "max_tokens": 24, "temperature": 0}
        status, c, _ = s.request("POST", "/v1/chat/completions", chat)
        check(status == 200 and c["object"] == "chat.completion", f"/v1/chat/completions: {status} {c}")
        check(c["choices"][0]["message"]["role"] == "assistant", "chat: no assistant message")
        events = sse(s.url + "/v1/chat/completions", {**chat, "stream": True})
        check(events[-1] == "[DONE]", "chat stream does not end with [DONE]")
        deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
        check(deltas[0].get("role") == "assistant", "the first chat chunk does not carry the role")
        check("".join(d.get("content", "") for d in deltas) == c["choices"][0]["message"]["content"],
              "the streamed chat differs from the non-streamed one")

        # /apply-template: the prompt a chat would run, through the model's own (ChatML) Jinja template;
        # a tool call's JSON-string arguments, tools and chat_template_kwargs are accepted
        status, at, _ = s.request("POST", "/apply-template", chat)
        check(status == 200 and at["prompt"].endswith("<|im_start|>assistant\n")
              and "<|im_start|>user\nWhat is a list in Python?<|im_end|>" in at["prompt"], f"/apply-template: {status} {at}")
        tool_chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                                  {"role": "assistant", "content": None, "tool_calls": [
                                      {"id": "c1", "type": "function",
                                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
                     "chat_template_kwargs": {"enable_thinking": False}}
        status, at, _ = s.request("POST", "/apply-template", tool_chat)
        check(status == 200 and "<|im_start|>user\nWeather?<|im_end|>" in at["prompt"], f"tool conversation: {status} {at}")
        status, e, _ = s.request("POST", "/apply-template", {**tool_chat, "tools": "get_weather"})
        check(status == 400 and "tools" in e["error"]["message"], f"tools not an array: {status} {e}")
        status, e, _ = s.request("POST", "/v1/chat/completions", {**chat, "chat_template_kwargs": [1]})
        check(status == 400 and "chat_template_kwargs" in e["error"]["message"], f"bad chat_template_kwargs: {status} {e}")

        # logprobs: the chosen tokens spell the text; greedy takes the most likely
        status, lp, _ = s.request("POST", "/v1/completions", {**req, "logprobs": 3})
        check(status == 200 and lp["choices"][0]["text"] == a["choices"][0]["text"], f"logprobs changed the text: {lp}")
        L = lp["choices"][0]["logprobs"]
        check("".join(L["tokens"]) == a["choices"][0]["text"], f"logprobs tokens do not spell the text: {L['tokens']}")
        check(len(L["token_logprobs"]) == len(L["tokens"]) == len(L["top_logprobs"]) == len(L["text_offset"]), "logprobs arrays")
        check(all(v <= 0 for v in L["token_logprobs"]), f"a log-probability above 0: {L['token_logprobs']}")
        for tok, v, top in zip(L["tokens"], L["token_logprobs"], L["top_logprobs"]):
            check(len(top) <= 3 and abs(max(top.values()) - v) < 1e-4, f"greedy token {tok!r} ({v}) is not the top one: {top}")
            check(sum(math.exp(x) for x in top.values()) <= 1.0001, f"top probabilities sum above 1: {top}")
        events = sse(s.url + "/v1/completions", {**req, "stream": True, "logprobs": 2})
        streamed = [json.loads(e)["choices"][0] for e in events[:-1]]
        toks = [t for c in streamed if c["logprobs"] for t in c["logprobs"]["tokens"]]
        offs = [o for c in streamed if c["logprobs"] for o in c["logprobs"]["text_offset"]]
        check("".join(toks) == a["choices"][0]["text"], f"streamed logprobs tokens: {toks}")
        check(offs == L["text_offset"], "streamed text offsets differ from the whole answer's")
        status, cl, _ = s.request("POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
                                   "logprobs": True, "top_logprobs": 2})
        content = cl["choices"][0]["logprobs"]["content"] if status == 200 else []
        check(status == 200 and content and all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 for c in content),
              f"chat logprobs: {status} {cl}")
        check(bytes(b for c in content for b in c["bytes"]).decode() == cl["choices"][0]["message"]["content"],
              "chat logprobs bytes do not spell the answer")
        status, e, _ = s.request("POST", "/v1/completions", {**req, "logprobs": 50})
        check(status == 400 and "logprobs" in e["error"]["message"], f"logprobs 50: {status} {e}")

        replay_plugins(s)

        # /infill as llama.vim sends it, and /completion as llama.cpp clients do
        infill = {"input_prefix": "import os\n\ndef list_files(path):\n", "prompt": "    ", "input_suffix": "\n",
                  "input_extra": [{"filename": "util.py", "text": "def helper():\n    return 1\n"}],
                  "n_predict": 32, "top_k": 40, "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
                  "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "n_indent": 4}
        status, i, _ = s.request("POST", "/infill", infill)
        check(status == 200 and isinstance(i.get("content"), str), f"/infill: {status} {i}")
        status, i2, _ = s.request("POST", "/infill", infill)
        check(i2["content"] == i["content"], "/infill repeated gives another answer")
        status, lc, _ = s.request("POST", "/completion", {"prompt": "import os\n", "n_predict": 8, "temperature": 0})
        check(status == 200 and lc["stop"] is True and "content" in lc, f"/completion: {status} {lc}")

        # /metrics, /v1/status
        status, m, _ = s.request("GET", "/metrics")
        check(status == 200 and 'moelsp_http_requests_total{endpoint="/v1/completions"}' in m, "/metrics")
        check("moelsp_kv_blocks_in_use" in m, "/metrics has no KV gauges")
        check('moelsp_time_to_first_token_ms_bucket{le="+Inf"}' in m and "moelsp_time_per_output_token_ms_count" in m,
              "/metrics has no latency histograms")
        check('moelsp_expert_activation_entropy{layer="' in m and 'moelsp_thread_load_imbalance{layer="' in m,
              "/metrics has no per-layer routing figures")
        status, st, _ = s.request("GET", "/v1/status")
        check(status == 200 and st["state"] == "ready" and "plan" in st["engine"], f"/v1/status: {st}")
        # Expert usage of the requests so far: linked from /v1/status and /metrics, as data and as a heatmap.
        check(st.get("expertUsage") == {"svg": "/experts.svg", "json": "/experts.json"}, f"/v1/status: {st}")
        check("GET /experts.svg" in m, "/metrics does not point to the heatmap")
        status, ej, _ = s.request("GET", "/experts.json")
        check(status == 200 and ej["layers"] and all(l["total"] > 0 for l in ej["layers"]), f"/experts.json: {ej}")
        status, svg, h = s.request("GET", "/experts.svg")
        check(status == 200 and h.get("Content-Type") == "image/svg+xml", f"/experts.svg: {status} {h}")
        cells = [e for e in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}rect") if "data-expert" in e.attrib]
        check(len(cells) == len(ej["layers"]) * ej["experts"], f"/experts.svg has {len(cells)} cells")

        # Bad input: each a clear 4xx in OpenAI's error shape; the server keeps serving.
        status, e, _ = s.request("GET", "/nope")
        check(status == 404 and "error" in e, f"unknown path: {status}")
        status, e, _ = s.request("GET", "/v1/completions")
        check(status == 405, f"GET on a POST endpoint: {status}")
        status, e, _ = s.request("POST", "/v1/completions", "{not json")
        check(status == 400 and "invalid JSON" in e["error"]["message"], f"invalid JSON: {status} {e}")
        status, e, _ = s.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": "many"})
        check(status == 400 and "max_tokens" in e["error"]["message"], f"wrong type: {status} {e}")
        status, e, _ = s.request("POST", "/v1/chat/completions", {"messages": []})
        check(status == 400 and "messages" in e["error"]["message"], f"empty messages: {status} {e}")
        status, e, _ = s.request("POST", "/v1/completions", {"prompt": "x", "temperature": -1})
        check(status == 400 and "temperature" in e["error"]["message"], f"bad temperature: {status} {e}")
        status, e, _ = s.request("POST", "/v1/chat/completions", {**chat, "model": "no-such-model"})
        check(status == 404 and e["error"]["code"] == "model_not_found" and model in e["error"]["message"],
              f"an unknown model: {status} {e}")
        with socket.create_connection((s.host, s.port), timeout=10) as raw:  # refused on its Content-Length
            raw.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {9 << 20}\r\n\r\n".encode()
                        + b"x" * 65536)
            answer = raw.recv(4096).decode(errors="replace")
            check(answer.startswith("HTTP/1.1 413"), f"a 9 MiB body: {answer[:60]!r}")
        with socket.create_connection((s.host, s.port), timeout=10) as raw:
            raw.sendall(b"GARBAGE \x01\x02 NOT HTTP\r\n\r\n")
            answer = raw.recv(4096).decode(errors="replace")
            check(answer.startswith("HTTP/1.1 400"), f"a malformed request line: {answer[:60]!r}")
        # A client that leaves mid-stream: its generation ends, nothing stays in flight.
        with socket.create_connection((s.host, s.port), timeout=30) as raw:
            body = json.dumps({"prompt": "def f():", "max_tokens": 4000, "stream": True, "temperature": 0.8})
            raw.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            got, deadline = b"", time.time() + 20
            while b"data: " not in got and time.time() < deadline:
                got += raw.recv(4096)
            check(b"data: " in got, f"no first event on the stream: {got[:200]!r}")
        deadline = time.time() + 20
        while time.time() < deadline:
            _, m, _ = s.request("GET", "/metrics")
            if "moelsp_requests_in_flight 0" in m:
                break
            time.sleep(0.2)
        check("moelsp_requests_in_flight 0" in m, "a generation kept running after its client left")
        # Invalid UTF-8 in the path, a token id outside the vocabulary, HEAD.
        with socket.create_connection((s.host, s.port), timeout=10) as raw:
            raw.sendall(b"GET /\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = raw.recv(4096).decode(errors="replace")
            check(answer.startswith("HTTP/1.1 404"), f"a non-UTF-8 path: {answer[:60]!r}")
        status, e, _ = s.request("POST", "/v1/completions", {"prompt": [99999999], "max_tokens": 2})
        check(status == 400 and "vocabulary" in e["error"]["message"], f"a token id out of range: {status} {e}")
        c = http.client.HTTPConnection(s.host, s.port, timeout=10)
        c.request("HEAD", "/health")
        r = c.getresponse()
        check(r.status == 200 and r.read() == b"", "HEAD /health")
        c.close()
        status, _, _ = s.request("GET", "/health")
        check(status == 200, "the server stopped serving after bad input")

        # Load: 8 streaming clients at once; memory comes back near where it was.
        load(s, clients=8, seconds=3)  # warm-up: the KV pool and the threads are now in use
        baseline = rss_kib(s.proc.pid)
        done, problems = load(s, clients=8, seconds=60)
        check(not problems, f"under load: {problems[:3]}")
        check(all(n > 0 for n in done), f"a client got no answer under load: {done}")
        time.sleep(1)
        after = rss_kib(s.proc.pid)
        check(after <= baseline * 1.25 + 32 * 1024, f"RSS grew under load: {baseline} KiB -> {after} KiB")
        print(f"load: 8 streaming clients for 60 s, {sum(done)} responses, RSS {baseline // 1024} -> {after // 1024} MiB")
    finally:
        code = s.stop()
    check(code == 0, f"moelsp serve exited {code} on SIGTERM")

    # A client that sends half a request and stalls is dropped after --timeout.
    t = Server("--timeout", "2")
    try:
        t.wait_ready()
        with socket.create_connection((t.host, t.port), timeout=15) as raw:
            raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"pro")
            t0 = time.time()
            closed = raw.recv(4096) == b""
            check(closed and time.time() - t0 < 10, "a stalled client was not dropped")
        status, _, _ = t.request("GET", "/health")
        check(status == 200, "the server stopped serving after a stalled client")
    finally:
        check(t.stop() == 0, "moelsp serve --timeout did not exit 0")

    # --max-queue: a request beyond it is refused at once with 429 and Retry-After.
    q = Server("--max-queue", "1")
    try:
        q.wait_ready()
        body = json.dumps({"prompt": "def f(x):", "max_tokens": 3000, "stream": True, "temperature": 0.8, "seed": 1})
        with socket.create_connection((q.host, q.port), timeout=30) as raw:
            raw.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            got = b""
            while b"data: " not in got:
                more = raw.recv(65536)
                check(more, f"the long request ended before its first event: {got[:200]!r}")
                got += more
            status, e, headers = q.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
            check(status == 429 and e["error"]["code"] == "queue_full", f"beyond --max-queue: {status} {e}")
            check(int(headers.get("Retry-After", "0")) >= 1, f"429 without Retry-After: {headers}")
        time.sleep(0.5)  # the long request's client left: its generation is cancelled
        status, _, _ = q.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        check(status == 200, f"after the queue emptied: {status}")
        _, m, _ = q.request("GET", "/metrics")
        check("moelsp_requests_rejected_total 1" in m, "the 429 is not counted in /metrics")
    finally:
        check(q.stop() == 0, "moelsp serve --max-queue did not exit 0")

    # A model's recommended sampling (general.sampling.*) is what requests that set none get, shown in
    # /v1/status: the small agent model asks for greedy decoding, the default model for nothing.
    check(st["engine"].get("samplingDefaults") == {}, f"the default model recommends no sampling: {st}")
    agent = Server("-m", os.path.join(REPO, "models", "moelsp-agent.gguf"))
    try:
        agent.wait_ready()
        _, ast, _ = agent.request("GET", "/v1/status")
        check(ast["engine"].get("samplingDefaults") == {"temperature": 0.0}, f"the agent model's status: {ast}")
        agent_turns_reuse_the_prefix(agent)
    finally:
        check(agent.stop() == 0, "moelsp serve -m moelsp-agent.gguf did not exit 0")

    # The API key: required everywhere but /health.
    k = Server("--api-key", "s3cret")
    try:
        k.wait_ready()
        status, e, _ = k.request("GET", "/v1/models")
        check(status == 401 and e["error"]["code"] == "invalid_api_key", f"no key: {status} {e}")
        status, _, _ = k.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        check(status == 401, "a wrong key was accepted")
        status, _, _ = k.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})
        check(status == 200, "the right key was refused")
    finally:
        check(k.stop() == 0, "moelsp serve --api-key did not exit 0")
    print(f"http test passed ({CHECKS} checks)")


if __name__ == "__main__":
    main()
