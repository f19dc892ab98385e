"""A CPU emulation of one decode megakernel step (kernels/decode/dec.h, dec_*.cu), op by op and
tile by tile over the *packed* buffers (llama_pack.pack), in float64 with the kernel's bf16
rounding points: the residual in f32, every matvec input vector rounded to bf16, qkv in f32,
the cache and the attention output in bf16, the new key and value used unrounded at their own
position. It checks what the CPU can: the packed layout and the tile walk (MatOp offsets, GU
interleave), the RoPE/cache protocol and the split-KV merge, against the fp32 reference."""

from __future__ import annotations

import math

import torch

import llama_pack as lp

F64 = torch.float64


def bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(F64)


class Emulator:
    def __init__(self, cfg, bufs: dict, max_seq: int, grid: int = 132, split: bool = True,
                 tile_elems: int = lp.TILE_ELEMS, down_chunks: int = 1):
        self.cfg, self.b, self.max_seq, self.grid, self.split = cfg, bufs, max_seq, grid, split
        self.tile_elems, self.down_chunks = tile_elems, down_chunks
        L, kvh, hd = cfg.layers, cfg.kv_heads, cfg.head_dim
        self.kcache = torch.zeros(L, kvh, max_seq, hd, dtype=F64)
        self.vcache = torch.zeros(L, kvh, max_seq, hd, dtype=F64)
        self.pos = 0
        self.blob = bufs["weights"].to(F64)

    def _mat_op(self, kind: str, layer: int):
        """dec.h mat_op: (k, r, tiles, tile_rows, first element, k-chunks)."""
        c, chunks = self.cfg, 1
        q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        base = layer * lp.layer_elems(c)
        if kind == "qkv":
            k, rows = c.hidden, q + 2 * kv
        elif kind == "o":
            base += (q + 2 * kv) * c.hidden
            k, rows = q, c.hidden
        elif kind == "gu":
            base += (q + 2 * kv) * c.hidden + c.hidden * q
            k, rows = c.hidden, c.inter
        elif kind == "down":
            base += (q + 2 * kv) * c.hidden + c.hidden * q + 2 * c.inter * c.hidden
            chunks = self.down_chunks
            k, rows = c.inter // chunks, c.hidden
        else:
            base, k, rows = 0, c.hidden, c.vocab
        r = lp.tile_rows(k, self.tile_elems)
        return k, r, rows // r * chunks, (2 * r if kind == "gu" else r), base, chunks

    def _matvec(self, kind, layer, xin):
        """All tiles of the op: y per row block (tile_rows sums), in tile order; a k-split op's
        tile i = q chunks + c multiplies xin's chunk c, its sums added into row block q (the
        kernel's red.add, here in tile order)."""
        k, r, tiles, trows, base, chunks = self._mat_op(kind, layer)
        src = self.b["head"].to(F64).reshape(-1) if kind == "head" else self.blob
        out = [torch.zeros(trows, dtype=F64) for _ in range(tiles // chunks)]
        for i in range(tiles):
            tile = src[base + i * trows * k: base + (i + 1) * trows * k].reshape(trows, k)
            c = i % chunks
            out[i // chunks] += tile @ xin[c * k:(c + 1) * k]
        return out, r

    def _rmsnorm(self, x, w):
        return bf16(x * torch.rsqrt((x * x).mean() + self.cfg.rms_eps) * w)

    def _rope(self, v, pos):  # v [n, hd], f32 angle as dec_rope
        half = self.cfg.head_dim // 2
        ang = (torch.tensor(float(pos), dtype=torch.float32) * self.b["inv_freq"]).to(F64)
        c, s = torch.cos(ang), torch.sin(ang)
        x1, x2 = v[:, :half], v[:, half:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=1)

    def _attention(self, layer, qkv):
        c, pos = self.cfg, self.pos
        hd, g, kvh = c.head_dim, c.group, c.kv_heads
        q_dim, kv_dim = c.heads * hd, kvh * hd
        ln = pos + 1
        per_head = min(32, max(1, self.grid // kvh)) if self.split else 1
        cs = (math.ceil(ln / per_head) + 63) // 64 * 64 if self.split else ln
        nch = math.ceil(ln / cs)
        ao = torch.empty(q_dim, dtype=F64)
        scale = 1 / math.sqrt(hd) * math.log2(math.e)
        for h in range(kvh):
            q = qkv[h * g * hd:(h + 1) * g * hd].reshape(g, hd)
            kn = qkv[q_dim + h * hd: q_dim + (h + 1) * hd].reshape(1, hd)
            if c.qk_norm:  # dec_rope's headnorm, f32, before RoPE
                qn, kw = self.b["qk_norms"][layer].to(F64)
                q = (q * torch.rsqrt((q * q).mean(1, keepdim=True) + c.rms_eps) * qn).to(torch.float32).to(F64)
                kn = (kn * torch.rsqrt((kn * kn).mean(1, keepdim=True) + c.rms_eps) * kw).to(torch.float32).to(F64)
            q = self._rope(q, pos)
            kn = self._rope(kn, pos)[0]
            vn = qkv[q_dim + kv_dim + h * hd: q_dim + kv_dim + (h + 1) * hd]
            self.kcache[layer, h, pos], self.vcache[layer, h, pos] = bf16(kn), bf16(vn)
            K = self.kcache[layer, h, :ln].clone()
            V = self.vcache[layer, h, :ln].clone()
            K[pos], V[pos] = kn, vn  # the kernel scores its own position unrounded
            parts = []
            for ch in range(nch):
                lo, hi = ch * cs, min(ln, (ch + 1) * cs)
                s = (q * scale) @ K[lo:hi].T  # [g, n], base 2
                m = s.max(dim=1).values
                p = torch.exp2(s - m[:, None])
                parts.append((m, p.sum(dim=1), p @ V[lo:hi]))
            M = torch.stack([m for m, _, _ in parts]).max(dim=0).values
            Lsum = sum(l * torch.exp2(m - M) for m, l, _ in parts)
            O = sum(o * torch.exp2(m - M)[:, None] for m, _, o in parts)
            ao[h * g * hd:(h + 1) * g * hd] = bf16(O / Lsum[:, None]).reshape(-1)
        return ao

    def step(self, token: int):
        """One decode step at position self.pos: (logits f64 [vocab], argmax token)."""
        c, norms = self.cfg, self.b["norms"].to(F64)
        x = self.b["embed"][token].to(F64)
        for layer in range(c.layers):
            ys, _ = self._matvec("qkv", layer, self._rmsnorm(x, norms[2 * layer]))
            qkv = torch.cat(ys).to(torch.float32).to(F64)
            ao = self._attention(layer, qkv)
            ys, _ = self._matvec("o", layer, ao)
            x = (x + torch.cat(ys)).to(torch.float32).to(F64)
            ys, r = self._matvec("gu", layer, self._rmsnorm(x, norms[2 * layer + 1]))
            h = torch.cat([bf16(y[:r] / (1 + torch.exp(-y[:r])) * y[r:]) for y in ys])
            ys, _ = self._matvec("down", layer, h)
            x = (x + torch.cat(ys)).to(torch.float32).to(F64)
        ys, _ = self._matvec("head", 0, self._rmsnorm(x, norms[2 * c.layers]))
        logits = torch.cat(ys)
        self.pos += 1
        return logits, int(torch.argmax(logits))
