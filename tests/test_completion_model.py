#!/usr/bin/env python3
"""completion.model: a second model answers completions while `model`
answers chats. Three servers over the same document: the chat model alone,
the completion model alone, and both — whose completion must be the
completion model's own greedy answer (and its chat the chat model's). Then
the same file named twice loads one copy ("shared"), a missing file is
refused with the reason while the model keeps answering, and unsetting it
returns completions to the model.

usage: test_completion_model.py MOELSP_BINARY
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "demo"))
from lsp_demo import Client  # noqa: E402  (the README demo's stdlib LSP client)

CHAT_MODEL = os.path.join(HERE, "data", "reference", "qwen3moe-ref.gguf")
FAST_MODEL = os.path.join(HERE, "..", "models", "moelsp-default.gguf")
URI = "file:///tmp/completion_model_test.py"
TEXT = "def area(width, height):\n    return "
QUESTION = [{"role": "user", "content": "What does area do?"}]


def fail(msg):
    print(f"test_completion_model FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def wait_for(c, what, pred, timeout=90):
    deadline = time.time() + timeout
    st = {}
    while time.time() < deadline:
        st, _ = c.request("moelsp/status")
        if pred(st):
            return st
        time.sleep(0.1)
    fail(f"{what}: {json.dumps(st)[:900]}")


def start(binary, options):
    c = Client([binary, "lsp"])
    c.request("initialize", {"capabilities": {"textDocument": {"inlineCompletion": {}}},
                             "initializationOptions": {"chat": {"maxTokens": 12, "template": "chatml"},
                                                       "completion": {"contextTokens": 0},
                                                       **options}})
    c.notify("initialized", {})
    c.notify("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                       "text": TEXT}})
    return c


def ask(c):
    r, _ = c.request("textDocument/inlineCompletion", {"textDocument": {"uri": URI},
                     "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}})
    items = r.get("items", []) if isinstance(r, dict) else []
    return items[0]["insertText"] if items else ""


def chat(c):
    r, _ = c.request("moelsp/chat", {"kind": "chat", "messages": QUESTION})
    return r["text"]


def stop(c):
    c.request("shutdown")
    c.notify("exit", None)
    c.proc.wait(timeout=30)


def alone(binary, model):
    c = start(binary, {"model": model})
    wait_for(c, f"{model} ready", lambda st: st.get("state") == "ready")
    out = ask(c), chat(c)
    stop(c)
    return out


def main():
    binary = sys.argv[1]
    fast_completion, _ = alone(binary, FAST_MODEL)
    chat_completion, chat_answer = alone(binary, CHAT_MODEL)
    if fast_completion == chat_completion:
        fail(f"the two models answer alike ({fast_completion!r}): nothing would tell them apart")

    c = start(binary, {"model": CHAT_MODEL, "completion": {"model": FAST_MODEL, "contextTokens": 0}})
    try:
        st = wait_for(c, "both models ready", lambda st: st.get("state") == "ready"
                      and st.get("completionModel", {}).get("state") == "ready")
        cm = st["completionModel"]
        if os.path.realpath(cm["file"]) != os.path.realpath(FAST_MODEL) or cm["ramBytes"] <= 0:
            fail(f"completionModel: {cm}")
        if "compl. model:" not in st.get("summary", ""):
            fail(f"the summary does not show the completion model: {st.get('summary')!r}")
        got = ask(c)
        if got != fast_completion:
            fail(f"the completion came from the chat model? got {got!r}; the completion model alone "
                 f"{fast_completion!r}, the chat model alone {chat_completion!r}")
        if chat(c) != chat_answer:
            fail("the chat was not the chat model's answer")

        c.notify("workspace/didChangeConfiguration", {"settings": {"moelsp": {"completion": {"model": CHAT_MODEL}}}})
        wait_for(c, "the same file: shared", lambda st: st.get("completionModel", {}).get("state") == "shared")
        if ask(c) != chat_completion:
            fail("shared: the completion is not the model's")

        missing = "/nonexistent/fast.gguf"
        c.notify("workspace/didChangeConfiguration", {"settings": {"moelsp": {"completion": {"model": missing}}}})
        st = wait_for(c, "a missing completion model", lambda st: st.get("completionModel", {}).get("state") == "error")
        if missing not in st["completionModel"]["message"] or ask(c) != chat_completion:
            fail(f"a missing completion model: {st['completionModel']}")

        c.notify("workspace/didChangeConfiguration", {"settings": {"moelsp": {"completion": {"model": ""}}}})
        wait_for(c, "unset", lambda st: "completionModel" not in st)
        if ask(c) != chat_completion:
            fail("unset: the completion is not the model's")
        stop(c)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
    print(f"test_completion_model: with completion.model the completion was the fast model's ({fast_completion!r}, "
          f"not {chat_completion!r}) and the chat the chat model's; shared, missing (refused, the model answering) "
          f"and unset all behave")


if __name__ == "__main__":
    main()
