#!/usr/bin/python3
"""Write the trained agent model into the repository: models/moelsp-agent.gguf
(the weights, the Qwen3-Coder chat template it was trained on, its trained
context, and greedy decoding as its recommended sampling: a 12 M model
copies an exact line only when it picks its most likely token each time),
models/moelsp-agent.json (the run's summary) and
models/moelsp-agent.train_log.jsonl (its log)."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train-default-model"))

from export_gguf import export  # noqa: E402

LICENSE = ("PSF-2.0 AND BSL-1.0 (the default model's training data), Apache-2.0 (the Qwen3-Coder chat template); "
           "weights: see models/README.md")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("repo")
    ap.add_argument("--template", required=True)
    a = ap.parse_args()
    models = os.path.join(a.repo, "models")
    out = export(a.work, os.path.join(models, "moelsp-agent.gguf"), name="moelsp-agent",
                 chat_template=open(a.template).read(), ckpt="agent_ckpt.pt", license=LICENSE,
                 sampling={"temp": 0.0})
    phases, lines = [], []
    for name in ("agent_train_log.jsonl", "agent_train_log_copy.jsonl"):  # the phases run.sh runs, in order
        log = os.path.join(a.work, name)
        if not os.path.exists(log):
            continue
        events = [json.loads(line) for line in open(log)]
        lines += [json.dumps(dict(e, phase=name)) for e in events]
        start, end = events[0], events[-1]
        phases.append({"log": name, "args": start["args"], "steps": end["steps"], "train_minutes": end["train_minutes"],
                       "tokens": end["tokens"], "trained_tokens": end["trained_tokens"], "final_loss": end["loss"],
                       "heldout_exact_match": [e["heldout_exact"] for e in events if "heldout_exact" in e]})
    open(os.path.join(models, "moelsp-agent.train_log.jsonl"), "w").write("\n".join(lines) + "\n")
    summary = {"gguf": out, "config": start["config"], "phases": phases}
    json.dump(summary, open(os.path.join(models, "moelsp-agent.json"), "w"), indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
