#!/usr/bin/python3
"""Constrained decoding through `moelsp serve`: every output under a JSON
Schema parses and validates, checked by an independent validator (Debian's
python3-jsonschema, with its format checker).

A random-weight model (tests/data/reference/qwen3moe-ref.gguf: llama.cpp's
test model, StarCoder's 49,152-token byte-level BPE vocabulary) needs no
skill: left free it writes noise, so everything that comes out as JSON of
the schema comes from the constraint. The schemas are generated (seeded)
from the subset the tool APIs use: types, properties, required, enum,
const, arrays with items/minItems/maxItems, nested objects, anyOf/oneOf,
additionalProperties false, $ref, string lengths, patterns and formats.

A sample cut by the token limit is counted, not validated (it is a valid
prefix by construction); the test requires nearly all to finish.

Usage: test_constrained.py MOELSP_BINARY [--schemas N] [--samples K] [--seed S]
"""
import argparse
import datetime
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    sys.exit("FAIL: python3-jsonschema is not installed (apt install python3-jsonschema): the validator this test needs")

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "data", "reference", "qwen3moe-ref.gguf")
AGENT_MODEL = os.path.join(HERE, "..", "models", "moelsp-agent.gguf")

PATTERNS = [
    r"^[a-z]{2,5}$",
    r"^[A-Z][a-z]{1,6} [0-9]{1,3}$",
    r"^(foo|bar|baz)-\d{2}$",
    r"^\w{1,8}@\w{1,8}\.com$",
    r"ab",  # unanchored: any string containing "ab"
    r"^[^x]{0,8}$",
    r"^v\d+\.\d+(\.\d+)?$",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$",
]
FORMATS = ["date", "uuid", "email", "ipv4", "time", "date-time"]
WORDS = ["path", "query", "limit", "mode", "name", "id", "items", "options", "recursive", "éclair", "with space", 'q"uote']


