#!/usr/bin/python3
"""Read a GGUF file that export_gguf.py wrote back into the PyTorch model.

A later training phase can start from the committed model's weights (F16-
rounded, as the file stores them) instead of a checkpoint of the run that made
it: `train.py OUT --init-gguf models/moelsp-default.gguf`. The vocabulary in
the file must be the tokenizer's, piece for piece, or the weights would mean
other tokens: that is checked, not assumed.
"""
import struct

import numpy as np
import torch

from export_gguf import tensors, vocab

# GGUF value types: the scalar formats, 8 = string, 9 = array.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class _Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n].decode()
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        return self.take(_SCALAR[t])


def read_gguf(path):
    """(metadata dict, {tensor name: numpy array in torch's [out][in] order})."""
    data = open(path, "rb").read()
    r = _Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.p = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version}, expected 3")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    align = meta.get("general.alignment", 32)
    base = (r.p + align - 1) // align * align
    out = {}
    for name, dims, t, off in infos:
        dtype = {0: np.float32, 1: np.float16}.get(t)
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has type {t}; only F32 and F16 are read here")
        n = int(np.prod(dims))
        arr = np.frombuffer(data, dtype=dtype, count=n, offset=base + off)
        out[name] = arr.reshape(list(reversed(dims))).astype(np.float32)
    return meta, out


def load_into(model, path, sp):
    """Copies the file's weights into `model`; the file's vocabulary must be `sp`'s."""
    meta, ts = read_gguf(path)
    pieces, _, _ = vocab(sp)
    if meta.get("tokenizer.ggml.tokens") != pieces:
        raise ValueError(f"{path}: its vocabulary differs from the tokenizer's; the weights cannot be reused")
    names = set()
    for name, p in tensors(model):
        if name not in ts:
            raise ValueError(f"{path}: no tensor {name}")
        src = torch.from_numpy(ts[name])
        if tuple(src.shape) != tuple(p.shape):
            raise ValueError(f"{path}: {name} is {tuple(src.shape)}, the model wants {tuple(p.shape)}")
        with torch.no_grad():
            p.copy_(src)
        names.add(name)
    extra = set(ts) - names
    if extra:
        raise ValueError(f"{path}: tensors the model does not have: {sorted(extra)[:4]}")
    return meta
