#!/usr/bin/python3
"""After training: evaluate, export, and write what the repository keeps.

  models/moelsp-default.gguf            the model (F16 matrices)
  models/moelsp-default.json            training summary: corpus, config, time, losses, expert usage
  tests/data/default-model/slice.txt    the first ~24 KB of the held-out text (whole lines)
  tests/data/default-model/slice.ids    its token ids from SentencePiece itself
  tests/data/default-model/expected.json   this script's perplexities, the values the engine must match

The phases' logs are OUT/train_log.jsonl (main), train_log_fim.jsonl (second),
train_log_editor.jsonl (third) and train_log_repo.jsonl (fourth: repository
context, a longer context). A phase that started from a GGUF (train.py
--init-gguf) instead of the phase before's checkpoint has no earlier logs in
OUT: then the summary and log of the earlier phases are kept from the
repository's models/moelsp-default.json and .train_log.jsonl, which describe
the file it started from, and the phases run here are added to them.

The held-out perplexity is measured at the model's context (windows of ctx,
stride ctx/2: what the engine's test checks) and, to compare with a model of
a shorter context, with windows of 512 (`heldout_at_512`).
"""
import argparse
import json
import math
import os

import sentencepiece as spm
import torch

from evaluate import heldout_loss, load_exported, score
from export_gguf import export

SLICE_BYTES = 24_000
# phase4b: the committed model's fourth phase ran in two parts (see models/README.md).
LATER_PHASES = (("phase3", "train_log_editor.jsonl"), ("phase4", "train_log_repo.jsonl"),
                ("phase4b", "train_log_repo2.jsonl"))


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

    def phase(lines):  # a phase stopped by hand has no "end" line: its last step stands for it
        if not lines:
            return None
        last = [l for l in lines if l.get("event") in ("step", "end")][-1]
        return {"args": lines[0]["args"], "fim_rows": lines[0].get("fim_rows"), "steps": last.get("steps", last.get("step")),
                "tokens": last.get("tokens"), "train_minutes": last.get("train_minutes", last.get("minutes")),
                "loss": last.get("loss")}

    later = {k: phase(read_log(name)) for k, name in LATER_PHASES if read_log(name)}
    held_ids = sp.encode(held)
    at_512 = heldout_loss(model, held_ids, 512)
    at_512 = {"nats_per_token": at_512, "perplexity": math.exp(at_512)}
    if earlier:
        summary = {k: v for k, v in earlier.items() if k not in ("heldout", "heldout_bits_per_byte", "slice")}
        first_log = read_log(next(name for k, name in LATER_PHASES if k in later))
        summary.update({"gguf_bytes": info["bytes"], "config": first_log[0]["config"], **later,
                        "fim_order": args.fim_order, "heldout_at_512": at_512,
                        "earlier_phases_from": summary.get("earlier_phases_from", "the previous models/moelsp-default.gguf")
                        + "; " + ", ".join(later) + " ran here with --init-gguf"})
        summary.update(_heldout(ev_held, held, expected))
        json.dump(summary, open(earlier_json, "w"), indent=1)
        with open(earlier_log, "w") as f:
            f.write(earlier_lines)
            for k, name in LATER_PHASES:
                if k in later:
                    f.write(open(os.path.join(out, name)).read())
        print(json.dumps({"heldout": summary["heldout"]["perplexity"], "heldout_at_512": at_512["perplexity"],
                          "slice": ev_slice["perplexity"], **info}))
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
        "phase2": phase(phase2), **later, "fim_order": args.fim_order, "heldout_at_512": at_512,
        "evals_during_training": [e for e in log if e.get("event") == "eval"],
        **_heldout(ev_held, held, expected),
    }
    json.dump(summary, open(earlier_json, "w"), indent=1)
    with open(earlier_log, "w") as f:
        for name in ("train_log.jsonl", "train_log_fim.jsonl") + tuple(n for _, n in LATER_PHASES):
            if os.path.exists(os.path.join(out, name)):
                f.write(open(os.path.join(out, name)).read())
    print(json.dumps({"heldout": summary["heldout"]["perplexity"], "slice": ev_slice["perplexity"], **info}))


if __name__ == "__main__":
    main()