def gen(rng, depth):
    prim = ["string", "integer", "number", "boolean", "null", "enum", "const", "pattern", "format", "bounded"]
    kinds = prim + (["object", "object", "array", "anyOf", "oneOf", "types"] if depth < 3 else [])
    k = rng.choice(kinds)
    if k in ("string", "integer", "number", "boolean", "null"):
        s = {"type": k}
        if k == "integer" and rng.random() < 0.3:
            s["minimum"] = rng.choice([0, 1])
        return s
    if k == "bounded":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 6)}
    if k == "enum":
        pool = ["red", "green", "blue", 1, 2.5, True, None, "two words", "ünï"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["fixed", 42, False, {"a": [1, "b"]}])}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if k == "format":
        return {"type": "string", "format": rng.choice(FORMATS)}
    if k == "object":
        names = rng.sample(WORDS, rng.randint(0, 4))
        s = {"type": "object", "properties": {n: gen(rng, depth + 1) for n in names}}
        s["required"] = [n for n in names if rng.random() < 0.6]
        if rng.random() < 0.5:
            s["additionalProperties"] = False
        return s
    if k == "array":
        s = {"type": "array", "items": gen(rng, depth + 1)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.6:
            s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
        return s
    if k == "types":
        return {"type": rng.sample(["string", "integer", "boolean", "null"], 2)}
    # anyOf / oneOf over alternatives of different kinds (oneOf must not overlap)
    alts = rng.sample([{"type": "string", "maxLength": 5}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"},
                       {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                        "additionalProperties": False},
                       {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}], rng.randint(2, 3))
    return {k: alts}


def gen_schema(rng):
    s = gen(rng, 0)
    if rng.random() < 0.15:  # a $ref into $defs, the way generated schemas (pydantic) write them
        return {"$defs": {"Item": s}, "type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}},
                "required": ["item"]}
    return s


class Server:
    def __init__(self, binary, model):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                status, body = self.post("/health", None, method="GET")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("FAIL: the server did not come up: " + self.proc.stderr.read())

    def post(self, path, body, method="POST"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request(method, path, body=None if body is None else json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


RFC3339_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)")


def format_checker():
    """Draft 2020-12's checker; `time` and `date-time` (which jsonschema checks
    only with a package Debian does not ship) by RFC 3339's grammar and
    Python's own parser."""
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER

    @checker.checks("time", raises=ValueError)
    def is_time(s):
        if not isinstance(s, str):
            return True
        datetime.time.fromisoformat(s.replace("Z", "+00:00"))
        return RFC3339_TIME.fullmatch(s) is not None

    @checker.checks("date-time", raises=ValueError)
    def is_date_time(s):
        if not isinstance(s, str):
            return True
        date, sep, time_ = s.partition("T")
        datetime.date.fromisoformat(date)
        return sep == "T" and is_time(time_)

    return checker


def check_schemas(server, n_schemas, n_samples, seed):
    rng = random.Random(seed)
    checker = format_checker()
    counts = {"samples": 0, "valid": 0, "cut": 0, "invalid": 0}
    for i in range(n_schemas):
        schema = gen_schema(rng)
        jsonschema.Draft202012Validator.check_schema(schema)
        for k in range(n_samples):
            status, r = server.post("/completion", {"prompt": "Data:", "n_predict": 400, "seed": seed * 1000 + i * 10 + k,
                                                    "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                                                    "json_schema": schema})
            counts["samples"] += 1
            if status != 200:
                print(f"FAIL: schema {i} refused: {r}\n  {json.dumps(schema)}")
                counts["invalid"] += 1
                continue
            if r.get("stop_type") == "limit":
                counts["cut"] += 1
                continue
            try:
                value = json.loads(r["content"])
                jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator, format_checker=checker)
                counts["valid"] += 1
            except (ValueError, jsonschema.ValidationError) as e:
                counts["invalid"] += 1
                print(f"FAIL: schema {i} sample {k}: {e}\n  schema: {json.dumps(schema)}\n  output: {r['content']!r}")
    return counts


def check_grammars(server):
    """GBNF through `grammar`, and a bad one refused by name."""
    ok = True
    g = 'root ::= "call(" arg ("," arg){0,2} ")"\narg ::= [a-z]{1,4} | [0-9]+'
    for seed in range(5):
        status, r = server.post("/completion", {"prompt": "x", "n_predict": 200, "seed": seed, "grammar": g})
        if status != 200 or not re.fullmatch(r"call\(([a-z]{1,4}|[0-9]+)(,([a-z]{1,4}|[0-9]+)){0,2}\)", r["content"]) \
                and r.get("stop_type") != "limit":
            print(f"FAIL: grammar output {status} {r}")
            ok = False
    status, r = server.post("/completion", {"prompt": "x", "grammar": "root ::= missing"})
    if status != 400 or "never defined" not in r["error"]["message"]:
        print(f"FAIL: a bad grammar: {status} {r}")
        ok = False
    return ok


def check_chat_formats(binary):
    """response_format (chat) and text.format (Responses) on a model with a chat template."""
    server = Server(binary, AGENT_MODEL)
    ok = True
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "days": {"type": "integer", "minimum": 1},
                                               "units": {"enum": ["metric", "imperial"]}},
              "required": ["city", "days", "units"], "additionalProperties": False}
    try:
        msgs = [{"role": "user", "content": "Weather in Paris for 3 days, as JSON."}]
        for seed in range(3):
            status, r = server.post("/v1/chat/completions", {"messages": msgs, "seed": seed, "temperature": 1.0,
                                                             "response_format": {"type": "json_schema", "json_schema": {
                                                                 "name": "w", "strict": True, "schema": schema}}})
            text = r["choices"][0]["message"]["content"] if status == 200 else r
            try:
                jsonschema.validate(json.loads(text), schema)
            except Exception as e:  # noqa: BLE001 — any failure is the test's
                print(f"FAIL: chat response_format: {e}: {text!r}")
                ok = False
            status, r = server.post("/v1/responses", {"input": "Weather in Paris, JSON.", "seed": seed,
                                                      "temperature": 1.0,
                                                      "text": {"format": {"type": "json_schema", "name": "w",
                                                                          "schema": schema, "strict": True}}})
            text = r["output"][-1]["content"][0]["text"] if status == 200 else r
            try:
                jsonschema.validate(json.loads(text), schema)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL: responses text.format: {e}: {text!r}")
                ok = False
        status, r = server.post("/v1/chat/completions", {"messages": msgs, "response_format": {"type": "json_object"}})
        if status != 200 or not isinstance(json.loads(r["choices"][0]["message"]["content"]), dict):
            print(f"FAIL: json_object: {r}")
            ok = False
    finally:
        server.stop()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--schemas", type=int, default=150)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    t0 = time.time()
    server = Server(a.binary, MODEL)
    try:
        counts = check_schemas(server, a.schemas, a.samples, a.seed)
        grammars_ok = check_grammars(server)
    finally:
        server.stop()
    chats_ok = check_chat_formats(a.binary)
    finished = counts["samples"] - counts["cut"]
    print(f"schemas {a.schemas} x samples {a.samples}: {counts['samples']} outputs, {counts['valid']} valid, "
          f"{counts['invalid']} invalid, {counts['cut']} cut by the token limit ({time.time() - t0:.0f} s)")
    ok = counts["invalid"] == 0 and finished >= 0.9 * counts["samples"] and grammars_ok and chats_ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
