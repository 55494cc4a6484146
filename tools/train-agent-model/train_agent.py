#!/usr/bin/python3
"""Fine-tune the default model into a small tool-calling agent model.

Starts from models/moelsp-default.gguf (its tokenizer is re-made by
tools/train-default-model's corpus.py and tokenizer.py, piece for piece) and
trains on agent conversations (agent_data.py) made on the fly, the loss on
the assistant's tokens only. Rows of similar length are batched up to a token
budget; the learning rate warms up, then follows a cosine over the wall-clock
budget. Held-out conversations are scored by exact match under teacher
forcing: every assistant token the argmax (what greedy decoding picks, given
the same history, which is what the agent sends back).
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

import sentencepiece as spm
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train-default-model"))

from agent_data import Renderer, make_rows  # noqa: E402
from import_gguf import load_into  # noqa: E402
from model import Config, Deepseek2  # noqa: E402


def log(f, **kv):
    line = json.dumps(kv)
    print(line, flush=True)
    f.write(line + "\n")
    f.flush()


def text_pools(work, seed):
    """Lines, words and code lines of the default model's training corpus, for fillers and file contents."""
    texts = open(os.path.join(work, "train.txt")).read().split("\0")
    rng = random.Random(seed)
    rng.shuffle(texts)
    lines = [ln for t in texts[:600] for ln in t.split("\n")]
    words = sorted(set(re.findall(r"\b[a-z]{3,12}\b", " ".join(lines[:300000]))))
    code = [ln.strip() for ln in lines if 8 <= len(ln.strip()) <= 80]
    return lines, words, code


def batches(rows, budget, rng):
    """Rows sorted by length, cut into batches of at most `budget` padded tokens, in random order."""
    rows = sorted(rows, key=lambda r: len(r[0]))
    out, cur = [], []
    for r in rows:
        if cur and (len(cur) + 1) * len(r[0]) > budget:
            out.append(cur)
            cur = []
        cur.append(r)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def tensors(batch):
    T = max(len(ids) for ids, _ in batch)
    ids = torch.zeros(len(batch), T, dtype=torch.long)
    mask = torch.zeros(len(batch), T)
    for b, (i, m) in enumerate(batch):
        ids[b, :len(i)] = torch.tensor(i)
        mask[b, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, mask


def forward_loss(model, ids, mask):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x, auxes, _ = model.hidden(ids[:, :-1])
        logits = x @ model.embed.weight.t().to(x.dtype)
    w = mask[:, 1:]
    nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    loss = (nll * w.reshape(-1)).sum() / w.sum().clamp(min=1)
    right = (logits.argmax(-1) == ids[:, 1:]).float()
    return loss, torch.stack(auxes).sum(), right, w


@torch.no_grad()
def exact_match(model, rows, budget, rng):
    """Share of conversations whose every assistant token is the argmax."""
    model.eval()
    hit = n = 0
    for batch in batches(rows, budget, rng):
        ids, mask = tensors(batch)
        _, _, right, w = forward_loss(model, ids, mask)
        wrong = ((1 - right) * w).sum(-1)
        hit += int((wrong == 0).sum())
        n += len(batch)
    model.train()
    return hit / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work", help="a folder where tools/train-default-model's corpus.py and tokenizer.py ran")
    ap.add_argument("--init-gguf", help="start from this GGUF (the default model)")
    ap.add_argument("--resume", action="store_true", help="start from WORK/agent_ckpt.pt (a later phase)")
    ap.add_argument("--answer-weight", type=float, default=1.0,
                    help="loss weight of a text answer's tokens (where the line is copied); the call's weigh 1")
    ap.add_argument("--rounds", default="1,1,2,2,3,4", help="rounds per conversation, drawn from this list")
    ap.add_argument("--drill-share", type=float, default=0.0,
                    help="share of rows with a short prompt and four to eight rounds (copying practice)")
    ap.add_argument("--log", default="agent_train_log.jsonl")
    ap.add_argument("--template", required=True, help="the chat template the model is trained on and ships with")
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--budget", type=int, default=8192, help="padded tokens per batch")
    ap.add_argument("--max-tokens", type=int, default=4096, help="longest conversation trained on")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.work, "tokenizer.model"))
    renderer = Renderer(open(args.template).read(), sp)
    lines, words, code = text_pools(args.work, args.seed)
    rounds = [int(v) for v in args.rounds.split(",")]
    held, _ = make_rows(renderer, 200, random.Random(args.seed + 1000), lines, words, code, args.max_tokens)

    c = Config(n_vocab=sp.get_piece_size(), ctx=args.max_tokens)
    model = Deepseek2(c)
    if args.resume:
        model.load_state_dict(torch.load(os.path.join(args.work, "agent_ckpt.pt"))["model"])
    elif args.init_gguf:
        load_into(model, args.init_gguf, sp)
    else:
        raise SystemExit("give --init-gguf or --resume")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    logf = open(os.path.join(args.work, args.log), "w")
    log(logf, event="start", config=c.to_dict(), args=vars(args), heldout_exact=exact_match(model, held, args.budget, rng))
    budget, t0 = args.minutes * 60, time.time()
    step, seen, trained, run_loss, last_log, last_eval, queue = 0, 0, 0, None, t0, t0, []
    while time.time() - t0 < budget:
        if not queue:
            rows, _ = make_rows(renderer, 256, rng, lines, words, code, args.max_tokens, rounds=rounds,
                                answer_weight=args.answer_weight, drill_share=args.drill_share)
            queue = batches(rows, args.budget, rng)
        ids, mask = tensors(queue.pop())
        frac = (time.time() - t0) / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss, aux, _, w = forward_loss(model, ids, mask)
        (loss + args.aux * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        seen += ids.numel()
        trained += int((w > 0).sum())
        run_loss = loss.item() if run_loss is None else 0.95 * run_loss + 0.05 * loss.item()
        now = time.time()
        if now - last_log > 60:
            log(logf, event="step", step=step, minutes=round((now - t0) / 60, 2), loss=round(run_loss, 4), lr=lr,
                tokens=seen, trained_tokens=trained, tokens_per_s=round(seen / (now - t0)))
            last_log = now
        if now - last_eval > 600:
            log(logf, event="eval", step=step, heldout_exact=exact_match(model, held, args.budget, rng))
            torch.save({"config": c.to_dict(), "model": model.state_dict(), "step": step},
                       os.path.join(args.work, "agent_ckpt.pt"))
            last_eval = time.time()
    torch.save({"config": c.to_dict(), "model": model.state_dict(), "step": step}, os.path.join(args.work, "agent_ckpt.pt"))
    log(logf, event="end", steps=step, tokens=seen, trained_tokens=trained, loss=round(run_loss, 4),
        train_minutes=round((time.time() - t0) / 60, 2), heldout_exact=exact_match(model, held, args.budget, rng))


if __name__ == "__main__":
    main()
