#!/usr/bin/python3
"""Held-out perplexity exactly as `moelsp perplexity` computes it.

Windows of ctx tokens advance by stride = ctx/2; each window scores only the
tokens no earlier window scored (the first: all after its first token; later
ones: their last `stride`, the last one fewer), so each token is scored once (no BOS: the vocabulary sets add_bos_token false).
`main` evaluates the exported weights: every tensor the GGUF stores as F16 is
rounded to F16 first, so both implementations see the same numbers.
"""
import argparse
import json
import math
import os

import sentencepiece as spm
import torch
import torch.nn.functional as F

from model import Config, Deepseek2


@torch.no_grad()
def heldout_loss(model, ids, ctx, stride=None, loads=None):
    stride = stride or max(1, ctx // 2)
    nll, scored = 0.0, 0
    start, done = 0, 1  # done: tokens [0, done) are scored (the first has no context)
    while True:
        end = min(start + ctx, len(ids))
        x = torch.tensor(ids[start:end])[None]
        h, _, ld = model.hidden(x)
        logits = (h @ model.embed.weight.t()).float()[0]
        lp = F.log_softmax(logits.double(), dim=-1)
        first = max(1, done - start)
        tgt = x[0, first:]
        nll -= lp[first - 1:end - start - 1].gather(1, tgt[:, None]).sum().item()
        scored += tgt.numel()
        done = end
        if loads is not None:
            loads.append(torch.stack(ld))
        if end == len(ids):
            break
        start += stride
    return nll / scored


def score(model, ids):
    """Held-out loss of a token list, with each MoE layer's expert usage (share of routed slots)."""
    loads = []
    nats = heldout_loss(model, ids, model.c.ctx, loads=loads)
    usage = torch.stack(loads).mean(0)
    return {"tokens": len(ids), "scored": len(ids) - 1, "nats_per_token": nats, "perplexity": math.exp(nats),
            "expert_usage": [[round(v, 4) for v in row] for row in usage.tolist()]}


def f16_tensors(name, p):
    """Which parameters the exporter stores as F16 (the rest stay F32)."""
    return p.dim() >= 2 and "router" not in name


def load_exported(out, ckpt="ckpt.pt"):
    ck = torch.load(os.path.join(out, ckpt))
    model = Deepseek2(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if f16_tensors(n, p):
                p.copy_(p.half().float())
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--text", action="append", default=[], help="extra texts to score (name=path)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.out, "tokenizer.model"))
    model = load_exported(args.out)
    texts = [("heldout", os.path.join(args.out, "heldout.txt"))] + [tuple(t.split("=", 1)) for t in args.text]
    result = {}
    for name, path in texts:
        ids = sp.encode(open(path).read())
        result[name] = score(model, ids)
        result[name]["bits_per_byte"] = result[name]["nats_per_token"] * len(ids) / math.log(2) / len(open(path, "rb").read())
        print(name, json.dumps({k: v for k, v in result[name].items() if k != "expert_usage"}))
    json.dump(result, open(os.path.join(args.out, "eval.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
