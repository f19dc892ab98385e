"""Property-based fuzz of the attention entry (kernels/attention/attention.py `attention`): dense,
paged (block_table / seq_lens) and ragged (cu_seqlens) calls with head counts that are no GQA
multiple, head dims and page sizes not built, offsets and tables of the wrong dtype, length,
rank or device, and the variants' own arguments. Each call is accepted, with one launch and an
independent oracle agreeing it is valid, or refused with a LaunchError and no launch. CPU only
(entry_fakes: tensors that report cuda:<i>, a launch counter for the kernel).

Values inside device tensors are not read (no host sync, graph-capturable; attention_args.
paged_layout and attention_varlen's docstrings): cu_seqlens that decrease, page numbers past the
pool and seq_lens longer than the pages hold are valid calls here, and the kernel clamps them."""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import BF16, CountingKernel, gpu  # noqa: E402
from helpers.entry_fuzz import REFUSED, fuzz_settings, outcome  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "attention"))
import attention as A  # noqa: E402

VARIANTS = ["full", "causal", "sliding", "decode", "bogus"]
I32 = torch.int32


@pytest.fixture
def kern(monkeypatch):
    k = CountingKernel(A.PARAMS)
    monkeypatch.setattr(A, "load", lambda variant, device=0, **kw: k)
    monkeypatch.setattr(A, "_variant_aux", lambda *a, **kw: "aux")
    monkeypatch.setattr(A, "_paged_aux", lambda *a, **kw: "paged aux")
    monkeypatch.setattr(A, "_words_tensor", lambda words, device: gpu(torch.zeros(len(words) + 4, dtype=I32)))
    A._aux_cache.clear()
    return k


def _t(*shape, dtype=BF16, index=0):
    """A 'GPU' tensor without memory (meta: data_ptr 0) -- big shapes cost nothing."""
    return gpu(torch.empty(shape, dtype=dtype, device="meta"), index)


def _real(*shape, dtype=BF16):
    """A 'GPU' tensor with memory (its own address: out must not overlap the inputs)."""
    return gpu(torch.empty(shape, dtype=dtype))


# One index tensor's damage: (name, build(good tensor)); the oracle judges the result itself
DAMAGE = [("as is", lambda t: t),
          ("int64", lambda t: gpu(t.as_subclass(torch.Tensor).to(torch.int64))),
          ("float", lambda t: gpu(t.as_subclass(torch.Tensor).float())),
          ("cpu", lambda t: t.as_subclass(torch.Tensor).clone()),
          ("cuda:1", lambda t: gpu(t.as_subclass(torch.Tensor).clone(), 1)),
          ("one longer", lambda t: gpu(torch.cat([t.as_subclass(torch.Tensor)] * 2)[:t.shape[0] + 1])),
          ("2-D", lambda t: gpu(t.as_subclass(torch.Tensor).reshape(1, *t.shape))),
          ("a list", lambda t: t.tolist()), ("numpy", lambda t: t.as_subclass(torch.Tensor).numpy()),
          ("junk values", lambda t: gpu(torch.full(t.shape, -7 if t.dim() == 1 else 10**6, dtype=I32))),
          ("decreasing", lambda t: gpu(t.as_subclass(torch.Tensor).flip(0).contiguous()))]
SCALES = [(None, True), (0.5, True), (np.float32(0.1), True), (0.0, False), (math.nan, False), (math.inf, False),
          (True, False), ("1", False), (1e-45, False)]
WINDOWS = [(100, True), (1, True), (np.int64(7), True), (0, False), (-3, False), (2**31, False), (1.5, False),
           (True, False), (None, False)]
GQA = [(None, True), (True, True), (False, True), (1, False), ("yes", False)]


def _int32_on_gpu0(t, dims: int) -> bool:
    """The oracle's view of an index tensor: int32, `dims`-D, on cuda:0 (its values are not read)."""
    return (isinstance(t, torch.Tensor) and t.is_cuda and t.device.index == 0 and t.dtype == I32
            and t.dim() == dims)


def _choice(pool):
    """A (value, valid) of the pool, valid ones four times as likely: valid calls must be common."""
    good = [i for i, (_, ok) in enumerate(pool) if ok]
    return st.sampled_from(good * 3 + list(range(len(pool)))).map(lambda i: pool[i])


def _mostly(good, other):
    return st.sampled_from(list(good) * 3 + list(other))


DAMAGES = _mostly([0] * 3, range(len(DAMAGE)))  # index tensors are mostly as they should be
STRAY = _mostly([False], [True])  # a window= given to a variant that reads none


