"""An independent PyTorch implementation of the documented architecture, for tests/test_slm_reference_torch.py and
bench/slm_bench.py.

TorchReference is written from the spec (docs/slm.md), not from slm's code: torch's own layer_norm / rms_norm /
gelu (tanh and exact) / silu / scaled_dot_product_attention, RoPE through complex multiplication, the sinusoidal
table from the exp-log formula. It loads the same weights from model.params, minding the storage conventions
(attention matrices: output units as rows, y = x @ W.T = F.linear; feed-forward matrices: input coordinates as rows,
y = x @ W).
"""

from __future__ import annotations

import math

import numpy as np
import torch

import slm

F = torch.nn.functional


class TorchReference(torch.nn.Module):
    """A decoder-only transformer following the slm parameter contract, for one sequence (T,)."""

    def __init__(self, cfg: slm.Config, params: dict[str, np.ndarray], dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.cfg = cfg
        self.p = {name: torch.tensor(np.asarray(value), dtype=dtype) for name, value in params.items()}
        self.dtype = dtype

    def _norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        d, p = self.cfg.n_model, self.p
        if self.cfg.norm == "layer":
            return F.layer_norm(x, (d,), p[f"{name}.weight"], p[f"{name}.bias"], self.cfg.eps)
        return F.rms_norm(x, (d,), p[f"{name}.weight"], self.cfg.eps)

    def _sinusoidal(self, n_positions: int) -> torch.Tensor:
        # Vaswani et al.: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d))
        d = self.cfg.n_model
        position = torch.arange(n_positions, dtype=torch.float64)[:, None]
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
        table = torch.zeros(n_positions, d, dtype=torch.float64)
        table[:, 0::2] = torch.sin(position * div)
        table[:, 1::2] = torch.cos(position * div)
        return table.to(self.dtype)

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        # x (heads, T, k): among the first r coordinates (rotary_dim, else k), pairs (2i, 2i+1) as complex numbers,
        # multiplied by e^{i * pos * base^(-2i/r) / scale}; the rest unchanged
        n_heads, t, k = x.shape
        r = self.cfg.rotary_dim or k
        inv_freq = 1.0 / (self.cfg.rope_base ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
        angles = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq) / self.cfg.rope_scale
        rotation = torch.polar(torch.ones_like(angles), angles)  # (T, r/2) complex128
        pairs = torch.view_as_complex(x[..., :r].to(torch.float64).reshape(n_heads, t, r // 2, 2).contiguous())
        turned = torch.view_as_real(pairs * rotation).reshape(n_heads, t, r).to(self.dtype)
        return torch.cat([turned, x[..., r:]], dim=-1)

    def _attention(self, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, p, a = self.cfg, self.p, f"blocks.{i}.attn"
        t = x.shape[0]
        h, g, k = cfg.n_heads, cfg.n_kv_heads, cfg.head_size
        q = F.linear(x, p[f"{a}.w_q"], p.get(f"{a}.b_q")).view(t, h, k).transpose(0, 1)
        kk = F.linear(x, p[f"{a}.w_k"], p.get(f"{a}.b_k")).view(t, g, k).transpose(0, 1)
        v = F.linear(x, p[f"{a}.w_v"], p.get(f"{a}.b_v")).view(t, g, k).transpose(0, 1)
        if cfg.positions == "rope":
            q, kk = self._rope(q), self._rope(kk)
        kk = kk.repeat_interleave(h // g, dim=0)  # query head j reads kv head j // (h / g)
        v = v.repeat_interleave(h // g, dim=0)
        allowed = torch.ones(t, t, dtype=torch.bool)
        if cfg.causal:
            allowed = torch.tril(allowed)
        scores = (q @ kk.transpose(-1, -2)) / math.sqrt(k)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        out = F.scaled_dot_product_attention(q, kk, v, attn_mask=allowed)  # (h, T, k), a second code path
        merged = out.transpose(0, 1).reshape(t, h * k)
        return weights, F.linear(merged, p[f"{a}.w_o"], p.get(f"{a}.b_o"))

    def _ffn(self, i: int, x: torch.Tensor) -> torch.Tensor:
        p, f = self.p, f"blocks.{i}.ffn"
        pre = x @ p[f"{f}.w_in"]
        if f"{f}.b_in" in p:
            pre = pre + p[f"{f}.b_in"]
        if self.cfg.activation == "relu":
            act = F.relu(pre)
        elif self.cfg.activation == "gelu":
            act = F.gelu(pre, approximate="tanh")
        elif self.cfg.activation == "gelu_erf":
            act = F.gelu(pre)
        else:
            act = F.silu(x @ p[f"{f}.w_gate"]) * pre
        out = act @ p[f"{f}.w_out"]
        return out + p[f"{f}.b_out"] if f"{f}.b_out" in p else out

    def forward(self, tokens: torch.Tensor) -> dict[str, object]:
        cfg, p = self.cfg, self.p
        t = tokens.shape[0]
        x = p["tok_emb"][tokens]
        if cfg.positions == "sinusoidal":
            x = x + self._sinusoidal(t)
        elif cfg.positions == "learned":
            x = x + p["pos_emb"][:t]
        attention, hs, ys = [], [], []
        for i in range(cfg.n_layers):
            if cfg.parallel_residual:  # both sublayers read x; no h
                weights, attn = self._attention(i, self._norm(f"blocks.{i}.norm1", x))
                h = None
                y = x + attn + self._ffn(i, self._norm(f"blocks.{i}.norm2", x))
            elif cfg.norm_placement == "pre":
                weights, attn = self._attention(i, self._norm(f"blocks.{i}.norm1", x))
                h = x + attn
                y = h + self._ffn(i, self._norm(f"blocks.{i}.norm2", h))
            else:
                weights, attn = self._attention(i, x)
                h = self._norm(f"blocks.{i}.norm1", x + attn)
                y = self._norm(f"blocks.{i}.norm2", h + self._ffn(i, h))
            attention.append(weights)
            hs.append(h)
            ys.append(y)
            x = y
        final = self._norm("norm_f", x) if cfg.norm_placement == "pre" else x
        logits = final @ (p["tok_emb"].T if cfg.tied else p["unembed"])
        return {"attention": attention, "h": hs, "y": ys, "logits": logits, "probs": torch.softmax(logits, -1)}


def spread(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights far from the 0.02-std initialisation, so that logits differ clearly and greedy choices are not
    near-ties that float rounding could flip; norm scales near 1, biases (when present) non-zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "ln" in name or "norm" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(noise * (0.5 if p.ndim == 1 else 0.6 / p.shape[-1] ** 0.25))
    return model.eval()
