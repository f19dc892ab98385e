"""kernels/attention entry points refuse every bad input before loading or launching anything
(a LaunchError with an R-* code and a hint, never a torch/struct traceback, never a silently
ignored or coerced argument). CPU only: tensors are CPU tensors that report cuda:0
(entry_fakes.OnGpu), the kernel is a launch counter; skipped where torch is absent."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import (BF16, CountingKernel, empty, gpu, huge, misaligned, randn, refused,  # noqa: E402
                         unprobeable_dir, write_manifest)

sys.path.insert(0, str(ROOT / "kernels" / "attention"))
import attention as A  # noqa: E402
from attention_masks import BlockMask, create_block_mask, document_aux  # noqa: E402

B, H, S, D = 1, 2, 256, 128


@pytest.fixture
def kern(monkeypatch):
    """attention.load -> a launch counter (and no device aux buffers)."""
    k = CountingKernel(A.PARAMS)
    loads = []
    monkeypatch.setattr(A, "load", lambda variant, device=0, **kw: loads.append((variant, device, kw)) or k)
    monkeypatch.setattr(A, "_variant_aux", lambda *a, **kw: "aux")
    monkeypatch.setattr(A, "_paged_aux", lambda *a, **kw: "paged aux")
    k.loads = loads
    return k


def qkv(b=B, h=H, s=S, d=D, lkv=None):
    return randn(b, h, s, d), randn(b, h, lkv or s, d), randn(b, h, lkv or s, d)


def mask(b=None, h=None, s=S, index=0):
    bm = create_block_mask(lambda b_, h_, q, k: k <= q, b, h, s, s, device="cpu")
    bm.aux = gpu(bm.aux, index)
    return bm


def doc_ids(b=B, s=S, dtype=torch.int32):
    return gpu((torch.arange(s) // 100).to(dtype).repeat(b, 1))


GOOD = {"full": {}, "causal": {}, "sliding": {"window": 100}, "softcap": {"softcap": 30.0}, "alibi": {},
        "block_sparse": {"block_mask": None}, "document": {"doc_ids": None}, "decode": {}}


def good_kwargs(variant):
    kw = dict(GOOD[variant])
    if variant == "block_sparse":
        kw["block_mask"] = mask()
    if variant == "document":
        kw["doc_ids"] = doc_ids()
    return kw


@pytest.mark.parametrize("variant", A.VARIANTS)
def test_good_calls_launch_once(kern, variant):
    q, k, v = qkv()
    if variant == "decode":
        q = randn(B, H, 3, D)
    out = empty(*q.shape)
    assert A.attention(q, k, v, variant, out=out, **good_kwargs(variant)) is out
    (p,) = kern.launches
    assert p["q_len"] == q.shape[2] and p["kv_len"] == S and p["bh"] == B * H and p["scale"] == 1 / math.sqrt(D)
    assert p["kv_group"] == 1
    if variant == "decode":
        assert p["splits"] == A.default_splits(B * H, S, kern.num_sms)


@pytest.mark.parametrize("H, Hkv, Lq", [(32, 8, 1), (32, 2, 1), (16, 1, 1), (8, 2, 4), (4, 4, 3)])
@pytest.mark.parametrize("enable_gqa", [None, True])
def test_grouped_query_decode_runs_a_group_as_rows(kern, H, Hkv, Lq, enable_gqa):
    q, k, v = randn(B, H, Lq, D), randn(B, Hkv, S, D), randn(B, Hkv, S, D)
    out = empty(*q.shape)
    assert A.attention(q, k, v, "decode", out=out, enable_gqa=enable_gqa) is out
    (p,) = kern.launches
    g = H // Hkv
    assert p["bh"] == B * Hkv and p["q_len"] == g * Lq and p["kv_len"] == S
    assert p["q"].shape == (B, Hkv, g * Lq, D) and p["q"].data_ptr() == q.data_ptr()  # a view: no copy
    assert p["o"].data_ptr() == out.data_ptr()


@pytest.mark.parametrize("lkv", [1, 5, 127, 129, 200, 4095])
def test_decode_takes_any_kv_length(kern, lkv):
    q, k, v = randn(B, H, 1, D), randn(B, H, lkv, D), randn(B, H, lkv, D)
    A.attention(q, k, v, "decode", out=empty(*q.shape), schedule="uniform")
    (p,) = kern.launches
    assert p["kv_len"] == lkv and 1 <= p["splits"] <= A.kv_blocks(lkv)
    A.attention(q, k, v, "decode", out=empty(*q.shape), splits=A.kv_blocks(lkv))  # one split a block, the tail's too
    with pytest.raises(A.LaunchError) as e:
        A.attention(q, k, v, "decode", out=empty(*q.shape), splits=A.kv_blocks(lkv) + 1)
    assert e.value.code == "R-PARAM"


def paged(b=B, hkv=2, ps=16, pages=40, max_pages=9, d=D):
    """A paged cache (HND) and its block table, seq lengths."""
    k, v = randn(pages, hkv, ps, d), randn(pages, hkv, ps, d)
    table = gpu(torch.randint(0, pages, (b, max_pages), dtype=torch.int32))
    lens = gpu(torch.full((b,), 5, dtype=torch.int32))
    return k, v, table, lens


@pytest.mark.parametrize("H, hkv, Lq, ps", [(2, 2, 1, 16), (8, 2, 1, 32), (8, 2, 4, 64), (16, 1, 1, 128)])
def test_paged_decode_launches_the_paged_kernel(kern, H, hkv, Lq, ps):
    k, v, table, lens = paged(hkv=hkv, ps=ps)
    q = randn(B, H, Lq, D)
    out = empty(*q.shape)
    assert A.attention(q, k, v, "decode", block_table=table, seq_lens=lens, out=out) is out
    (p,) = kern.launches
    g = H // hkv
    assert kern.loads[-1][2].get("paged") is True
    assert p["bh"] == B * hkv and p["q_len"] == g * Lq and p["kv_len"] == 9 * ps and p["aux"] == "paged aux"
    assert p["pages"] is table and p["max_pages"] == 9 and p["kv_heads"] == hkv and p["page_size"] == ps
    assert p["pool_rows"] == 40 * hkv * ps and 1 <= p["splits"] <= A.kv_blocks(9 * ps) and p["kv_group"] == 1


@pytest.mark.parametrize("H, hkv, Lq, ps", [(2, 2, 1, 16), (8, 2, 100, 32), (32, 8, 129, 64), (4, 1, 300, 128)])
def test_paged_chunked_prefill_launches_the_paged_prefill_kernel(kern, H, hkv, Lq, ps):
    k, v, table, lens = paged(hkv=hkv, ps=ps)
    q = randn(B, H, Lq, D)
    out = empty(*q.shape)
    assert A.attention(q, k, v, "causal", block_table=table, seq_lens=lens, out=out) is out
    (p,) = kern.launches
    assert kern.loads[-1][0] == "causal" and kern.loads[-1][2].get("paged") is True
    assert p["bh"] == B * H and p["q_len"] == Lq and p["kv_group"] == H // hkv and p["kv_len"] == 9 * ps
    assert p["q"] is q and "splits" not in p and p["pages"] is table and p["kv_heads"] == hkv


def _paged_cases():
    k, v, table, lens = paged()
    big = torch.empty(40 * 2 * 16 * D, dtype=BF16)
    pool = gpu(big.view(40, 2, 16, D))
    return [
        ("paged for sliding", dict(variant="sliding", window=100, block_table=table, seq_lens=lens), "R-PARAM"),
        ("paged for full", dict(variant="full", block_table=table, seq_lens=lens), "R-PARAM"),
        ("paged without seq_lens", dict(seq_lens=None), "R-PARAM"),
        ("paged without block_table", dict(block_table=None), "R-PARAM"),
        ("paged streamk", dict(schedule="streamk"), "R-PARAM"),
        ("page size 8", dict(k=randn(40, 2, 8, D), v=randn(40, 2, 8, D)), "R-SHAPE"),
        ("page size 256", dict(k=randn(4, 2, 256, D), v=randn(4, 2, 256, D)), "R-SHAPE"),
        ("k and v pools differ", dict(v=randn(41, 2, 16, D)), "R-SHAPE"),
        ("pool head dim", dict(k=randn(40, 2, 16, 64), v=randn(40, 2, 16, 64)), "R-SHAPE"),
        ("table int64", dict(block_table=gpu(table.cpu().long())), "R-DTYPE"),
        ("table 1-d", dict(block_table=gpu(table.cpu().flatten())), "R-SHAPE"),
        ("table batch", dict(block_table=gpu(torch.zeros(2, 9, dtype=torch.int32))), "R-SHAPE"),
        ("table cpu", dict(block_table=torch.zeros(B, 9, dtype=torch.int32)), "R-DEVICE"),
        ("table empty", dict(block_table=gpu(torch.zeros(1, 0, dtype=torch.int32))), "R-SHAPE"),
        ("table list", dict(block_table=[[0]]), "R-PARAM"),
        ("lens shape", dict(seq_lens=gpu(torch.ones(2, dtype=torch.int32))), "R-SHAPE"),
        ("lens float", dict(seq_lens=gpu(torch.ones(1))), "R-DTYPE"),
        ("lens cuda:1", dict(seq_lens=gpu(torch.ones(1, dtype=torch.int32), 1)), "R-DEVICE"),
        ("paged gqa heads", dict(q=randn(B, 3, 1, D)), "R-SHAPE"),
        ("paged 17 rows", dict(q=randn(B, 2, 17, D)), "R-SHAPE"),
        ("paged splits past the table", dict(splits=A.kv_blocks(9 * 16) + 1), "R-PARAM"),
        ("paged out overlaps the k pool", dict(k=pool, out=gpu(big[:2 * D].view(B, 2, 1, D))), "R-LAYOUT"),
    ]


PAGED_CASES = _paged_cases()


@pytest.mark.parametrize("name, change, code", PAGED_CASES, ids=[c[0] for c in PAGED_CASES])
def test_bad_paged_input_is_refused_before_loading(kern, name, change, code):
    k, v, table, lens = paged()
    args = {"q": randn(B, 2, 1, D), "k": k, "v": v, "variant": "decode", "block_table": table, "seq_lens": lens}
    args.update(change)
    if change.get("variant") in ("sliding", "full"):
        args["q"] = randn(B, 2, 16, D)
    e = refused(A.attention, args.pop("q"), args.pop("k"), args.pop("v"), args.pop("variant"), **args)
    assert e.code == code, f"{name}: {e.code}: {e}"
    assert not kern.launches and not kern.loads


def test_paged_reference_gathers_each_sequence():
    g = torch.Generator().manual_seed(7)
    pages, hkv, ps, d = 12, 2, 16, 64
    kc, vc = torch.randn(pages, hkv, ps, d, generator=g), torch.randn(pages, hkv, ps, d, generator=g)
    table = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 11]], dtype=torch.int32)
    lens = torch.tensor([37, 64], dtype=torch.int32)
    q = torch.randn(2, 4, 1, d, generator=g)
    ref = A.paged_reference(q, kc, vc, table, lens)
    k0 = torch.cat([kc[p] for p in (3, 7, 1)], dim=1)[:, :37]  # [hkv, 37, d]
    v0 = torch.cat([vc[p] for p in (3, 7, 1)], dim=1)[:, :37]
    want = A.reference(q[:1], k0[None], v0[None], "full")
    assert torch.allclose(ref[:1], want, atol=1e-6)


@pytest.mark.parametrize("variant", A.PREFILL)
@pytest.mark.parametrize("H, Hkv", [(4, 2), (8, 1), (32, 8)])
def test_grouped_query_prefill_reads_kv_head_of_its_group(kern, variant, H, Hkv):
    q, k, v = randn(B, H, S, D), randn(B, Hkv, S, D), randn(B, Hkv, S, D)
    kw = good_kwargs(variant)
    if variant == "block_sparse":
        kw["block_mask"] = mask(h=H)
    A.attention(q, k, v, variant, out=empty(*q.shape), **kw)
    (p,) = kern.launches
    assert p["bh"] == B * H and p["kv_group"] == H // Hkv and p["q"] is q and p["k"] is k


@pytest.mark.parametrize("variant, lq, lkv", [("full", 100, 300), ("full", 1, 129), ("causal", 200, 200),
                                             ("sliding", 1000, 1000), ("softcap", 1, 1), ("alibi", 257, 257)])
def test_prefill_takes_any_length(kern, variant, lq, lkv):
    q, k, v = randn(B, H, lq, D), randn(B, H, lkv, D), randn(B, H, lkv, D)
    A.attention(q, k, v, variant, out=empty(*q.shape), **good_kwargs(variant))
    (p,) = kern.launches
    assert p["q_len"] == lq and p["kv_len"] == lkv


def test_reference_repeats_each_kv_head_over_its_group():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, h, L, 64, generator=g) for h, L in ((8, 3), (2, 256), (2, 256)))
    ref = A.reference(q, k, v, "full")
    want = A.reference(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), "full")
    assert torch.equal(ref, want)
    s = torch.einsum("qd,kd->qk", q[1, 5].double(), k[1, 1].double()) / 8
    assert torch.allclose(ref[1, 5].double(), torch.softmax(s, -1) @ v[1, 1].double(), atol=1e-5)


def test_decode_schedules(kern):
    """No schedule: uniform splits while the heads are fewer than the SMs, stream-K (attn_combine's
    slot stride as `splits`) once they fill them, whatever B*H; either one when asked for."""
    def launch(h, **kw):
        q, k, v = randn(1, h, 1, D), randn(1, h, S, D), randn(1, h, S, D)
        A.attention(q, k, v, "decode", out=empty(1, h, 1, D), **kw)
        return kern.launches[-1]["splits"], kern.loads[-1][2]["uniform"]
    assert launch(H) == (A.default_splits(H, S, 132), True)
    assert launch(132) == (A.streamk_stride(132, S, 132), False)
    assert launch(132, schedule="uniform") == (A.default_splits(132, S, 132), True)
    assert launch(132, splits=2) == (2, True)
    assert launch(H, schedule="streamk") == (A.streamk_stride(H, S, 132), False)
    q, k = huge(2, 32768, 1, D), huge(2, 32768, 128, D)  # B*H > 65535: stream-K's grid is one-dimensional
    assert A.check_call(q, k, k, "decode")["B"] * 32768 == 65536  # the checks pass (meta tensors: no launch)


@pytest.mark.parametrize("bh, kv_len, splits", [
    (32, 4096, 4), (32, 131072, 4), (1, 256, 2), (200, 8192, 2), (1024, 8192, 2), (512, 16384, 1),
    (256, 32768, 1), (2048, 4096, 1), (132, 128, 1)])
def test_default_splits_fill_one_wave_or_give_mid_length_heads_two(bh, kv_len, splits):
    """One wave while the heads are fewer than the SMs; at several waves, two splits of heads of 64..127 blocks."""
    assert A.default_splits(bh, kv_len, 132) == splits


def test_numpy_numbers_are_taken(kern):
    q, k, v = qkv()
    A.attention(q, k, v, "sliding", window=np.int64(100), scale=np.float32(0.5), out=empty(*q.shape))
    A.attention(q, k, v, "softcap", softcap=np.float64(2.0), out=empty(*q.shape))
    A.attention(randn(B, H, 1, D), k, v, "decode", splits=np.int32(2), out=empty(B, H, 1, D))
    assert kern.launches[0]["scale"] == 0.5 and kern.launches[2]["splits"] == 2


def _cases():
    t = torch.randn(B, H, S, D).to(BF16)
    big = torch.empty(2 * B * H * S * D, dtype=BF16)
    shared = gpu(big[: B * H * S * D].view(B, H, S, D))
    half = gpu(big[B * H * S * D // 2: B * H * S * D * 3 // 2].view(B, H, S, D))
    grad = gpu(torch.randn(B, H, S, D).to(BF16).requires_grad_())
    cases = [
        # variant
        ("variant unknown", dict(variant="nope"), "R-PARAM"),
        ("variant list", dict(variant=["full"]), "R-PARAM"),
        ("variant array", dict(variant=np.array(["full", "causal"])), "R-PARAM"),
        ("variant None", dict(variant=None), "R-PARAM"),
        # tensor kinds
        ("q list", dict(q=[[1.0]]), "R-PARAM"),
        ("q numpy", dict(q=np.zeros((B, H, S, D), np.float32)), "R-PARAM"),
        ("q None", dict(q=None), "R-PARAM"),
        ("q cpu", dict(q=t), "R-DEVICE"),
        ("k cpu", dict(k=t), "R-DEVICE"),
        ("v cuda:1", dict(v=randn(B, H, S, D, index=1)), "R-DEVICE"),
        ("q fp32", dict(q=randn(B, H, S, D, dtype=torch.float32)), "R-DTYPE"),
        ("q fp16", dict(q=randn(B, H, S, D, dtype=torch.float16)), "R-DTYPE"),
        ("q 3-d", dict(q=randn(H, S, D)), "R-SHAPE"),
        ("q B = 0", dict(q=randn(0, H, S, D), k=randn(0, H, S, D), v=randn(0, H, S, D)), "R-SHAPE"),
        ("q H = 0", dict(q=randn(B, 0, S, D)), "R-SHAPE"),
        ("k S = 0", dict(variant="full", k=randn(B, H, 0, D), v=randn(B, H, 0, D)), "R-SHAPE"),
        ("q transposed", dict(q=gpu(t.transpose(2, 3).contiguous().transpose(2, 3))), "R-LAYOUT"),
        ("q misaligned", dict(q=misaligned(B, H, S, D)), "R-LAYOUT"),
        ("q requires grad", dict(q=grad), "R-PARAM"),
        ("q negated view", dict(q=gpu(torch._neg_view(t))), "R-LAYOUT"),
        ("d = 96", dict(q=randn(B, H, S, 96), k=randn(B, H, S, 96), v=randn(B, H, S, 96)), "R-SHAPE"),
        ("k heads do not divide", dict(q=randn(B, 3, S, D), k=randn(B, 2, S, D), v=randn(B, 2, S, D)), "R-SHAPE"),
        ("v != k", dict(variant="full", v=randn(B, H, 2 * S, D)), "R-SHAPE"),
        ("Lq % 128 document", dict(variant="document", q=randn(B, H, 200, D), k=randn(B, H, 200, D),
                                   v=randn(B, H, 200, D), doc_ids=doc_ids(s=200)), "R-SHAPE"),
        ("Lkv % 128 block_sparse", dict(variant="block_sparse", q=randn(B, H, 200, D), k=randn(B, H, 200, D),
                                        v=randn(B, H, 200, D), block_mask=mask()), "R-SHAPE"),
        ("causal Lq != Lkv", dict(k=randn(B, H, 2 * S, D), v=randn(B, H, 2 * S, D)), "R-SHAPE"),
        ("decode 17 rows", dict(variant="decode", q=randn(B, H, 17, D)), "R-SHAPE"),
        # grouped-query attention
        ("gqa heads do not divide", dict(variant="decode", q=randn(B, 4, 1, D), k=randn(B, 3, S, D),
                                         v=randn(B, 3, S, D)), "R-SHAPE"),
        ("gqa more kv heads", dict(variant="decode", q=randn(B, 2, 1, D), k=randn(B, 4, S, D),
                                   v=randn(B, 4, S, D)), "R-SHAPE"),
        ("gqa 32 rows a kv head", dict(variant="decode", q=randn(B, 16, 2, D), k=randn(B, 1, S, D),
                                       v=randn(B, 1, S, D)), "R-SHAPE"),
        ("gqa with enable_gqa=False", dict(variant="decode", q=randn(B, 4, 1, D), k=randn(B, 2, S, D),
                                           v=randn(B, 2, S, D), enable_gqa=False), "R-SHAPE"),
        ("gqa prefill, enable_gqa=False", dict(variant="full", q=randn(B, 4, S, D), k=randn(B, 2, S, D),
                                               v=randn(B, 2, S, D), enable_gqa=False), "R-SHAPE"),
        ("gqa k and v heads differ", dict(variant="decode", q=randn(B, 4, 1, D), k=randn(B, 2, S, D),
                                          v=randn(B, 1, S, D)), "R-SHAPE"),
        ("enable_gqa 1", dict(variant="decode", q=randn(B, H, 1, D), enable_gqa=1), "R-PARAM"),
        ("enable_gqa 'yes'", dict(variant="decode", q=randn(B, H, 1, D), enable_gqa="yes"), "R-PARAM"),
        ("rows > 2^31", dict(variant="full", q=huge(64, 64, 2**19, D), k=huge(64, 64, 2**19, D),
                             v=huge(64, 64, 2**19, D)), "R-SHAPE"),
        ("uniform decode B*H > 65535", dict(variant="decode", q=huge(2, 32768, 1, D), k=huge(2, 32768, 128, D),
                                            v=huge(2, 32768, 128, D), schedule="uniform"), "R-SHAPE"),
        ("decode 2^24 blocks", dict(variant="decode", q=huge(2**17, 128, 1, D), k=huge(2**17, 128, 1, D),
                                    v=huge(2**17, 128, 1, D)), "R-SHAPE"),
        ("decode splits, B*H > 65535", dict(variant="decode", q=huge(2, 32768, 1, D), k=huge(2, 32768, 128, D),
                                            v=huge(2, 32768, 128, D), splits=1), "R-SHAPE"),
        ("document B*H > 65535", dict(variant="document", q=huge(2, 32768, 128, D), k=huge(2, 32768, 128, D),
                                      v=huge(2, 32768, 128, D), doc_ids=gpu(torch.zeros(2, 128, dtype=torch.int32))),
         "R-SHAPE"),
        # keyword arguments the variant does not read
        ("window for causal", dict(variant="causal", window=100), "R-PARAM"),
        ("block_mask for full", dict(variant="full", block_mask=mask()), "R-PARAM"),
        ("doc_ids for causal", dict(variant="causal", doc_ids=doc_ids()), "R-PARAM"),
        ("softcap for alibi", dict(variant="alibi", softcap=30.0), "R-PARAM"),
        ("slopes for causal", dict(variant="causal", slopes=[1.0, 1.0]), "R-PARAM"),
        ("splits for full", dict(variant="full", splits=2), "R-PARAM"),
        ("splits = 0 for full", dict(variant="full", splits=0), "R-PARAM"),
        ("schedule for causal", dict(variant="causal", schedule="streamk"), "R-PARAM"),
        ("streamk with splits", dict(variant="decode", q=randn(B, H, 1, D), schedule="streamk", splits=2), "R-PARAM"),
        ("window = 0 for sliding's neighbour", dict(variant="softcap", softcap=1.0, window=0), "R-PARAM"),
        # out
        ("out is q", dict(out="q"), "R-LAYOUT"),
        ("out is k", dict(out="k"), "R-LAYOUT"),
        ("out overlaps v", dict(v=shared, out=half), "R-LAYOUT"),
        ("out shape", dict(out=empty(B, H, S, 64)), "R-SHAPE"),
        ("out fp32", dict(out=empty(B, H, S, D, dtype=torch.float32)), "R-DTYPE"),
        ("out cpu", dict(out=torch.empty(B, H, S, D, dtype=BF16)), "R-DEVICE"),
        ("out cuda:1", dict(out=randn(B, H, S, D, index=1)), "R-DEVICE"),
        ("out list", dict(out=[0.0]), "R-PARAM"),
        ("out requires grad", dict(out=gpu(torch.empty(B, H, S, D, dtype=BF16).requires_grad_())), "R-PARAM"),
        ("out misaligned", dict(out=misaligned(B, H, S, D)), "R-LAYOUT"),
        # other arguments
        ("kernel_dir int", dict(kernel_dir=5), "R-PARAM"),
        ("kernel_dir empty", dict(kernel_dir=""), "R-PARAM"),
        ("control 1", dict(control=1), "R-PARAM"),
        ("control 'yes'", dict(control="yes"), "R-PARAM"),
        ("stream float", dict(stream=1.5), "R-PARAM"),
        ("stream bool", dict(stream=True), "R-PARAM"),
        ("stream negative", dict(stream=-1), "R-PARAM"),
        ("stream str", dict(stream="s"), "R-PARAM"),
    ]
    for bad in (0, -1.0, True, np.bool_(True), float("nan"), float("inf"), -float("inf"), 1e39, 1e-40, "0.1",
                None if False else b"1", 1 + 2j, torch.tensor(0.5), [0.5], 10**400):
        cases.append((f"scale = {bad!r:.20}", dict(variant="full", scale=bad), "R-PARAM"))
        if bad is not None:
            cases.append((f"softcap = {bad!r:.20}", dict(variant="softcap", softcap=bad), "R-PARAM"))
    for bad in (None, 0, -1, 2**31, 2**40, 1.5, 100.0, True, np.bool_(True), "100", np.float64(100), torch.tensor(100)):
        cases.append((f"window = {bad!r:.20}", dict(variant="sliding", window=bad), "R-PARAM"))
    for bad in ([1.0], [1.0, float("nan")], [True, 1.0], [1e39, 1.0], [1.0, "a"], "ab", torch.ones(H),
                np.ones(H), (1.0, None)):
        cases.append((f"slopes = {bad!r:.20}", dict(variant="alibi", slopes=bad), "R-PARAM"))
    for bad in (0, -1, 3, 2**40, 1.0, True, "2", torch.tensor(1)):  # S = 256: 2 KV blocks
        cases.append((f"splits = {bad!r:.20}", dict(variant="decode", q=randn(B, H, 1, D), splits=bad), "R-PARAM"))
    for bad in ("", "Uniform", "stream-k", 0, True, b"streamk", ["streamk"], torch.tensor(1)):
        cases.append((f"schedule = {bad!r:.20}", dict(variant="decode", q=randn(B, H, 1, D), schedule=bad), "R-PARAM"))
    bm = mask()
    cases += [
        ("no block mask", dict(variant="block_sparse"), "R-PARAM"),
        ("block mask a callable", dict(variant="block_sparse", block_mask=lambda *a: True), "R-PARAM"),
        ("block mask lengths", dict(variant="block_sparse", block_mask=mask(s=512)), "R-SHAPE"),
        ("block mask heads", dict(variant="block_sparse", block_mask=mask(h=3)), "R-SHAPE"),
        ("block mask batch", dict(variant="block_sparse", block_mask=mask(b=2)), "R-SHAPE"),
        ("block mask cpu", dict(variant="block_sparse",
                                block_mask=create_block_mask(lambda b, h, q, k: k <= q, None, None, S, S, device="cpu")),
         "R-DEVICE"),
        ("block mask cuda:1", dict(variant="block_sparse", block_mask=mask(index=1)), "R-DEVICE"),
        ("block mask aux None", dict(variant="block_sparse", block_mask=BlockMask(None, 1, 1, S, S, 1.0, 0.0)),
         "R-PARAM"),
        ("block mask aux float", dict(variant="block_sparse",
                                      block_mask=BlockMask(gpu(bm.aux.float()), 1, 1, S, S, 1.0, 0.0)), "R-PARAM"),
        ("block mask sizes", dict(variant="block_sparse", block_mask=BlockMask(bm.aux, 1, 1.5, S, S, 1.0, 0.0)),
         "R-PARAM"),
        ("no doc_ids", dict(variant="document"), "R-PARAM"),
        ("doc_ids int64", dict(variant="document", doc_ids=doc_ids(dtype=torch.int64)), "R-DTYPE"),
        ("doc_ids shape", dict(variant="document", doc_ids=doc_ids(s=128)), "R-SHAPE"),
        ("doc_ids cpu", dict(variant="document", doc_ids=torch.zeros(B, S, dtype=torch.int32)), "R-DEVICE"),
        ("doc_ids cuda:1", dict(variant="document", doc_ids=gpu(torch.zeros(B, S, dtype=torch.int32), 1)), "R-DEVICE"),
        ("doc_ids list", dict(variant="document", doc_ids=[[0] * S]), "R-PARAM"),
        ("doc_ids numpy", dict(variant="document", doc_ids=np.zeros((B, S), np.int32)), "R-PARAM"),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize("name, change, code", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_loading(kern, name, change, code):
    q, k, v = qkv()
    args = {"q": q, "k": k, "v": v, "variant": "causal", **change}
    if isinstance(args.get("out"), str):
        args["out"] = args[args["out"]]  # the call's own q / k
    e = refused(A.attention, args.pop("q"), args.pop("k"), args.pop("v"), args.pop("variant"), **args)
    assert e.code == code, f"{name}: {e}"
    assert kern.loads == [] and kern.launches == []


def test_load_refuses_bad_arguments_and_wrong_kernels(tmp_path):
    for kw, code in [(dict(variant="nope"), "R-PARAM"), (dict(variant="full", device="0"), "R-DEVICE"),
                     (dict(variant="full", device=-1), "R-DEVICE"), (dict(variant="full", device=True), "R-DEVICE"),
                     (dict(variant="full", kernel_dir=3), "R-PARAM"), (dict(variant="full", control=None), "R-PARAM"),
                     (dict(variant="decode", uniform="yes"), "R-PARAM"),
                     (dict(variant="full", head_dim=96), "R-SHAPE"),
                     (dict(variant="full", head_dim=128.0), "R-SHAPE"), (dict(variant="full"), "R-MANIFEST")]:
        variant = kw.pop("variant")
        kw.setdefault("kernel_dir", tmp_path)
        assert refused(A.load, variant, **kw).code == code, kw
    (tmp_path / "attn_full.cubin").write_bytes(b"\0" * 64)  # never loaded: the manifest is read first
    e = refused(A.load, "full", kernel_dir=tmp_path)
    assert e.code == "R-MANIFEST" and "attn_full.manifest.json" in str(e)
    moe = dict.fromkeys(["x", "router_w", "w13", "w2", "out", "peers"], "ptr") | dict.fromkeys(["t", "rank", "world"],
                                                                                               "u32")
    write_manifest(tmp_path / "attn_full.manifest.json", moe, {"top_k": 8})
    assert "not a manifest of attention variant 'full'" in str(refused(A.load, "full", kernel_dir=tmp_path))
    attn = {n: ("f32" if n == "scale" else "u32" if n in ("q_len", "kv_len", "bh") else "ptr") for n in A.PARAMS}
    write_manifest(tmp_path / "attn_full.manifest.json", attn, {"head_dim": 64, "block_q": 128})
    assert "head_dim" in str(refused(A.load, "full", kernel_dir=tmp_path))  # a d = 64 build named attn_full
    e = refused(A.load, "full", kernel_dir=tmp_path, head_dim=256)  # the d = 256 build's own name
    assert e.code == "R-MANIFEST" and "attn_full_d256" in str(e), e
    (tmp_path / "attn_full_d256.cubin").write_bytes(b"\0" * 64)
    write_manifest(tmp_path / "attn_full_d256.manifest.json", attn, {"head_dim": 128, "block_q": 128})
    assert "head_dim" in str(refused(A.load, "full", kernel_dir=tmp_path, head_dim=256))  # a d = 128 build named _d256
    (tmp_path / "attn_decode.cubin").write_bytes(b"\0" * 64)
    write_manifest(tmp_path / "attn_decode.manifest.json", attn, {"head_dim": 128, "block_q": 128})
    assert "splits" in str(refused(A.load, "decode", kernel_dir=tmp_path, uniform=True))  # a prefill build named attn_decode
    (tmp_path / "attn_decode_streamk.cubin").write_bytes(b"\0" * 64)
    write_manifest(tmp_path / "attn_decode_streamk.manifest.json", attn, {"head_dim": 128, "block_q": 128})
    assert "splits" in str(refused(A.load, "decode", kernel_dir=tmp_path))  # and one named attn_decode_streamk
    write_manifest(tmp_path / "attn_full.manifest.json", attn, {"head_dim": 128, "block_q": 128})
    assert "not a CUDA cubin" in str(refused(A.load, "full", kernel_dir=tmp_path))  # the right manifest, no ELF
    (tmp_path / "attn_full.cubin").write_bytes(b"\x7fELF" + b"\0" * 14 + (62).to_bytes(2, "little") + b"\0" * 40)
    assert "not a CUDA cubin" in str(refused(A.load, "full", kernel_dir=tmp_path))  # an x86-64 ELF


def _mask_rows(aux, B, H):
    """attn_block_sparse.cu's mask_row for every (qb, bh): the count word it reads."""
    w = aux.tolist()
    QB, h, mb, mh = w[0], w[3], w[4], w[5]
    rows = []
    for bh in range(B * H):
        b, hh = (0 if mb == 1 else bh // h), (0 if mh == 1 else bh % h)
        rows += [(b * mh + hh) * QB + qb for qb in range(QB)]
    return rows


def test_block_mask_made_without_heads_indexes_its_batch_rows():
    """A mask for B = 2 made with H=None has one head row: the kernel finds the batch row as bh / H
    with H from aux word 3, which held 1 (bh / 1: rows past the mask for H > 1)."""
    bm = create_block_mask(lambda b, h, q, k: (k <= q) | (b == 1), 2, None, S, S, device="cpu")
    assert int(bm.aux[3]) == 1
    assert max(_mask_rows(bm.aux, 2, 4)) >= 2 * S // 128  # what the kernel would have read
    a = bm.aux_for(4)
    assert a is bm.aux_for(4) and int(a[3]) == 4 and bm.aux_for(1) is bm.aux and int(bm.aux[3]) == 1
    rows = _mask_rows(a, 2, 4)
    assert max(rows) < 2 * S // 128 and sorted(set(rows)) == list(range(2 * S // 128))


def test_create_block_mask_refuses_bad_arguments():
    pred = lambda b, h, q, k: k <= q  # noqa: E731
    for args, kw, code in [
        ((pred, 0, None, S, S), {}, "R-SHAPE"), ((pred, -1, None, S, S), {}, "R-SHAPE"),
        ((pred, 2.5, None, S, S), {}, "R-SHAPE"), ((pred, True, None, S, S), {}, "R-SHAPE"),
        ((pred, None, "x", S, S), {}, "R-SHAPE"), ((pred, None, None, 100, S), {}, "R-SHAPE"),
        ((pred, None, None, S, 0), {}, "R-SHAPE"), ((pred, None, None, 2**40, S), {}, "R-SHAPE"),
        ((pred, None, None, 256.0, S), {}, "R-SHAPE"), ((None, None, None, S, S), {}, "R-PARAM"),
        ((lambda b, h, q, k: 1 / 0, None, None, S, S), {}, "R-PARAM"),
        ((lambda b, h, q, k: (k <= q)[:3], None, None, S, S), {}, "R-PARAM"),
        ((lambda b, h, q, k: (k <= q).int(), None, None, S, S), {}, "R-PARAM"),
        ((lambda b: True, None, None, S, S), {}, "R-PARAM"),
        ((pred, None, None, S, S), {"device": "nope"}, "R-DEVICE"),
        ((pred, None, None, S, S), {"device": 3.5}, "R-DEVICE"),
        ((pred, None, None, S, S), {"BLOCK_SIZE": 64}, "R-SHAPE"),
        ((pred, None, None, S, S), {"chunk_rows": 0}, "R-PARAM"),
        ((pred, None, None, S, S), {"chunk_rows": 1.5}, "R-PARAM"),
    ]:
        kw = {"device": "cpu", **kw}
        assert refused(create_block_mask, *args, **kw).code == code, (args, kw)
    if not torch.cuda.is_available():
        assert refused(create_block_mask, pred, None, None, S, S).code == "R-DEVICE"  # device="cuda"
    bm = create_block_mask(pred, np.int64(1), None, np.int64(S), S, device="cpu")
    assert (bm.B, bm.Q_LEN) == (1, S)


def test_document_ids_must_not_decrease():
    ids = torch.zeros(1, S, dtype=torch.int32)
    ids[0, 10] = 1  # 0 .. 0 1 0 ..: decreasing at 11
    e = refused(document_aux, ids, 1, H, S, torch.device("cpu"), 4)
    assert e.code == "R-PARAM" and "non-decreasing" in str(e)
    ok = (torch.arange(S, dtype=torch.int32) // 100)[None]
    assert document_aux(ok, 1, H, S, torch.device("cpu"), 4).dtype == torch.int32


POOL = [None, 0, 1, -1, 100, 2, 2**31, 2**40, 1.5, 30.0, float("nan"), float("inf"), 1e39, True, False, "x", "streamk", "uniform",
        np.int64(100), np.float32(2.0), np.bool_(True), [1.0, 0.5], (0.5, 0.25), torch.tensor(2.0)]


def test_fuzz_keyword_arguments(kern):
    """Every combination the fuzzer might try: a LaunchError (no launch) or one launch whose
    variant reads exactly the keyword arguments given."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    q, k, v = qkv()
    q1 = randn(B, H, 1, D)
    extra = {"block_mask": mask(), "doc_ids": doc_ids()}
    names = ["window", "softcap", "slopes", "splits", "schedule", "scale", "block_mask", "doc_ids"]

    @settings(max_examples=500, deadline=None)
    @given(st.sampled_from(list(A.VARIANTS) + ["nope", None, 3]),
           st.dictionaries(st.sampled_from(names), st.integers(0, len(POOL))))
    def run(variant, picks):
        kw = {n: (extra[n] if n in extra and i == len(POOL) else POOL[i % len(POOL)]) for n, i in picks.items()}
        before = len(kern.launches)
        try:
            A.attention(q1 if variant == "decode" else q, k, v, variant, out=empty(*(q1 if variant == "decode" else q).shape),
                        **kw)
        except LaunchError as e:
            assert e.code.startswith("R-") and e.hint and len(kern.launches) == before
            return
        assert len(kern.launches) == before + 1
        p = kern.launches[-1]
        assert type(p["scale"]) is float and 0 < p["scale"] < 3.5e38
        given_ = {n for n, x in kw.items() if x is not None and n != "scale"}
        assert given_ <= {n for n, r in A.READS.items() if variant in r}, (variant, kw)
        if variant == "decode":  # uniform: splits per head (S = 256: 2 blocks); stream-K: its slot stride
            streamk = kw.get("schedule") == "streamk"
            assert type(p["splits"]) is int and 1 <= p["splits"] <= (A.streamk_stride(B * H, S, 132) if streamk
                                                                        else S // 128)

    from pipelink.runtime import LaunchError
    run()


def test_cp_attention_call_checks():
    import attention_cp as cp
    region = torch.empty(1 << 22, dtype=torch.uint8)
    c = cp.CpAttention.__new__(cp.CpAttention)
    c.B, c.H, c.L, c.device = 1, 2, 256, 0
    c.buf = SimpleNamespace(local=region.data_ptr(), stride=region.numel())
    q, k, v, out = randn(1, 2, 256, D), randn(1, 2, 256, D), randn(1, 2, 256, D), empty(1, 2, 256, D)
    assert c.check_call(q, k, v, out=out) == 1 / math.sqrt(D) and c.check_call(q, scale=np.float32(0.5)) == 0.5
    in_buf = gpu(region[: 2 * 256 * D * 2].view(BF16).view(1, 2, 256, D))
    for args, kw, code in [((q,), {"out": in_buf}, "R-LAYOUT"), ((in_buf, k, v), {}, "R-LAYOUT"),
                           ((q,), {"out": q}, "R-LAYOUT"), ((q, k), {"out": k}, "R-LAYOUT"),
                           ((q,), {"scale": 0}, "R-PARAM"), ((q,), {"scale": True}, "R-PARAM"),
                           ((q,), {"scale": float("nan")}, "R-PARAM"), ((q,), {"stream": 2.0}, "R-PARAM"),
                           ((randn(1, 2, 128, D),), {}, "R-SHAPE"), ((torch.zeros(1, 2, 256, D, dtype=BF16),), {}, "R-DEVICE"),
                           ((q, [0]), {}, "R-PARAM"), ((q, randn(1, 2, 256, D, dtype=torch.float32)), {}, "R-DTYPE")]:
        assert refused(c.check_call, *args, **kw).code == code, (args, kw)
    c.check_call(in_buf)  # q may live in the buffer when nothing is copied into it


def test_variant_aux_builds_what_the_checks_passed():
    """_variant_aux (after load, before the launch) on CPU tensors: the checked values reach the
    aux words unchanged (numpy numbers too), and it refuses what check_call refuses."""
    q = torch.empty(2, H, S, D, dtype=BF16)
    A._aux_cache.clear()
    aux = lambda variant, **kw: A._variant_aux(variant, q, 2, H, S, **{  # noqa: E731
        "block_mask": None, "window": None, "doc_ids": None, "softcap": None, **kw}).tolist()
    assert aux("sliding", window=np.int64(300))[0] == 300
    assert aux("softcap", softcap=np.float32(30.0))[0] == int(torch.tensor([30.0]).view(torch.int32))
    words = aux("alibi", slopes=[0.5, np.float64(0.25)])
    assert words[0] == H and torch.tensor(words[1:3], dtype=torch.int32).view(torch.float32).tolist() == [0.5, 0.25]
    bm = create_block_mask(lambda b, h, q_, k: k <= q_, 2, None, S, S, device="cpu")
    assert aux("block_sparse", block_mask=bm)[3] == H
    ids = (torch.arange(S, dtype=torch.int32) // 50).repeat(2, 1)
    assert aux("document", doc_ids=ids)[:3] == [S, H, S // 128]
    assert aux("full") == [S, 0, 0, 0]  # {kv_len}: the tail block's mask
    assert aux("causal", grid=3)[:6] == [2, 6, 0, 2, 5, 8]  # the host schedule: 8 tiles on 3 CTAs
    assert aux("softcap", softcap=30.0, grid=3)[1:7] == [3, 7, 0, 2, 5, 8]  # after the cap word
    assert aux("alibi", grid=3)[1 + H:7 + H] == [3 + H, 7 + H, 0, 2, 5, 8]  # after H and the slopes
    for variant, kw in [("sliding", {"window": 2**31}), ("softcap", {"softcap": True}), ("alibi", {"slopes": [1.0]}),
                        ("document", {"doc_ids": ids.long()}), ("block_sparse", {"block_mask": "m"})]:
        refused(aux, variant, **kw)


def test_built_kernels_pass_the_manifest_checks(monkeypatch):
    """Every kernel Bazel built passes load()'s manifest and cubin checks (stops before the GPU)."""
    bin_ = Path(A.kernel_dir_default())
    if not (bin_ / "attn_full.manifest.json").is_file():
        pytest.skip(f"{bin_} is not built")
    monkeypatch.setattr(A, "Kernel", SimpleNamespace(load=lambda c, m, d: ("loaded", c.name)))
    A._cache.clear()
    for variant in A.VARIANTS:
        for d in A.HEAD_DIMS:
            for control in (False, True):
                assert A.load(variant, head_dim=d, control=control)[0] == "loaded"
    A._cache.clear()


def test_aux_cache_is_bounded_but_keeps_what_graphs_captured(monkeypatch):
    """A loop with a new window (or doc_ids) every step keeps at most AUX_CACHE_LIMIT aux
    buffers alive, least recently used out; one fetched while a CUDA graph is being captured
    stays (the graph replays its address), and so does a recently used one."""
    q = torch.empty(1, H, S, D, dtype=BF16)
    A._aux_cache.clear()
    aux = lambda w: A._variant_aux("sliding", q, 1, H, S, block_mask=None, window=w, doc_ids=None,  # noqa: E731
                                   softcap=None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    captured = aux(7)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    first = aux(8)
    for w in range(100, 100 + 3 * A.AUX_CACHE_LIMIT):
        aux(w)
        assert len(A._aux_cache) <= A.AUX_CACHE_LIMIT + 1  # + the pinned one
    assert aux(7) is captured  # pinned: the same buffer, never rebuilt
    assert aux(8) is not first  # evicted long ago: rebuilt
    recent = aux(100 + 3 * A.AUX_CACHE_LIMIT - 1)
    assert aux(100 + 3 * A.AUX_CACHE_LIMIT - 1) is recent
    A._aux_cache.clear()


@pytest.mark.parametrize("kernel", ["attn_causal", "attn_full", "attn_alibi_d64"])
@pytest.mark.parametrize("q_len, bh, want", [(200, 3, 6), (1, 5, 5), (128, 1, 1), (4000, 32, 132)])
def test_prefill_grid_counts_a_partial_q_block(kernel, q_len, bh, want):
    """The built manifest's persistent grid covers ceil(q_len / 128) Q blocks: the host's tile
    schedule is made for that many CTAs (attention.py), and q_len < 128 must still launch."""
    from pipelink.runtime.launch_plan import grid_dims
    from pipelink.runtime.manifest import Manifest
    path = ROOT / "bazel-bin" / "kernels" / "attention" / f"{kernel}.manifest.json"
    if not path.is_file():
        pytest.skip(f"{path} not built")
    m = Manifest.from_file(path)
    values = {"q_len": q_len, "kv_len": q_len, "bh": bh, "num_sms": 132, "resident_ctas": 132}
    assert grid_dims(m, values)[0] == want


@pytest.mark.parametrize("kv_len, bh, want", [(4096, 1, 32), (4097, 1, 33), (5, 3, 3), (131072, 64, 132)])
def test_streamk_decode_grid_counts_a_partial_kv_block(kv_len, bh, want):
    """attn_decode_streamk's one-wave grid over ceil(kv_len / 128) blocks a head (whole-block
    lengths included: an exact `/` in the grid refused every launch)."""
    from pipelink.runtime.launch_plan import grid_dims
    from pipelink.runtime.manifest import Manifest
    path = ROOT / "bazel-bin" / "kernels" / "attention" / "attn_decode_streamk.manifest.json"
    if not path.is_file():
        pytest.skip(f"{path} not built")
    values = {"q_len": 1, "kv_len": kv_len, "bh": bh, "num_sms": 132, "resident_ctas": 132, "splits": 4}
    assert grid_dims(Manifest.from_file(path), values)[0] == want


class _PlanningKernel:
    """The built kernel's manifest planning a launch on the CPU (grid, host providers, workspaces,
    packed parameters): what Kernel.launch_with does before the CUDA call."""

    def __init__(self, manifest):
        from pipelink.runtime.manifest import Manifest
        self.manifest, self.num_sms, self.plans = Manifest.from_file(manifest), 132, []

    def launch_with(self, params, *, grid=None, stream=None, workspaces=None):
        from pipelink.runtime.launch_plan import plan_launch

        class Host:
            def require(self, cond, msg):
                assert cond, msg

            def tensor_map_2d(self, ptr, dtype, **kw):
                return bytes(128)
        values = {k: (v.data_ptr() if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
        self.plans.append(plan_launch(self.manifest, values, builtins={"num_sms": 132, "resident_ctas": 132},
                                      host=Host(), workspace=lambda w, n: 0x100000))


@pytest.fixture
def planning(monkeypatch):
    """attention.load -> the built manifest of the kernel it names, planning each launch."""
    built = ROOT / "bazel-bin" / "kernels" / "attention"
    if not (built / "attn_decode_paged.manifest.json").is_file():
        pytest.skip("bazel-bin/kernels/attention is not built")
    kernels = []

    def load(variant, device=0, *, kernel_dir=None, control=False, head_dim=128, uniform=False, paged=False):
        kernel = (f"{'decode' if variant == 'decode' else 'prefill'}_paged" if paged else
                  "decode_streamk" if variant == "decode" and not uniform else variant)
        k = _PlanningKernel(built / f"attn_{kernel}{'' if head_dim == 128 else f'_d{head_dim}'}.manifest.json")
        kernels.append(k)
        return k
    monkeypatch.setattr(A, "load", load)
    monkeypatch.setattr(A, "_words_tensor", lambda words, device: gpu(torch.tensor(
        list(words) + [0] * (4 - len(words) % 4), dtype=torch.int32)))
    monkeypatch.setattr(A, "_paged_aux", lambda q, heads, q_len, lens: gpu(torch.cat((
        torch.tensor([heads, q_len], dtype=torch.int32), lens.cpu()))))
    monkeypatch.setattr(A, "_l2_bytes", lambda q: 60 << 20)
    A._aux_cache.clear()
    return kernels


@pytest.mark.parametrize("variant, H, Hkv, lq, lkv, d", [
    ("full", 4, 4, 100, 300, 128), ("full", 4, 2, 1, 129, 64), ("causal", 32, 8, 200, 200, 128),
    ("sliding", 2, 1, 1000, 1000, 128), ("softcap", 2, 2, 1, 1, 64), ("alibi", 4, 2, 257, 257, 128),
    ("block_sparse", 2, 2, 256, 256, 128), ("decode", 32, 8, 1, 4096, 128), ("decode", 32, 8, 1, 4097, 128),
    ("decode", 8, 8, 3, 5, 64), ("decode", 16, 1, 1, 131072, 128)])
def test_entry_launches_plan_against_the_built_manifests(planning, variant, H, Hkv, lq, lkv, d):
    """Every launch the entry makes is one the built kernel's manifest plans on the CPU (grid
    expressions, host providers, workspaces): a grid expression that refuses a legal shape is
    found here, not on the GPU."""
    q, k, v = randn(B, H, lq, d), randn(B, Hkv, lkv, d), randn(B, Hkv, lkv, d)
    kw = good_kwargs(variant)
    if variant == "block_sparse":
        kw["block_mask"] = mask(h=H)
    A.attention(q, k, v, variant, out=empty(*q.shape), **kw)
    if variant == "decode":
        A.attention(q, k, v, variant, out=empty(*q.shape), schedule="uniform")
    plans = [p for kern in planning for p in kern.plans]
    assert plans and all(p.grid[0] >= 1 for p in plans)


@pytest.mark.parametrize("ps", [16, 32, 64, 128])
def test_paged_launch_plans_against_the_built_manifest(planning, ps):
    k, v, table, lens = paged(hkv=2, ps=ps)
    A.attention(randn(B, 8, 2, D), k, v, "decode", block_table=table, seq_lens=lens, out=empty(B, 8, 2, D))
    A.attention(randn(B, 8, 200, D), k, v, "causal", block_table=table, seq_lens=lens, out=empty(B, 8, 200, D))
    decode, prefill = planning
    (plan,) = decode.plans
    assert plan.grid[1] == B * 2 and plan.grid[0] >= 1
    (plan,) = prefill.plans
    assert plan.grid == (2 * B * 8, 1, 1)  # ceil(200 / 128) Q blocks x 8 heads


@pytest.mark.parametrize("via", ["kernel_dir", "env"])
@pytest.mark.parametrize("kind", ["long", "loop", "file"])
def test_load_refuses_an_unprobeable_kernel_dir(tmp_path, monkeypatch, kind, via):  # long: was Path.is_file's OSError
    d = unprobeable_dir(tmp_path, kind)
    monkeypatch.setenv("PIPELINK_ATTENTION_DIR", str(d))
    e = refused(A.load, "causal", **({"kernel_dir": d} if via == "kernel_dir" else {}))
    assert e.code == "R-MANIFEST" and "no kernel at" in str(e)
