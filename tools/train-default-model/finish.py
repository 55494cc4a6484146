#!/usr/bin/python3
"""After training: evaluate, export, and write what the repository keeps.

  models/moelsp-default.gguf            the model (F16 matrices)
  models/moelsp-default.json            training summary: corpus, config, time, losses, expert usage
  tests/data/default-model/slice.txt    the first ~24 KB of the held-out text (whole lines)
  tests/data/default-model/slice.ids    its token ids from SentencePiece itself
  tests/data/default-model/expected.json   this script's perplexities, the values the engine must match

The phases' logs are OUT/train_log.jsonl (main), train_log_fim.jsonl (second)
and train_log_editor.jsonl (third). A third phase that started from a GGUF
(train.py --init-gguf) instead of the second phase's checkpoint has no earlier
logs in OUT: then the summary and log of the earlier phases are kept from the
repository's models/moelsp-default.json and .train_log.jsonl, which describe
the file it started from.
"""
import argparse
import json
import math
import os

import sentencepiece as spm
import torch

from evaluate import load_exported, score
from export_gguf import export

SLICE_BYTES = 24_000


def _heldout(ev_held, held, expected):
    return {
        "heldout": {k: ev_held[k] for k in ("tokens", "scored", "nats_per_token", "perplexity", "expert_usage")},
        "heldout_bits_per_byte": ev_held["nats_per_token"] * ev_held["tokens"] / math.log(2) / len(held.encode()),
        "slice": expected["slice"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("repo")
    ap.add_argument("--fim-order", choices=["psm", "spm"], help="the FIM prompt order the GGUF declares")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    out, repo = args.out, args.repo
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    model = load_exported(out)
    held = open(os.path.join(out, "heldout.txt")).read()
    cut = held.rfind("\n", 0, SLICE_BYTES) + 1
    slice_text = held[:cut]
    data = os.path.join(repo, "tests", "data", "default-model")
    os.makedirs(data, exist_ok=True)
    open(os.path.join(data, "slice.txt"), "w").write(slice_text)
    slice_ids = sp.encode(slice_text)
    open(os.path.join(data, "slice.ids"), "w").write(" ".join(map(str, slice_ids)) + "\n")
    ev_slice = score(model, slice_ids)
    ev_held = score(model, sp.encode(held))
    expected = {"ctx": model.c.ctx, "stride": model.c.ctx // 2,
                "slice": {k: ev_slice[k] for k in ("tokens", "scored", "nats_per_token", "perplexity")},
                "note": "tools/train-default-model/evaluate.py on the exported (F16-rounded) weights"}
    json.dump(expected, open(os.path.join(data, "expected.json"), "w"), indent=1)

    os.makedirs(os.path.join(repo, "models"), exist_ok=True)
    gguf = os.path.join(repo, "models", "moelsp-default.gguf")
    earlier_json = os.path.join(repo, "models", "moelsp-default.json")
    earlier_log = os.path.join(repo, "models", "moelsp-default.train_log.jsonl")
    earlier = None if os.path.exists(os.path.join(out, "train_log.jsonl")) else json.load(open(earlier_json))
    earlier_lines = open(earlier_log).read() if earlier else ""
    info = export(out, gguf, fim_order=args.fim_order)

    def read_log(name):
        path = os.path.join(out, name)
        return [json.loads(l) for l in open(path)] if os.path.exists(path) else []

    def phase(lines):
        return {"args": lines[0]["args"], "fim_rows": lines[0].get("fim_rows"),
                **{k: lines[-1].get(k) for k in ("steps", "tokens", "train_minutes", "loss")}} if lines else None

    phase3 = phase(read_log("train_log_editor.jsonl"))
    if earlier:
        summary = {k: earlier[k] for k in ("corpus", "tokens", "config", "params_total", "params_active", "mix", "train",
                                           "train_expert_load", "args", "phase2", "evals_during_training")}
        summary.update({"gguf_bytes": info["bytes"], "phase3": phase3, "fim_order": args.fim_order,
                        "earlier_phases_from": "the previous models/moelsp-default.gguf (phase 3 ran with --init-gguf)"})
        summary.update(_heldout(ev_held, held, expected))
        json.dump(summary, open(earlier_json, "w"), indent=1)
        with open(earlier_log, "w") as f:
            f.write(earlier_lines)
            f.write(open(os.path.join(out, "train_log_editor.jsonl")).read())
        print(json.dumps({"heldout": summary["heldout"]["perplexity"], "slice": ev_slice["perplexity"], **info}))
        return
    log = read_log("train_log.jsonl")
    start, end = log[0], log[-1]
    phase2 = read_log("train_log_fim.jsonl")
    summary = {
        "gguf_bytes": info["bytes"], "corpus": json.load(open(os.path.join(out, "corpus.json"))),
        "tokens": json.load(open(os.path.join(out, "tokens.json"))), "config": start["config"],
        "params_total": start["params_total"], "params_active": start["params_active"],
        "mix": {k: start[k] for k in ("lm_tokens", "fim_tokens", "chat_tokens", "chat_examples")},
        "train": {k: end.get(k) for k in ("steps", "tokens", "train_minutes", "tokens_per_s", "loss")},
        "train_expert_load": end.get("expert_load"), "args": start["args"],
        "phase2": phase(phase2), "phase3": phase3, "fim_order": args.fim_order,
        "evals_during_training": [e for e in log if e.get("event") == "eval"],
        **_heldout(ev_held, held, expected),
    }
    json.dump(summary, open(earlier_json, "w"), indent=1)
    with open(earlier_log, "w") as f:
        for name in ("train_log.jsonl", "train_log_fim.jsonl", "train_log_editor.jsonl"):
            if os.path.exists(os.path.join(out, name)):
                f.write(open(os.path.join(out, name)).read())
    print(json.dumps({"heldout": summary["heldout"]["perplexity"], "slice": ev_slice["perplexity"], **info}))


if __name__ == "__main__":
    main()
