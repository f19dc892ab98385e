"""attention(...) over a ragged batch (cu_seqlens_q / cu_seqlens_k, FlashAttention's varlen
layout), on the CPU: the launches the entry makes, the aux it builds, the refusals, and every
launch planned against the built attn_varlen_* manifests."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import CountingKernel, empty, gpu, misaligned, randn, refused  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "attention"))
import attention as A  # noqa: E402
import attention_varlen as V  # noqa: E402

D = 128
LENS = [300, 1, 129, 0, 1000]


def cu(lens, index=0):
    return gpu(torch.tensor([0] + list(lens), dtype=torch.int64).cumsum(0).to(torch.int32), index)


def ragged(lens_q=LENS, lens_k=None, H=4, Hkv=2, d=D):
    lens_k = lens_q if lens_k is None else lens_k
    return (randn(sum(lens_q), H, d), randn(sum(lens_k), Hkv, d), randn(sum(lens_k), Hkv, d), cu(lens_q),
            cu(lens_k))


GOOD = {"full": {}, "causal": {}, "sliding": {"window": 100}, "softcap": {"softcap": 30.0}, "alibi": {}}


@pytest.fixture
def kern(monkeypatch):
    k = CountingKernel(V.VARLEN_PARAMS)
    loads = []
    monkeypatch.setattr(A, "load", lambda variant, device=0, **kw: loads.append((variant, device, kw)) or k)
    monkeypatch.setattr(A, "_words_tensor", lambda words, device: gpu(torch.tensor(
        list(words) + [0] * (4 - len(words) % 4), dtype=torch.int32)))
    A._aux_cache.clear()
    k.loads = loads
    return k


@pytest.mark.parametrize("variant", V.VARLEN_VARIANTS)
@pytest.mark.parametrize("H, Hkv, d", [(4, 4, 128), (4, 2, 128), (8, 1, 64)])
def test_ragged_call_launches_its_varlen_kernel_once(kern, variant, H, Hkv, d):
    q, k, v, cq, ck = ragged(H=H, Hkv=Hkv, d=d)
    out = empty(*q.shape)
    assert A.attention(q, k, v, variant, cu_seqlens_q=cq, cu_seqlens_k=ck, out=out, **GOOD[variant]) is out
    (p,) = kern.launches
    assert kern.loads[-1][2].get("varlen") is True and kern.loads[-1][2]["head_dim"] == d
    assert p["bh"] == len(LENS) * H and p["heads"] == H and p["kv_group"] == H // Hkv
    assert p["tokens_q"] == sum(LENS) and p["tokens_k"] == sum(LENS) and p["q_len"] >= V.MIN_DUO
    assert p["q"] is q and p["o"] is out and set(p) == V.VARLEN_PARAMS


def test_aux_holds_header_offsets_and_q_block_prefix_sums(kern):
    lens_k = [310, 5, 200, 7, 1000]
    q, k, v, cq, ck = ragged(lens_k=lens_k, H=4, Hkv=4)
    A.attention(q, k, v, "alibi", cu_seqlens_q=cq, cu_seqlens_k=ck, out=empty(*q.shape), slopes=[1.0, 0.5, 0.25, 2.0])
    (p,) = kern.launches
    aux = p["aux"].tolist()
    B, H = len(LENS), 4
    base = V.HEADER + H
    assert aux[:4] == [H, B, 0, base]
    assert torch.tensor(aux[4:base], dtype=torch.int32).view(torch.float32).tolist() == [1.0, 0.5, 0.25, 2.0]
    assert aux[base:base + B + 1] == cq.tolist() and aux[base + B + 1:base + 2 * B + 2] == ck.tolist()
    blocks = [0]
    for n in LENS:
        blocks.append(blocks[-1] + -(-n // 128))
    assert aux[base + 2 * B + 2:] == blocks  # the tile count cb[B] = 3 + 1 + 2 + 0 + 8
    assert p["cu_q"].tolist() == cq.tolist() and p["cu_k"].tolist() == ck.tolist()


def test_header_words_carry_window_and_softcap():
    a = {"H": 2, "B": 3}
    assert V.header_words("sliding", a, {"window": 77}) == [2, 3, 77, V.HEADER]
    cap = V.header_words("softcap", a, {"softcap": 2.0})[2]
    assert torch.tensor([cap], dtype=torch.int32).view(torch.float32).item() == 2.0


def test_max_seqlen_sizes_only_the_grid(kern):
    q, k, v, cq, ck = ragged()
    A.attention(q, k, v, "causal", cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=1000, out=empty(*q.shape))
    A.attention(q, k, v, "causal", cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=1, out=empty(*q.shape))
    big, small = kern.launches
    assert big["q_len"] == 1000 and small["q_len"] == V.MIN_DUO  # both warpgroups compute whatever it says


def _cases():
    q, k, v, cq, ck = ragged()
    good = dict(q=q, k=k, v=v, variant="causal", cu_seqlens_q=cq, cu_seqlens_k=ck)
    return [
        ("document has no ragged build", {"variant": "document"}, "R-PARAM"),
        ("decode has no ragged build", {"variant": "decode"}, "R-PARAM"),
        ("cu_seqlens_k missing", {"cu_seqlens_k": None}, "R-PARAM"),
        ("cu_seqlens_q missing", {"cu_seqlens_q": None}, "R-PARAM"),
        ("max_seqlen alone", {"cu_seqlens_q": None, "cu_seqlens_k": None, "max_seqlen_q": 5}, "R-PARAM"),
        ("max_seqlen_q 0", {"max_seqlen_q": 0}, "R-PARAM"),
        ("max_seqlen_k bool", {"max_seqlen_k": True}, "R-PARAM"),
        ("with a block table", {"block_table": gpu(torch.zeros(5, 2, dtype=torch.int32))}, "R-PARAM"),
        ("window on causal", {"window": 5}, "R-PARAM"),
        ("sliding without window", {"variant": "sliding"}, "R-PARAM"),
        ("splits", {"splits": 2}, "R-PARAM"),
        ("q 4-D", {"q": randn(1, 4, 8, D)}, "R-SHAPE"),
        ("k heads do not divide", {"k": randn(1430, 3, D), "v": randn(1430, 3, D)}, "R-SHAPE"),
        ("k and v differ", {"v": randn(1431, 2, D)}, "R-SHAPE"),
        ("d = 96", {"q": randn(1430, 4, 96), "k": randn(1430, 2, 96), "v": randn(1430, 2, 96)}, "R-SHAPE"),
        ("cu 2-D", {"cu_seqlens_q": gpu(torch.zeros(2, 3, dtype=torch.int32))}, "R-SHAPE"),
        ("cu of one offset", {"cu_seqlens_q": gpu(torch.zeros(1, dtype=torch.int32)),
                              "cu_seqlens_k": gpu(torch.zeros(1, dtype=torch.int32))}, "R-SHAPE"),
        ("cu lengths differ", {"cu_seqlens_k": cu([1, 2])}, "R-SHAPE"),
        ("cu int64", {"cu_seqlens_q": gpu(torch.zeros(6, dtype=torch.int64))}, "R-DTYPE"),
        ("q fp16", {"q": randn(1430, 4, D, dtype=torch.float16)}, "R-DTYPE"),
        ("cu on the host", {"cu_seqlens_q": torch.zeros(6, dtype=torch.int32)}, "R-DEVICE"),
        ("cu on another GPU", {"cu_seqlens_k": cu(LENS, index=1)}, "R-DEVICE"),
        ("q misaligned", {"q": misaligned(1430, 4, D)}, "R-LAYOUT"),
        ("q not contiguous", {"q": gpu(torch.randn(4, 1430, D).bfloat16().transpose(0, 1))}, "R-LAYOUT"),
        ("out aliases q", {"out": q}, "R-LAYOUT"),
        ("enable_gqa False", {"enable_gqa": False}, "R-SHAPE"),
    ], good


CASES, GOOD_CALL = _cases()


@pytest.mark.parametrize("name, change, code", CASES, ids=[c[0] for c in CASES])
def test_bad_ragged_input_is_refused_before_loading(kern, name, change, code):
    kw = {**GOOD_CALL, **change}
    if "sliding" == kw["variant"] and "window" not in change and name != "sliding without window":
        kw["window"] = 10
    e = refused(A.attention, kw.pop("q"), kw.pop("k"), kw.pop("v"), kw.pop("variant"), **kw)
    assert e.code == code, f"{name}: {e.code} {e}"
    assert not kern.loads and not kern.launches


def test_load_refuses_a_variant_without_a_ragged_build(tmp_path):
    e = refused(A.load, "document", 0, kernel_dir=tmp_path, varlen=True)
    assert e.code == "R-PARAM"
    e = refused(A.load, "causal", 0, kernel_dir=tmp_path, varlen=True)
    assert e.code == "R-MANIFEST" and "attn_varlen_causal" in str(e)


class _PlanningKernel:
    """The built manifest planning a launch on the CPU (grid, host providers, packed params)."""

    def __init__(self, manifest):
        from pipelink.runtime.manifest import Manifest
        self.manifest, self.num_sms, self.plans, self.maps = Manifest.from_file(manifest), 132, [], []

    def launch_with(self, params, *, grid=None, stream=None, workspaces=None):
        from pipelink.runtime.launch_plan import plan_launch
        maps = self.maps

        class Host:
            def require(self, cond, msg):
                assert cond, msg

            def tensor_map_2d(self, ptr, dtype, **kw):
                maps.append(kw)
                return bytes(128)
        values = {k: (v.data_ptr() if isinstance(v, torch.Tensor) else v) for k, v in params.items()}
        self.plans.append(plan_launch(self.manifest, values, builtins={"num_sms": 132, "resident_ctas": 132},
                                      host=Host(), workspace=lambda w, n: 0x100000))


@pytest.mark.parametrize("variant", V.VARLEN_VARIANTS)
@pytest.mark.parametrize("H, Hkv, d", [(32, 8, 128), (4, 4, 64)])
def test_ragged_launch_plans_against_the_built_manifest(monkeypatch, variant, H, Hkv, d):
    built = ROOT / "bazel-bin" / "kernels" / "attention"
    name = f"attn_varlen_{variant}{'' if d == 128 else f'_d{d}'}"
    if not (built / f"{name}.manifest.json").is_file():
        pytest.skip("bazel-bin/kernels/attention is not built")
    kern = _PlanningKernel(built / f"{name}.manifest.json")
    monkeypatch.setattr(A, "load", lambda *a, **kw: kern)
    monkeypatch.setattr(A, "_words_tensor", lambda words, device: gpu(torch.tensor(
        list(words) + [0] * (4 - len(words) % 4), dtype=torch.int32)))
    A._aux_cache.clear()
    q, k, v, cq, ck = ragged(H=H, Hkv=Hkv, d=d)
    A.attention(q, k, v, variant, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=1000, out=empty(*q.shape),
                **GOOD[variant])
    (plan,) = kern.plans
    assert plan.grid == (min(132, 8 * len(LENS) * H), 1, 1)  # ceil(1000 / 128) blocks x B x H, at most one wave
    q_map, k_map, v_map, o_map = kern.maps
    assert q_map["rows"] == sum(LENS) and q_map["cols"] == H * d and q_map["box_rows"] == 128
    assert k_map["cols"] == Hkv * d and v_map == k_map
    assert o_map["rows"] == sum(LENS) and o_map["cols"] == H * d and o_map["box_rows"] == 64


POOL = [None, 0, 1, -1, 100, 2**31, 2**40, 1.5, 30.0, float("nan"), True, "x", [1.0, 0.5, 0.25, 2.0], 7]


def test_fuzz_ragged_calls(kern):
    """Any mix of ragged arguments and the variants' own: a LaunchError with a code and a hint and
    no launch, or exactly one launch of the varlen kernel with the variant's own argument only."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from pipelink.runtime import LaunchError
    q, k, v, cq, ck = ragged()
    tensors = {"good_q": cq, "good_k": ck, "int64": gpu(torch.zeros(6, dtype=torch.int64)), "host": cq.clone().as_subclass(
        torch.Tensor), "short": cu([1, 2]), "2d": gpu(torch.zeros(2, 6, dtype=torch.int32)), "none": None}
    names = ["window", "softcap", "slopes", "splits", "max_seqlen_q", "max_seqlen_k", "scale", "enable_gqa"]

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from(list(A.VARIANTS) + ["nope"]), st.sampled_from(sorted(tensors)), st.sampled_from(sorted(tensors)),
           st.dictionaries(st.sampled_from(names), st.integers(0, len(POOL) - 1)))
    def run(variant, tq, tk, picks):
        kw = {n: POOL[i] for n, i in picks.items()}
        before = len(kern.launches)
        try:
            A.attention(q, k, v, variant, cu_seqlens_q=tensors[tq], cu_seqlens_k=tensors[tk], out=empty(*q.shape), **kw)
        except LaunchError as e:
            assert e.code.startswith("R-") and e.hint and len(kern.launches) == before
            return
        assert len(kern.launches) == before + 1 and variant in V.VARLEN_VARIANTS
        # offsets of the right kind and one B (fewer sequences than q's tokens is a valid call)
        assert {tq, tk} <= {"good_q", "good_k"} or tq == tk == "short", (tq, tk)
        p = kern.launches[-1]
        assert type(p["scale"]) is float and 0 < p["scale"] < 3.5e38 and p["q_len"] >= V.MIN_DUO
        given_ = {n for n, x in kw.items() if x is not None and n not in ("scale", "max_seqlen_q", "max_seqlen_k",
                                                                          "enable_gqa")}
        assert given_ <= {n for n, r in A.READS.items() if variant in r}, (variant, kw)
    run()
