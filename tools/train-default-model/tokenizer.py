#!/usr/bin/python3
"""Train the SentencePiece vocabulary on the training files and tokenize them.

BPE with byte fallback, identity normalisation and no dummy prefix, so code
round-trips byte for byte: tabs and runs of spaces are kept (an indentation run
becomes one whitespace-only piece), `\n` is a user symbol of its own, digits are
split. Special pieces: <unk> 0, <s> 1, </s> 2 (end of file / end of a FIM
middle), then the control tokens below (FIM and chat roles).
"""
import argparse
import io
import json
import os
import random

import numpy as np
import sentencepiece as spm

CONTROL = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|im_start|>", "<|im_end|>"]


def train(out, vocab_size, seed):
    files = open(os.path.join(out, "train.txt")).read().split("\0")
    rng = random.Random(seed)
    lines = [ln for f in files for ln in f.split("\n") if ln.strip()]
    rng.shuffle(lines)
    lines = lines[:1_500_000]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, split_by_whitespace=True, allow_whitespace_only_pieces=True, split_digits=True,
        user_defined_symbols=["\n"], control_symbols=CONTROL, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        character_coverage=0.9995, max_sentence_length=16384, num_threads=os.cpu_count(), seed_sentencepiece_size=1000000,
        shuffle_input_sentence=False, train_extremely_large_corpus=False)
    path = os.path.join(out, "tokenizer.model")
    open(path, "wb").write(model.getvalue())
    return path


def encode_files(out):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    files = open(os.path.join(out, "train.txt")).read().split("\0")
    eos = sp.eos_id()
    ids, nbytes, bad = [], 0, 0
    for text in files:
        t = sp.encode(text)
        if sp.decode(t) != text:
            bad += 1
        ids.extend(t)
        ids.append(eos)
        nbytes += len(text.encode())
    arr = np.array(ids, dtype=np.uint16)
    np.save(os.path.join(out, "train_ids.npy"), arr)
    stats = {"vocab": sp.get_piece_size(), "train_tokens": int(arr.size), "bytes_per_token": nbytes / arr.size,
             "files_not_round_tripping": bad}
    json.dump(stats, open(os.path.join(out, "tokens.json"), "w"), indent=1)
    print(json.dumps(stats))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    train(args.out, args.vocab, args.seed)
    encode_files(args.out)


if __name__ == "__main__":
    main()
