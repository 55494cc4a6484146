"""The deepseek2 architecture in PyTorch, written to compute exactly what
moelsp's engine/arch/deepseek2.cpp (and llama.cpp) compute from the exported
GGUF: MLA attention with a decoupled RoPE key (RoPE on adjacent pairs, the
"norm" type), a dense first layer, then MoE layers with softmax gating, top-k,
renormalised weights and a shared expert; RMSNorm everywhere; tied embeddings.
"""
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 4096
    d_model: int = 256
    n_layer: int = 6
    n_head: int = 4
    qk_nope: int = 48
    qk_rope: int = 16
    v_head: int = 64
    kv_lora: int = 128
    n_dense_lead: int = 1
    ffn_dense: int = 768
    n_expert: int = 8
    n_expert_used: int = 2
    ffn_expert: int = 256
    n_shared: int = 1
    ctx: int = 256
    rope_base: float = 10000.0
    rms_eps: float = 1e-5

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def rope_tables(c: Config, n, device):
    # theta_i = pos · base^(-2i/d) for pairs (2i, 2i+1)
    inv = c.rope_base ** (-torch.arange(0, c.qk_rope, 2, dtype=torch.float64, device=device) / c.qk_rope)
    ang = torch.arange(n, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()  # [n][rope/2]


def apply_rope(x, cos, sin):
    # x [..., n, rope] with adjacent pairs rotated (llama.cpp's "norm" RoPE)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class MLA(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        hk = c.qk_nope + c.qk_rope
        self.wq = nn.Linear(c.d_model, c.n_head * hk, bias=False)
        self.wkv_a = nn.Linear(c.d_model, c.kv_lora + c.qk_rope, bias=False)
        self.kv_norm = RMSNorm(c.kv_lora, c.rms_eps)
        self.wkv_b = nn.Linear(c.kv_lora, c.n_head * (c.qk_nope + c.v_head), bias=False)
        self.wo = nn.Linear(c.n_head * c.v_head, c.d_model, bias=False)

    def forward(self, h, cos, sin, mask):
        c = self.c
        B, T, _ = h.shape
        q = self.wq(h).view(B, T, c.n_head, c.qk_nope + c.qk_rope).transpose(1, 2)  # [B][H][T][hk]
        q_nope, q_pe = q[..., :c.qk_nope], q[..., c.qk_nope:]
        kva = self.wkv_a(h)                                                       # [B][T][lora + rope]
        lat = self.kv_norm(kva[..., :c.kv_lora])                                  # [B][T][lora]
        k_pe = apply_rope(kva[..., c.kv_lora:], cos, sin)[:, None]                # [B][1][T][rope], shared by heads
        q_pe = apply_rope(q_pe, cos, sin)
        kv = self.wkv_b(lat).view(B, T, c.n_head, c.qk_nope + c.v_head).transpose(1, 2)
        k_nope, v = kv[..., :c.qk_nope], kv[..., c.qk_nope:]                      # [B][H][T][nope], [B][H][T][v]
        scale = (c.qk_nope + c.qk_rope) ** -0.5
        s = (q_nope @ k_nope.transpose(-1, -2) + q_pe @ k_pe.transpose(-1, -2)) * scale  # [B][H][T][T]
        p = torch.softmax(s.float() + mask, dim=-1).to(v.dtype)
        o = (p @ v).transpose(1, 2).reshape(B, T, c.n_head * c.v_head)
        return self.wo(o)


class DenseFFN(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        E, d, f = c.n_expert, c.d_model, c.ffn_expert
        self.router = nn.Linear(d, E, bias=False)
        self.gate = nn.Parameter(torch.randn(E, f, d) * d ** -0.5)
        self.up = nn.Parameter(torch.randn(E, f, d) * d ** -0.5)
        self.down = nn.Parameter(torch.randn(E, d, f) * f ** -0.5)
        self.shared = DenseFFN(d, f * c.n_shared)

    def forward(self, x):
        c = self.c
        B, T, d = x.shape
        xf = x.reshape(-1, d)                                   # [N][d]
        probs = torch.softmax(self.router(xf).float(), dim=-1)  # [N][E]
        w, idx = probs.topk(c.n_expert_used, dim=-1)            # [N][k]
        w = w / w.sum(-1, keepdim=True)                         # expert_weights_norm
        out = self.shared(xf)
        flat_idx = idx.reshape(-1)
        token_of = torch.arange(xf.shape[0], device=x.device).repeat_interleave(c.n_expert_used)
        order = flat_idx.argsort()
        counts = torch.bincount(flat_idx, minlength=c.n_expert).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[start:start + n]
            start += n
            tok = token_of[sel]
            wt = w.reshape(-1)[sel]
            xe = xf[tok]
            ye = F.linear(F.silu(F.linear(xe, self.gate[e])) * F.linear(xe, self.up[e]), self.down[e])
            out = out.index_add(0, tok, ye * wt[:, None].to(ye.dtype))
        # Switch-style balance loss: E · Σ_e (share of routed slots) · (mean router probability)
        share = torch.bincount(flat_idx, minlength=c.n_expert).float() / flat_idx.numel()
        aux = c.n_expert * (share * probs.mean(0)).sum()
        load = share.detach()
        return out.view(B, T, d), aux, load


class Block(nn.Module):
    def __init__(self, c: Config, il):
        super().__init__()
        self.attn_norm = RMSNorm(c.d_model, c.rms_eps)
        self.attn = MLA(c)
        self.ffn_norm = RMSNorm(c.d_model, c.rms_eps)
        self.moe = il >= c.n_dense_lead
        self.ffn = MoE(c) if self.moe else DenseFFN(c.d_model, c.ffn_dense)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        h = self.ffn_norm(x)
        if self.moe:
            y, aux, load = self.ffn(h)
        else:
            y, aux, load = self.ffn(h), None, None
        return x + y, aux, load


class Deepseek2(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.n_vocab, c.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(c, i) for i in range(c.n_layer))
        self.norm = RMSNorm(c.d_model, c.rms_eps)
        # Residual-branch outputs start small so that depth does not blow up the stream.
        for b in self.blocks:
            for m in [b.attn.wo] + ([b.ffn.shared.down] if b.moe else [b.ffn.down]):
                nn.init.normal_(m.weight, std=0.02 / (2 * c.n_layer) ** 0.5)
            if b.moe:
                with torch.no_grad():
                    b.ffn.down.normal_(std=0.02 / (2 * c.n_layer) ** 0.5)

    def hidden(self, ids):
        T = ids.shape[1]
        cos, sin = rope_tables(self.c, T, ids.device)
        mask = torch.full((T, T), float("-inf"), device=ids.device).triu(1)
        x = self.embed(ids)
        auxes, loads = [], []
        for b in self.blocks:
            x, aux, load = b(x, cos, sin, mask)
            if aux is not None:
                auxes.append(aux)
                loads.append(load)
        return self.norm(x), auxes, loads

    def forward(self, ids):
        x, auxes, loads = self.hidden(ids)
        return x @ self.embed.weight.t().to(x.dtype), auxes, loads

    def n_params(self):
        total = sum(p.numel() for p in self.parameters())
        c = self.c
        per_expert = 3 * c.d_model * c.ffn_expert
        n_moe = c.n_layer - c.n_dense_lead
        active = total - n_moe * (c.n_expert - c.n_expert_used) * per_expert
        return total, active
