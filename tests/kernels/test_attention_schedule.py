"""The causal variant's host schedule (attention_masks.causal_schedule, ATTN_CAUSAL_TILE's aux
words): every tile once, sections of K/V rows that fit the L2 share, balanced CTAs, and the
device's own order where the host does not make one. CPU only."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "attention"))
import attention_masks as M  # noqa: E402

L2 = 60 * 2**20


def decode(words, G, base=0):
    words = words[base:]
    assert words[:2] == [base + 2, base + 3 + G]
    starts, tiles = words[2:3 + G], words[3 + G:]
    assert starts[0] == 0 and starts[-1] == len(tiles) and starts == sorted(starts)
    return [[(w >> 16, w & 0xFFFF) for w in tiles[starts[c]:starts[c + 1]]] for c in range(G)]


@pytest.mark.parametrize("B,H,S,G", [(1, 32, 4096, 132), (1, 32, 8192, 132), (1, 32, 32768, 132),
                                     (2, 3, 256, 4), (1, 1, 128, 1), (3, 20, 1024, 100), (1, 32, 4000, 132),
                                     (2, 3, 1, 4), (1, 5, 129, 3)])
def test_every_tile_once_and_balanced(B, H, S, G):
    QB = -(-S // M.BLOCK)  # a last partial Q block is a tile too
    lists = decode(M.causal_schedule(B, H, S, 128, G, L2), G)
    seen = sorted(t for lst in lists for t in lst)
    assert seen == sorted((qb, bh) for qb in range(QB) for bh in range(B * H))
    loads = [sum(qb + 1 for qb, _ in lst) for lst in lists]
    if QB * B * H >= 8 * G:  # enough tiles to balance: within 3% of the mean (one wave's tail)
        assert max(loads) <= 1.03 * sum(loads) / G, (max(loads), sum(loads) / G)


def test_sections_fit_half_the_l2_but_hold_eight_rows():
    """At S = 8K (4 MB of K/V per head), 30 MB of L2 holds 7 heads: sections of 8 rows; at 1K, 30 MB
    holds 60 heads: one section of all 32. A CTA's tiles come in section order."""
    for S, rows in [(8192, 8), (1024, 32)]:
        lists = decode(M.causal_schedule(1, 32, S, 128, 132, L2), 132)
        for lst in lists:
            sections = [bh // rows for _, bh in lst]
            assert sections == sorted(sections)


@pytest.mark.parametrize("B,H,S", [(1, 0x10000, 128), (1, 1, 128 * 0x10000), (64, 64, 16384)])
def test_shapes_past_the_fields_or_the_limit_keep_the_device_order(B, H, S):
    assert M.causal_schedule(B, H, S, 128, 132, L2) == [0]


def test_schedule_placed_after_the_variant_words():
    """softcap and alibi put their own words first: the offsets count from the aux start."""
    assert decode([7, 9] + M.causal_schedule(1, 2, 512, 128, 3, L2, base=2), 3, base=2) == \
        decode(M.causal_schedule(1, 2, 512, 128, 3, L2), 3)


def test_document_schedule_in_sections_longest_first():
    """document_aux's schedule: every (Q block, row) tile once; each CTA's tiles in section order."""
    import torch
    B, H, S, G = 1, 32, 8192, 132
    ids = (torch.arange(S, dtype=torch.int32) // 700).repeat(B, 1)
    a = M.document_aux(ids, B, H, S, torch.device("cpu"), G, L2, 128).tolist()
    lists = decode([2, 3 + G] + a[a[10]:a[10] + G + 1] + a[a[11]:], G)
    assert sorted(t for lst in lists for t in lst) == sorted((qb, bh) for qb in range(S // 128) for bh in range(B * H))
    for lst in lists:  # 8 rows per section at 8K (4 MB of K/V per head, 30 MB of L2)
        assert [bh // 8 for _, bh in lst] == sorted(bh // 8 for _, bh in lst)


def test_store_provider_maps_o_per_warpgroup_box():
    """attn_store_host: o as [bh * q_len, d] bf16 in boxes of one warpgroup's 64 rows x 64 columns,
    at any q_len (a warpgroup past q_len stores with plain stores); an empty problem is refused
    (R-HOST at launch)."""
    import importlib.util

    from pipelink.runtime.host import HostError
    spec = importlib.util.spec_from_file_location("attn_store_host", ROOT / "kernels/attention/attn_store_host.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Host:
        def require(self, cond, msg):
            if not cond:
                raise HostError(msg)

        def tensor_map_2d(self, ptr, dtype, **kw):
            return (ptr, dtype, kw)

    lent, facts = {"o": 4096, "q_len": 256, "bh": 3}, {"block_q": 128, "head_dim": 64}
    assert mod.provide(lent, facts, Host())["tmap_o"] == (
        4096, "bf16", {"rows": 768, "cols": 64, "box_rows": 64, "box_cols": 64, "swizzle": 128})
    assert mod.provide({**lent, "q_len": 200}, facts, Host())["tmap_o"][2]["rows"] == 600
    with pytest.raises(HostError):
        mod.provide({**lent, "q_len": 0}, facts, Host())


# --- split-KV decode, stream-K (attn_decode_streamk.cu) ----------------------------------------
import attention as A  # noqa: E402

U32 = 2**32


class StreamK:
    """attn_decode_streamk.cu's arithmetic, line for line (unsigned 32-bit: every product is
    checked to fit, as the device's would wrap)."""

    def __init__(self, bh, kv_len, grid):
        self.nkv = (kv_len + M.BLOCK - 1) // M.BLOCK  # the last block partial past kv_len
        self.n = bh * self.nkv
        self.g = min(grid, self.n, A.STREAMK_MAX_CTAS)

    def mul(self, a, b):
        assert a * b < U32, (a, b)
        return a * b

    def start(self, c):
        return self.mul(c, self.n) // self.g

    def cta_of(self, b):
        x = self.mul(b + 1, self.g) + self.n - 1
        assert x < U32
        return x // self.n - 1

    def first_cta(self, h):
        return self.cta_of(self.mul(h, self.nkv))

    def tile(self, c, t):
        if c >= self.g:
            return None
        h = self.start(c) // self.nkv + t
        if self.mul(h, self.nkv) >= self.start(c + 1):
            return None
        first = self.first_cta(h)
        return (0, h, c - first, self.cta_of((h + 1) * self.nkv - 1) - first + 1)

    def blocks(self, h, s):  # [lo, hi) of head h's blocks in split s: kv_block(i) = lo + i, kv_count = hi - lo
        c = self.first_cta(h) + s
        lo, hi = max(self.start(c), h * self.nkv), min(self.start(c + 1), (h + 1) * self.nkv)
        return lo - h * self.nkv, hi - h * self.nkv


@pytest.mark.parametrize("bh,kv_len,grid", [
    (32, 4096, 132), (256, 32768, 132), (512, 16384, 132), (1024, 8192, 132), (2048, 4096, 132),
    (160, 32768, 132), (6, 384, 132), (1, 128, 132), (3, 1024, 7), (65535, 256, 132), (1, 2**31 - 128, 132),
    (2, 2**30 - 128, 255), (5, 640, 300), (3, 1, 132), (7, 1000, 132), (160, 32769, 132), (1, 2**31 - 200, 132), (2**17 - 1, 1, 132)])
def test_streamk_covers_every_block_once(bh, kv_len, grid):
    """Every head's blocks once, in the tiles of consecutive CTAs (split 0 .. splits - 1, each the
    same `splits`), CTAs' block counts within one of each other, splits within the slot stride the
    entry gives attn_combine; products fit 32 bits up to N < 2^24 and 255 CTAs."""
    r = StreamK(bh, kv_len, grid)
    stride = A.streamk_stride(bh, kv_len, grid)
    parts, per_cta = {}, []  # head -> [(split, lo, hi, splits)]
    for c in range(grid):
        n = 0
        for t in range(bh + 1):
            info = r.tile(c, t)
            if info is None:
                break
            _, h, s, ns = info
            assert 0 <= s < ns <= stride, (c, t, info, stride)
            lo, hi = r.blocks(h, s)
            assert 0 <= lo < hi <= r.nkv, f"CTA {c}: tile {info} has blocks [{lo}, {hi})"
            parts.setdefault(h, []).append((s, lo, hi, ns))
            n += hi - lo
        per_cta.append(n)
    assert sorted(parts) == list(range(bh))
    for h, ps in parts.items():
        ps.sort()
        assert [p[0] for p in ps] == list(range(len(ps))) and {p[3] for p in ps} == {len(ps)}, (h, ps)
        assert ps[0][1] == 0 and ps[-1][2] == r.nkv and all(a[2] == b[1] for a, b in zip(ps, ps[1:])), (h, ps)
    assert max(per_cta) - min(per_cta[:r.g]) <= 1 and sum(per_cta[r.g:]) == 0


@pytest.mark.parametrize("bh,kv_len,sms,schedule,splits,want", [
    (32, 4096, 132, None, None, (True, 4)),         # fewer heads than SMs: one wave of uniform splits
    (256, 32768, 132, None, None, (False, 2)),      # several waves: stream-K, stride = most CTAs a head meets
    (2048, 4096, 132, None, None, (True, 1)),       # 15.5 heads a SM, waves 97% used: uniform
    (1024, 8192, 132, None, None, (False, 2)),      # 7.8 heads a SM: stream-K
    (1100, 4096, 132, None, None, (True, 1)),       # 8.33 waves: 8.33 / 9 >= 0.9
    (1060, 4096, 132, None, None, (False, 2)),      # 8.03 waves: 8.03 / 9 < 0.9
    (160, 4096, 132, None, None, (False, 2)),       # 1.2 waves of uniform
    (32, 4096, 132, "streamk", None, (False, 6)),
    (256, 32768, 132, "uniform", None, (True, 1)),
    (256, 32768, 132, None, 3, (True, 3)),          # splits= is the uniform schedule's
])
def test_decode_schedule_gives_the_expected_splits(bh, kv_len, sms, schedule, splits, want):
    assert A.decode_schedule(bh, kv_len, sms, schedule, splits) == want
