#!/usr/bin/python3
"""Write the trained model as a GGUF v3 file for moelsp (and llama.cpp).

Key and tensor names are those of llama.cpp's deepseek2 loader, which
engine/arch/deepseek2.cpp reads: matrices as F16, norms and the router as F32
(GGUF lists dimensions fastest first, so a torch [out][in] weight is in × out).
The vocabulary is a `llama` (SentencePiece) vocabulary: pieces, scores and
token types from tokenizer.model, no space prefix, no BOS, FIM and chat tokens.
"""
import argparse
import json
import os
import struct

import numpy as np
import sentencepiece as spm
import torch

from evaluate import f16_tensors, load_exported

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GG_F32, GG_F16 = 0, 1
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, value, kind=None):
    out = s(key)
    if isinstance(value, bool):
        return out + struct.pack("<IB", T_BOOL, value)
    if isinstance(value, str):
        return out + struct.pack("<I", T_STR) + s(value)
    if isinstance(value, float):
        return out + struct.pack("<If", T_F32, value)
    if isinstance(value, int):
        return out + struct.pack("<II", T_U32, value)
    if isinstance(value, list):
        if kind == T_STR:
            return out + struct.pack("<IIQ", T_ARR, T_STR, len(value)) + b"".join(s(v) for v in value)
        fmt = {T_F32: "f", T_I32: "i"}[kind]
        return out + struct.pack("<IIQ", T_ARR, kind, len(value)) + struct.pack(f"<{len(value)}{fmt}", *value)
    raise TypeError(key)


def vocab(sp):
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        p = sp.id_to_piece(i)
        if sp.is_unknown(i):
            t = 2
        elif sp.is_control(i):
            t = 3
        elif sp.is_byte(i):
            t = 6
        elif sp.is_unused(i):
            t = 5
        elif p == "\n":
            t = 4  # user-defined
        else:
            t = 1
        pieces.append(p)
        scores.append(sp.get_score(i))
        types.append(t)
    return pieces, scores, types


def tensors(model):
    c = model.c
    out = [("token_embd.weight", model.embed.weight), ("output_norm.weight", model.norm.w)]
    for il, b in enumerate(model.blocks):
        p = f"blk.{il}."
        a = b.attn
        out += [(p + "attn_norm.weight", b.attn_norm.w), (p + "attn_q.weight", a.wq.weight),
                (p + "attn_kv_a_mqa.weight", a.wkv_a.weight), (p + "attn_kv_a_norm.weight", a.kv_norm.w),
                (p + "attn_kv_b.weight", a.wkv_b.weight), (p + "attn_output.weight", a.wo.weight),
                (p + "ffn_norm.weight", b.ffn_norm.w)]
        f = b.ffn
        if b.moe:
            out += [(p + "ffn_gate_inp.weight", f.router.weight), (p + "ffn_gate_exps.weight", f.gate),
                    (p + "ffn_up_exps.weight", f.up), (p + "ffn_down_exps.weight", f.down),
                    (p + "ffn_gate_shexp.weight", f.shared.gate.weight), (p + "ffn_up_shexp.weight", f.shared.up.weight),
                    (p + "ffn_down_shexp.weight", f.shared.down.weight)]
        else:
            out += [(p + "ffn_gate.weight", f.gate.weight), (p + "ffn_up.weight", f.up.weight),
                    (p + "ffn_down.weight", f.down.weight)]
    return out


DEFAULT_LICENSE = "PSF-2.0 AND BSL-1.0 (training data); weights: see models/README.md"


def export(out, gguf, name="moelsp-default", fim_order=None, chat_template=CHATML, ckpt="ckpt.pt",
           license=DEFAULT_LICENSE, sampling=None):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    model = load_exported(out, ckpt)
    c = model.c
    pieces, scores, types = vocab(sp)
    a = "deepseek2."
    meta = [
        kv("general.architecture", "deepseek2"), kv("general.name", name),
        kv("general.license", license),
        kv("general.alignment", ALIGN),
        kv(a + "context_length", c.ctx), kv(a + "embedding_length", c.d_model), kv(a + "block_count", c.n_layer),
        kv(a + "feed_forward_length", c.ffn_dense), kv(a + "attention.head_count", c.n_head),
        kv(a + "attention.head_count_kv", c.n_head), kv(a + "rope.freq_base", float(c.rope_base)),
        kv(a + "attention.layer_norm_rms_epsilon", float(c.rms_eps)), kv(a + "expert_used_count", c.n_expert_used),
        kv(a + "expert_count", c.n_expert), kv(a + "leading_dense_block_count", c.n_dense_lead),
        kv(a + "vocab_size", c.n_vocab), kv(a + "attention.q_lora_rank", 0), kv(a + "attention.kv_lora_rank", c.kv_lora),
        kv(a + "attention.key_length", c.qk_nope + c.qk_rope), kv(a + "attention.value_length", c.v_head),
        kv(a + "expert_feed_forward_length", c.ffn_expert), kv(a + "expert_shared_count", c.n_shared),
        kv(a + "expert_weights_scale", 1.0), kv(a + "expert_weights_norm", True), kv(a + "expert_gating_func", 1),
        kv(a + "rope.dimension_count", c.qk_rope),
        kv("tokenizer.ggml.model", "llama"), kv("tokenizer.ggml.pre", "default"),
        kv("tokenizer.ggml.tokens", pieces, T_STR), kv("tokenizer.ggml.scores", scores, T_F32),
        kv("tokenizer.ggml.token_type", types, T_I32),
        kv("tokenizer.ggml.bos_token_id", sp.bos_id()), kv("tokenizer.ggml.eos_token_id", sp.eos_id()),
        kv("tokenizer.ggml.unknown_token_id", sp.unk_id()),
        kv("tokenizer.ggml.eot_token_id", sp.piece_to_id("<|im_end|>")),
        kv("tokenizer.ggml.fim_pre_token_id", sp.piece_to_id("<|fim_prefix|>")),
        kv("tokenizer.ggml.fim_suf_token_id", sp.piece_to_id("<|fim_suffix|>")),
        kv("tokenizer.ggml.fim_mid_token_id", sp.piece_to_id("<|fim_middle|>")),
        kv("tokenizer.ggml.add_bos_token", False), kv("tokenizer.ggml.add_eos_token", False),
        kv("tokenizer.ggml.add_space_prefix", False), kv("tokenizer.chat_template", chat_template),
    ]
    if fim_order:  # the FIM prompt order the model reads best (moelsp's own key; llama.cpp ignores it)
        meta.append(kv("moelsp.fim_order", fim_order))
    for key, value in (sampling or {}).items():  # recommended sampler settings, llama.cpp's general.sampling.* keys
        meta.append(kv("general.sampling." + key, value))
    infos, blobs, off = [], [], 0
    for name, p in tensors(model):
        t = p.detach().float().contiguous()
        f16 = f16_tensors(name if "ffn_gate_inp" not in name else "router", t)
        arr = t.numpy().astype(np.float16 if f16 else np.float32)
        dims = list(reversed(arr.shape))
        infos.append(s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) +
                     struct.pack("<IQ", GG_F16 if f16 else GG_F32, off))
        data = arr.tobytes()
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(gguf, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    return {"gguf": gguf, "bytes": os.path.getsize(gguf), "tensors": len(infos)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("gguf")
    ap.add_argument("--name", default="moelsp-default")
    ap.add_argument("--fim-order", choices=["psm", "spm"])
    args = ap.parse_args()
    print(json.dumps(export(args.out, args.gguf, args.name, args.fim_order)))


if __name__ == "__main__":
    main()
