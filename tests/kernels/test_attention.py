"""Attention variants (issue 10): every variant links from the same, unchanged core package
(one per head dim: attn_core for d = 128, attn_core_d64 / attn_core_d256 for the attn_<variant>_d64 /
_d256 kernels).

CPU (needs Bazel, like test_bazel_relink): builds //kernels/attention/..., reads each link
action's packages with `aquery`, and asserts that the attn_core package every variant links is
one file with one sha256 (the core is never edited or recompiled per variant); checks the
linked kernels' placement (rings, facts, no local memory) and a contract refusal.
GPU (skipped without torch + a GPU): every variant against the fp32 reference on fresh random
inputs with a NaN-poisoned output (benchmarks/attention_bench.py's check)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin" / "kernels" / "attention"
VARIANTS = ["full", "causal", "sliding", "block_sparse", "document", "softcap", "alibi", "decode", "decode_streamk",
            "decode_paged", "prefill_paged", "varlen_full", "varlen_causal", "varlen_sliding", "varlen_softcap",
            "varlen_alibi"]
D64 = list(VARIANTS)  # attn_<variant>_d64: the same variant with attn_core_d64 (decode too: the combine reads head_dim)
KERNELS = [f"attn_{v}" for v in VARIANTS] + [f"attn_{v}_d{d}" for v in D64 for d in (64, 256)]


def head_dim(kernel: str) -> int:
    """attn_<variant>_d64 -> 64, _d256 -> 256, else 128."""
    m = re.search(r"_d(64|256)$", kernel)
    return int(m.group(1)) if m else 128


def base_name(kernel: str) -> str:
    return re.sub(r"_d(64|256)$", "", kernel)
BAZEL = [str(ROOT / "tools" / "bazel")]


def _bazel_reason() -> str | None:
    try:
        res = subprocess.run(BAZEL + ["--version"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bazel unavailable: {e}"
    if res.returncode != 0 or "bazel 7" not in res.stdout + res.stderr:
        return "bazel unavailable (run `bash tools/setup.sh`)"
    return None


@pytest.fixture(scope="module")
def built():
    reason = _bazel_reason()
    if reason:
        pytest.skip(reason)
    res = subprocess.run(BAZEL + ["build", "//kernels/attention/..."], capture_output=True, text=True, cwd=ROOT,
                         timeout=3600)
    assert res.returncode == 0, res.stderr[-3000:]
    q = subprocess.run(BAZEL + ["aquery", 'mnemonic("PipelinkLink", //kernels/attention/...)', "--output=jsonproto"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert q.returncode == 0, q.stderr[-3000:]
    return json.loads(q.stdout)


def _links(aq) -> dict[str, list[str]]:
    """kernel name -> the --package paths of its link action."""
    out = {}
    for a in aq.get("actions", []):
        args = a.get("arguments", [])
        pk = [args[i + 1] for i, x in enumerate(args[:-1]) if x == "--package"]
        cubin = next((args[i + 1] for i, x in enumerate(args[:-1]) if x == "--cubin"), "")
        if cubin:
            out[Path(cubin).name.removesuffix(".cubin")] = pk
    return out


def test_every_variant_links_the_same_core_package(built):
    """One core package (one sha256) in every d = 128 variant, and one (another) in every d = 64
    and every d = 256 variant: the core is never edited or recompiled per variant, only built once
    per head dim."""
    links = _links(built)
    assert set(links) == set(KERNELS) | {"attn_cp"}, sorted(links)  # attn_cp: issue 13, the same core
    digests = {}
    for kernel, pkgs in links.items():
        core = [p for p in pkgs if Path(p).name in ("attn_core.plpkg", "attn_core_d64.plpkg", "attn_core_d256.plpkg")]
        assert len(core) == 1, (kernel, pkgs)
        d = head_dim(kernel)
        assert Path(core[0]).name == ("attn_core.plpkg" if d == 128 else f"attn_core_d{d}.plpkg")
        path = ROOT / "bazel-out" / Path(core[0]).relative_to("bazel-out")
        digests[kernel] = hashlib.sha256(path.read_bytes()).hexdigest()
    for group, pkg in ((lambda k: head_dim(k) == 128, "attn_core"), (lambda k: head_dim(k) == 64, "attn_core_d64"),
                       (lambda k: head_dim(k) == 256, "attn_core_d256")):
        mine = {k: d for k, d in digests.items() if group(k)}
        assert len(set(mine.values())) == 1, mine
        # the digest each linked kernel's manifest records for its core instance is that one value too
        recorded = {k: next(i["package_digest"] for i in json.loads((BIN / f"{k}.manifest.json").read_text())
                            ["instances"] if i["name"] == "core") for k in mine}
        assert len(set(recorded.values())) == 1, recorded
        # and it is the package bazel-bin holds
        assert hashlib.sha256((BIN / f"{pkg}.plpkg").read_bytes()).hexdigest() == next(iter(mine.values()))
    assert len({digests["attn_causal"], digests["attn_causal_d64"], digests["attn_causal_d256"]}) == 3


@pytest.mark.parametrize("kernel", KERNELS)
def test_variant_placement(built, kernel):
    variant, d = base_name(kernel).removeprefix("attn_"), head_dim(kernel)
    m = json.loads((BIN / f"{kernel}.manifest.json").read_text())
    r = json.loads((BIN / f"{kernel}.report.json").read_text())
    assert m["facts"] == {"block_q": 128, "head_dim": d}
    assert m["block"] == [384, 1, 1]
    assert r["resource_usage"]["LOCAL"] == 0, "the linked kernel spills"
    # ring q: 2 stages (the next tile's Q loads under this one; decode, one tile per CTA, links
    # attn_loader_q1: 1; decode_streamk, tiles across heads, 2); kv: what is left (5 at d = 128,
    # 6 for decode and at d = 64)
    # d = 256: every kernel links the loader's one-stage build, and 64 KB tiles leave ring kv 2
    one_tile = variant in ("decode", "decode_paged")  # one tile per CTA: the q1 builds of the loaders
    q_depth = 1 if one_tile or d == 256 else 2
    assert r["rings"]["q"]["depth"] == q_depth and 2 <= r["rings"]["kv"]["depth"] <= 6
    if d == 256:
        assert r["rings"]["kv"]["depth"] == 2
    elif one_tile or d == 64:
        assert r["rings"]["kv"]["depth"] == 6
    names = {i["name"]: i["package"] for i in m["instances"]}
    assert names["core"] == "attn_core" and names["mask"] == "attn_mask"
    if variant.startswith("decode"):
        assert {w["name"] for w in m["workspaces"]} == {"partials", "counters"}


def test_kernel_without_a_variant_is_refused(built, tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from pipelink.linker.compose import parse_kernel
    from pipelink.common.diagnostics import Rejected
    from pipelink.linker.link import link
    from pipelink.linker.package_io import read_package
    pkgs = [read_package(str(BIN / f"{n}.plpkg")) for n in ("attn_loader", "attn_core", "attn_store")]
    with pytest.raises(Rejected) as e:
        link(parse_kernel(str(ROOT / "kernels" / "attention" / "attn_prefill.kernel.toml"), pkgs))
    assert {d.code for d in e.value.diagnostics} & {"L-INSTANCE", "L-CALL-UNBOUND"}


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_causal.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("kernel", KERNELS)
def test_variant_matches_fp32_reference(kernel):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_one
    variant, D = base_name(kernel).removeprefix("attn_"), head_dim(kernel)
    variant = "decode_uniform" if variant == "decode" else variant  # the bench's names: each schedule forced
    shapes = ([(2, 3, 16, 8192), (3, 2, 5, 384), (5, 32, 1, 4096)] if variant.startswith("decode")
              else [(2, 3, 1024, 1024)])
    for control in (False, True):
        for shape in shapes:
            ok, msg = check_one(variant, *shape, control, D)  # kernels: $PIPELINK_ATTENTION_DIR or bazel-bin
            assert ok, f"{kernel} {shape} control={control}: {msg}"


def _sass(cubin: Path) -> str:
    sys.path.insert(0, str(ROOT / "tools"))
    from pipelink.linker.toolkit import find_toolkit
    return subprocess.run([find_toolkit().tool("cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("kernel", KERNELS)
def test_wgmma_not_serialised(built, kernel):
    """ptxas serialises every wgmma of a kernel (C7514, a WARPGROUP.DEPBAR after each HGMMA) when
    non-wgmma code may touch accumulators inside a pipeline stage; it did while the core's last PV
    sat behind a data-dependent branch (24 HGMMA, 24 DEPBAR; FA3-level speed needs them async).
    The core: a tile's first QK^T (d/16 HGMMA) when the previous tile did not issue it, QK^T + PV
    (d/16 + 8) in the loop, and the last PV with the next tile's first QK^T (d/16 + 8): 40 HGMMA
    at d = 128, 28 at d = 64, and 5 waits (wait<0> after the first QK^T, wait<1> + wait<0> in the
    loop and at the tile boundary). Decode (one tile per CTA: LTO drops the boundary's unused
    QK^T; ptxas puts an empty 64x8 HGMMA for its commit group): d/16 + (d/16 + 8) + 1 + 8;
    decode_streamk (several tiles a CTA) has the prefill count, without ping-pong. Also the ping-pong
    barriers and no named barrier id computed at run time. The d = 256 core visits one block at a
    time: its loop's QK^T (16 HGMMA) and PV (8 of 64x256), each followed by wait<0>."""
    d = head_dim(kernel)
    decode = base_name(kernel) in ("attn_decode", "attn_decode_paged")  # one tile per CTA
    want = 2 * (d // 16) + 17 if decode else d // 16 + 2 * (d // 16 + 8)  # decode: 33 (d = 128), 25 (d = 64)
    want, want_waits = (24, 2) if d == 256 else (want, 5)
    decode = decode or base_name(kernel) == "attn_decode_streamk"
    for cubin in (BIN / f"{kernel}.cubin", BIN / f"{kernel}.control.cubin"):
        sass = _sass(cubin)
        hgmma = len(re.findall(r"\bHGMMA\.", sass))
        waits = len(re.findall(r"WARPGROUP\.DEPBAR", sass))
        assert hgmma == want and waits == want_waits, f"{cubin.name}: {hgmma} HGMMA, {waits} WARPGROUP.DEPBAR"
        if not decode:  # decode's q_len <= 16: one warpgroup computes, no ping-pong
            assert re.search(r"BAR\.SYNC(\.DEFER_BLOCKING)? 0x[1-9a-f], 0x100", sass), f"{cubin.name}: no ping-pong"
        assert not re.search(r"BAR\.(SYNC|ARV)(\.DEFER_BLOCKING)? R\d+", sass), f"{cubin.name}: run-time barrier id"


@pytest.mark.parametrize("kernel", KERNELS)
def test_no_per_score_loads(built, kernel):
    """Masks come per block (mask_bits: one or two aux words per row of a PARTIAL block), score
    modifications' parameters per tile (mod_params): no variant loads aux per score. Before this
    interface the linked SASS held 292 LDG (block_sparse), 132 (softcap), 103 (document). The core
    asks for a tile's block kinds / mask words at four sites (the tile's first block, its second,
    block i + 1 from inside block i's iteration, the next tile's first block at the boundary) and
    starts tiles at two, so the variant's loads appear several times: 115 LDG in document (57
    before the boundary and the fetch-ahead), 80 in block_sparse (38), 52 in decode (48 of them
    the combine's)."""
    ldg = len(re.findall(r"\bLDG\.", _sass(BIN / f"{kernel}.cubin")))
    assert ldg <= 128, f"{kernel}: {ldg} LDG in the linked SASS"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_decode_streamk.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("H, Hkv, Lq", [(32, 8, 1), (32, 16, 1), (16, 4, 2), (32, 4, 2), (16, 1, 1), (8, 1, 2), (2, 1, 1)])
@pytest.mark.parametrize("variant", ["decode_uniform", "decode_streamk"])
@pytest.mark.parametrize("D", [128, 256])
def test_grouped_query_decode_matches_fp32_reference(H, Hkv, Lq, variant, D):
    """GQA decode (issue 42): a group's query heads ride as rows of their KV head's tile (d = 256:
    rows 8-15 are the combine's second merged row a thread)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_one
    for B, KV in ((1, 4096), (3, 384), (2, 1000)):
        ok, msg = check_one(variant, B, H, Lq, KV, False, D, Hkv=Hkv)
        assert ok, f"{variant} d={D} B={B} H={H} Hkv={Hkv} Lq={Lq} KV={KV}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_decode_streamk.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("KV", [1, 5, 127, 129, 1000, 4095, 32769])
@pytest.mark.parametrize("variant", ["decode_uniform", "decode_streamk"])
def test_decode_takes_any_kv_length(KV, variant):
    """Decode's last KV block is PARTIAL past kv_len (issue 42): no padding by the caller."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_one
    for control in (False, True):
        ok, msg = check_one(variant, 2, 4, 3, KV, control, Hkv=2)
        assert ok, f"{variant} KV={KV} control={control}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_decode_paged.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("page_size", [16, 32, 64, 128])
@pytest.mark.parametrize("H, Hkv, Lq, lens", [(32, 8, 1, [4096]), (8, 2, 2, [1, 129, 1000, 16]),
                                              (16, 16, 1, [5, 300]), (16, 1, 1, [2049, 7, 128])])
def test_paged_decode_matches_fp32_reference(page_size, H, Hkv, Lq, lens):
    """Paged decode (issue 42): FlashInfer's HND pools in shuffled page order, ragged lengths."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_paged
    for control in (False, True):
        ok, msg = check_paged(len(lens), H, Hkv, Lq, lens, page_size, control)
        assert ok, f"page {page_size} H={H} Hkv={Hkv} Lq={Lq} lens={lens} control={control}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_causal.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("variant", ["full", "causal", "sliding", "block_sparse", "document", "softcap", "alibi"])
@pytest.mark.parametrize("H, Hkv", [(4, 2), (8, 1), (16, 4)])
def test_grouped_query_prefill_matches_fp32_reference(variant, H, Hkv):
    """GQA prefill (issue 42): work tile bh reads K/V head bh / (H / Hkv)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_one
    ok, msg = check_one(variant, 2, H, 512, 512, False, Hkv=Hkv)
    assert ok, f"{variant} H={H} Hkv={Hkv}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_causal.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("variant, Lq, Lkv", [("full", 100, 300), ("full", 1, 129), ("full", 300, 1000),
                                              ("causal", 200, 200), ("causal", 1, 1), ("sliding", 1000, 1000),
                                              ("softcap", 129, 129), ("alibi", 257, 257)])