def _common_ok(variant, H, Hkv, D, Lq, window, gqa, scale):
    """The oracle's rules every mode shares: the variant and its window, GQA, head dim, scale."""
    ok = variant in A.VARIANTS and D in A.HEAD_DIMS and scale[1] and gqa[1]
    ok = ok and Hkv <= H and H % Hkv == 0 and not (gqa[0] is False and H != Hkv)
    if variant == "decode":
        ok = ok and 1 <= Lq * (H // max(Hkv, 1)) <= A.DECODE_ROWS
    return ok and (window[1] if variant == "sliding" else window[0] is None)


def test_fuzz_dense_and_paged_calls(kern):
    @fuzz_settings(400)
    @given(_mostly(VARIANTS[:4], VARIANTS), st.booleans(), st.integers(1, 2), _mostly([2, 4, 8], [1, 3, 6]),
           _mostly([1, 2], [3, 4]), st.sampled_from([1, 3, 16, 128, 200]), st.sampled_from([None, 128, 300]),
           _mostly([128, 64, 256], [96]), _mostly(A.PAGE_SIZES, [8, 48, 256]), _choice(WINDOWS), _choice(GQA),
           _choice(SCALES), DAMAGES, DAMAGES, _mostly(["decode", "causal"], VARIANTS), STRAY)
    def run(variant, paged, B, H, Hkv, Lq, Lkv, D, page, window, gqa, scale, bt_damage, lens_damage, paged_variant,
            stray):
        Lkv = Lkv or Lq  # None: self-attention
        variant = paged_variant if paged else variant
        window = window if variant == "sliding" or stray else (None, True)
        ok = _common_ok(variant, H, Hkv, D, Lq, window, gqa, scale)
        q = _t(B, H, Lq, D)
        kw = {"enable_gqa": gqa[0], "scale": scale[0], "out": _real(B, H, Lq, D) if Lq < 20 else _t(B, H, Lq, D)}
        kw["out"] = kw["out"] if Lq < 20 else None  # out=None: a new tensor (meta q has no address to overlap)
        if window[0] is not None:
            kw["window"] = window[0]
        if paged:
            k = v = _t(5, Hkv, page, D)
            bt, lens = gpu(torch.zeros(B, 3, dtype=I32)), gpu(torch.full((B,), 20, dtype=I32))
            kw["block_table"], kw["seq_lens"] = DAMAGE[bt_damage][1](bt), DAMAGE[lens_damage][1](lens)
            bt, lens = kw["block_table"], kw["seq_lens"]
            ok = ok and variant in ("decode", "causal") and page in A.PAGE_SIZES
            ok = ok and _int32_on_gpu0(bt, 2) and bt.shape[0] == B and _int32_on_gpu0(lens, 1) and lens.shape[0] == B
        else:
            k = v = _t(B, Hkv, Lkv, D)
            ok = ok and not (variant in ("causal", "sliding") and Lq != Lkv)
        if kw["out"] is None and ok:  # attention would allocate the output on the GPU: call check_call instead
            got = outcome(A.check_call, q, k, v, variant, **kw)
            assert (got is not REFUSED) == ok, (variant, paged, B, H, Hkv, Lq, Lkv, D, page, kw)
            return
        before = len(kern.launches)
        got = outcome(A.attention, q, k, v, variant, **kw)
        assert (got is not REFUSED) == ok, (variant, paged, B, H, Hkv, Lq, Lkv, D, page, kw)
        assert len(kern.launches) == before + ok

    run()


def test_fuzz_ragged_calls(kern):
    @fuzz_settings(200)
    @given(_mostly(VARIANTS[:3], VARIANTS), st.lists(st.integers(0, 200), min_size=1, max_size=4),
           _mostly([2, 4, 8], [1, 3, 6]), _mostly([1, 2], [3, 4]), _mostly([128, 64, 256], [96]), _choice(WINDOWS),
           _choice(GQA), _choice(SCALES), DAMAGES, DAMAGES, _mostly([None, 1, 200], [0, -1, 2**31, 2.0]), STRAY)
    def run(variant, lens, H, Hkv, D, window, gqa, scale, q_damage, k_damage, max_q, stray):
        window = window if variant == "sliding" or stray else (None, True)
        ok = _common_ok(variant, H, Hkv, D, 1, window, gqa, scale) and variant in ("full", "causal", "sliding")
        tq = max(sum(lens), 1)
        cu = gpu(torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(I32))
        q, k = _real(tq, H, D), _t(tq, Hkv, D)
        kw = {"enable_gqa": gqa[0], "scale": scale[0], "out": _real(tq, H, D), "max_seqlen_q": max_q,
              "cu_seqlens_q": DAMAGE[q_damage][1](cu), "cu_seqlens_k": DAMAGE[k_damage][1](cu)}
        if window[0] is not None:
            kw["window"] = window[0]
        cq, ck = kw["cu_seqlens_q"], kw["cu_seqlens_k"]
        ok = ok and _int32_on_gpu0(cq, 1) and _int32_on_gpu0(ck, 1) and cq.shape == ck.shape and cq.shape[0] >= 2
        ok = ok and (max_q is None or type(max_q) is int and 1 <= max_q <= 2**31 - 1)
        before = len(kern.launches)
        got = outcome(A.attention, q, k, k, variant, **kw)
        assert (got is not REFUSED) == ok, (variant, lens, H, Hkv, D, kw)
        assert len(kern.launches) == before + ok

    run()
