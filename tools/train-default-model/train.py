#!/usr/bin/python3
"""Train the default model for a fixed wall-clock budget.

Each batch row is a random window of ctx+1 tokens from one of three streams:
the training files (left to right, files joined by </s>), fill-in-the-middle
examples, and chat examples (examples.py), mixed 68/22/10. The learning rate
follows warm-up then cosine decay over the time budget, so the run ends on
schedule whatever this machine's speed. bf16 autocast (oneDNN) is 1.5× fp32 here.
Loss: next-token cross-entropy + 0.01 × the Switch balance loss per MoE layer.

`--fim-style repo` (the fourth phase) makes such rows with other files of the
same project ahead of the FIM tokens, chosen and spelled as the server does
(repo_examples.py), at a longer context (--ctx 1024).

`--fim-style editor` (the third phase) replaces the FIM stream by whole rows,
one example each, shaped and fitted as the language server asks, in PSM and
SPM order (examples.editor_fim_rows); the loss stays token-level over the
whole row, so the prefix and suffix still teach plain code.
"""
import argparse
import json
import math
import os
import random
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

from examples import chat_pool, editor_fim_rows, fim_pool
from model import Config, Deepseek2
from repo_examples import repo_fim_rows
from evaluate import heldout_loss


def log(f, **kv):
    line = json.dumps(kv)
    print(line, flush=True)
    f.write(line + "\n")
    f.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--minutes", type=float, default=75)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--mix", default="0.68,0.22,0.10", help="shares of left-to-right, FIM and chat rows")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt (a second, FIM-heavier phase)")
    ap.add_argument("--init-gguf", help="start from the weights of a GGUF that export_gguf.py wrote (its vocabulary must be the tokenizer's)")
    ap.add_argument("--fim-style", choices=["stream", "editor", "repo"], default="stream",
                    help="stream: FIM examples joined into one stream (windows cut anywhere); editor: one editor-shaped "
                         "example per row; repo: the same with other files of the project ahead, as the server sends them")
    ap.add_argument("--no-context", type=float, default=0.2, help="repo style: share of rows without other files' code")
    ap.add_argument("--fim-rows", type=int, default=12000, help="editor style: how many FIM rows to make")
    ap.add_argument("--spm-share", type=float, default=0.5, help="editor style: share of rows in SPM order")
    ap.add_argument("--middle-weight", type=float, default=1.0,
                    help="editor style: loss weight of the middle's tokens and its </s> (the rest weigh 1)")
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--log", default="train_log.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # tiny Adam moments and gradients must not fall to the slow denormal path
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_prep = time.time()

    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.out, "tokenizer.model"))
    lm = np.load(os.path.join(args.out, "train_ids.npy"))
    names = open(os.path.join(args.out, "train_files.txt")).read().split("\n")
    texts = open(os.path.join(args.out, "train.txt")).read().split("\0")
    fim_kinds, fim_masks = None, None
    if args.fim_style == "editor":
        fim, fim_masks, fim_kinds = editor_fim_rows(sp, texts, lm, args.fim_rows, rng, args.ctx, spm_share=args.spm_share)
        fim_masks = torch.from_numpy(fim_masks.astype(np.float32))
    elif args.fim_style == "repo":
        fim, fim_masks, fim_kinds = repo_fim_rows(sp, names, texts, lm, args.fim_rows, rng, args.ctx,
                                                  spm_share=args.spm_share, no_context=args.no_context)
        fim_masks = torch.from_numpy(fim_masks.astype(np.float32))
    else:
        fim = fim_pool(sp, texts, 4_000_000, rng, args.ctx)
    chat, n_chat = chat_pool(sp, list(zip(names, texts)), rng)
    streams = [torch.from_numpy(s.astype(np.int64)) for s in (lm, fim, chat)]
    mix = [float(v) for v in args.mix.split(",")]
    held = open(os.path.join(args.out, "heldout.txt")).read()
    held_ids = sp.encode(held)

    c = Config(n_vocab=sp.get_piece_size(), ctx=args.ctx)
    model = Deepseek2(c)
    if args.resume:
        model.load_state_dict(torch.load(os.path.join(args.out, "ckpt.pt"))["model"])
    elif args.init_gguf:
        from import_gguf import load_into
        load_into(model, args.init_gguf, sp)
    total, active = model.n_params()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    logf = open(os.path.join(args.out, args.log), "w")
    log(logf, event="start", config=c.to_dict(), params_total=total, params_active=active,
        lm_tokens=int(lm.size), fim_tokens=int(fim.size), chat_tokens=int(chat.size), chat_examples=n_chat,
        fim_rows=fim_kinds, heldout_tokens=len(held_ids), prep_s=round(time.time() - t_prep, 1), args=vars(args))

    def batch():
        """(rows of ctx + 1 tokens, per-target loss weights)."""
        rows, weights = [], torch.ones(args.batch, args.ctx)
        for b in range(args.batch):
            k = rng.choices(range(3), mix)[0]
            s = streams[k]
            if s.dim() == 2:  # whole rows (editor-shaped FIM)
                r = rng.randrange(s.shape[0])
                rows.append(s[r])
                weights[b] += (args.middle_weight - 1.0) * fim_masks[r]
                continue
            o = rng.randrange(s.numel() - args.ctx - 1)
            rows.append(s[o:o + args.ctx + 1])
        return torch.stack(rows), weights

    budget = args.minutes * 60
    warmup = args.warmup
    t0 = time.time()
    step, seen, last_eval, last_log = 0, 0, t0, t0
    load_acc = None
    run_loss = None
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, weights = batch()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x, auxes, loads = model.hidden(ids[:, :-1])
            logits = x @ model.embed.weight.t().to(x.dtype)
        # Token-level: a mean over every target, the middle's weighted by --middle-weight (1: plain mean).
        nll = F.cross_entropy(logits.float().reshape(-1, c.n_vocab), ids[:, 1:].reshape(-1), reduction="none")
        loss = (nll * weights.reshape(-1)).mean()
        aux = torch.stack(auxes).sum()
        (loss + args.aux * aux).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        seen += ids[:, 1:].numel()
        run_loss = loss.item() if run_loss is None else 0.98 * run_loss + 0.02 * loss.item()
        ld = torch.stack(loads)
        load_acc = ld if load_acc is None else 0.99 * load_acc + 0.01 * ld
        now = time.time()
        if now - last_log > 60:
            log(logf, event="step", step=step, tokens=seen, minutes=round((now - t0) / 60, 2), loss=round(run_loss, 4),
                aux=round(aux.item() / len(auxes), 4), lr=lr, grad_norm=round(float(gn), 3),
                tokens_per_s=round(seen / (now - t0)))
            last_log = now
        if now - last_eval > 900:
            model.eval()
            hl = heldout_loss(model, held_ids[:20000], c.ctx)
            model.train()
            log(logf, event="eval", step=step, minutes=round((now - t0) / 60, 2), heldout_nats=round(hl, 4))
            torch.save({"config": c.to_dict(), "model": model.state_dict(), "step": step}, os.path.join(args.out, "ckpt.pt"))
            last_eval = time.time()
    train_s = time.time() - t0
    torch.save({"config": c.to_dict(), "model": model.state_dict(), "step": step}, os.path.join(args.out, "ckpt.pt"))
    log(logf, event="end", steps=step, tokens=seen, train_minutes=round(train_s / 60, 2),
        tokens_per_s=round(seen / train_s), loss=round(run_loss, 4),
        expert_load=[[round(v, 4) for v in row] for row in load_acc.tolist()])


if __name__ == "__main__":
    main()