@pytest.mark.parametrize("D", [128, 64])
def test_prefill_takes_any_length(variant, Lq, Lkv, D):
    """Prefill lengths that are not whole blocks (issue 42): the tail Q block's rows past q_len
    are not stored (attn_store's plain-store path), the full variant masks keys past kv_len, the
    causal family needs no mask beyond its own."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_one
    for control in (False, True):
        ok, msg = check_one(variant, 3, 4, Lq, Lkv, control, D, Hkv=2)
        assert ok, f"{variant} Lq={Lq} Lkv={Lkv} d={D} control={control}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_prefill_paged.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("page_size", [16, 64, 128])
@pytest.mark.parametrize("H, Hkv, Lq, lens", [(32, 8, 512, [4096]), (8, 2, 100, [100, 1000, 257]),
                                              (4, 4, 1, [1, 130]), (16, 1, 300, [300, 2049])])
def test_paged_chunked_prefill_matches_fp32_reference(page_size, H, Hkv, Lq, lens):
    """Chunked prefill over a cached prefix (issue 42): q's rows are each sequence's last tokens,
    causal bottom-right aligned, K/V from FlashInfer HND pages."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_paged
    for control in (False, True):
        ok, msg = check_paged(len(lens), H, Hkv, Lq, lens, page_size, control, variant="causal")
        assert ok, f"page {page_size} H={H} Hkv={Hkv} Lq={Lq} lens={lens} control={control}: {msg}"


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "attn_varlen_causal.cubin").exists(), reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("variant", ["full", "causal", "sliding", "softcap", "alibi"])
@pytest.mark.parametrize("H, Hkv, D", [(4, 4, 128), (8, 2, 128), (16, 1, 64), (32, 8, 128)])
@pytest.mark.parametrize("lens_q, extra_k", [([1, 129, 300, 0, 2049, 7], 0), ([100, 1, 1000, 128], 37),
                                             ([16] * 16, 500)])
def test_ragged_batch_matches_fp32_reference(variant, H, Hkv, D, lens_q, extra_k):
    """A ragged batch (issue 42): FlashAttention's varlen layout and cu_seqlens, sequences of any
    length (0 and 1 too), keys a cached prefix longer than the queries (extra_k i more keys for
    sequence i: the masks align bottom-right), grouped-query heads."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "kernels" / "attention"))
    from attention_check import check_ragged
    lens_k = [n + extra_k * i for i, n in enumerate(lens_q)]
    for control in (False, True):
        ok, msg = check_ragged(variant, lens_q, lens_k, H, Hkv, control, D=D)
        assert ok, f"{variant} H={H} Hkv={Hkv} d={D} lens {lens_q} / {lens_k} control={control}: {msg}"
