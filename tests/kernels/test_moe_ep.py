"""Expert-parallel moe_step (issue 13): kernels/moe/moe_ep.py and the world > 1 path of
//kernels:moe_step (dispatch / expert / combine over peer-mapped workspaces).

CPU: world / token / weight refusals (R-RANK, R-SHAPE), the header's exchange layout and
peer-table order against the Python entry, the manifest's EP parameters and world-sized
workspaces, lent workspaces checked against the launch (R-WORKSPACE), and a model of the
owner-side row layout (every rank's rows of every expert land disjoint, in whole block_m tiles,
inside the owner's capacity). GPU (skipped without torch + an sm_90 GPU + the built kernel):
world 1 through the EP entry, and world 2 as two processes sharing one GPU, against the f64
reference on the union of both ranks' tokens and the single-GPU kernel (4 launches each: 2
eager, 2 CUDA-graph replays). Speed needs one GPU per rank (not measured here).
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin" / "kernels"
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "moe"), str(ROOT / "tests")]

from moe_ep import SYNC_BYTES, capacity_rows, check_ep_world, check_max_tokens  # noqa: E402
from pipelink.runtime.peers import PeerError  # noqa: E402
from pipelink.runtime import LaunchError  # noqa: E402

HEADER = (ROOT / "kernels" / "moe" / "moe_shapes.h").read_text()


@pytest.mark.parametrize("world, rank", [(3, 0), (16, 0), (6, 5), (2, 2), (0, 0), (True, 0)])
def test_bad_world_or_rank_is_r_rank(world, rank):
    with pytest.raises(PeerError) as e:
        check_ep_world(world, rank)
    assert e.value.code == "R-RANK" and e.value.diagnostics[0].hint


@pytest.mark.parametrize("t", [0, 65537, True, 2.0])
def test_bad_max_tokens_is_r_shape(t):
    with pytest.raises(LaunchError) as e:
        check_max_tokens(t)
    assert e.value.code == "R-SHAPE"


def test_header_agrees_with_the_entry():
    consts = dict(re.findall(r"\b([A-Z_]+) = (\d+)", HEADER))
    assert int(re.search(r"SYNC_BYTES = (\d+)", HEADER).group(1)) == SYNC_BYTES
    assert (consts["PEER_XS"], consts["PEER_SYNC"], consts["PEER_YS"], consts["PEER_WORDS"]) == ("0", "1", "2", "3")
    # the exchange area of c chunks of 128 experts (EX(c)) fits in sync for every c up to MAX_CHUNKS
    ex0, step = map(int, re.search(r"EX\(unsigned c\) \{ return (\d+) \+ (\d+) \* EXPERT_SLOTS \* \(c - 1\)", HEADER).groups())
    mw, chunks = int(consts["MAX_WORLD"]), int(consts["MAX_CHUNKS"])
    for c in range(1, chunks + 1):
        ex = ex0 + step * 128 * (c - 1)
        assert mw == 8 and (ex + 2 * mw + 2 * mw * 128 * c) * 4 <= SYNC_BYTES
    assert ex0 == 6400  # one chunk (128 experts, the expert-parallel model): the exchange where it was
    for c in ("router", "dispatch", "expert", "combine"):
        assert f"bytes = {SYNC_BYTES}" in (ROOT / "kernels" / "moe" / f"{c}.contract.toml").read_text(), c
    assert capacity_rows(2, 100, 64) == 2 * 100 * 8 + 128 * 64


def test_expert_row_offsets_fit_32_bits():
    # expert.cu holds each A row it loads as row · K / 8 (16-B chunks) in 32 bits, with ~0u
    # meaning "no row": the largest lent A workspace (xs at the most ranks and tokens, K = the
    # largest hidden the expert accepts) must stay below that, or raising MAX_TOKENS, the world
    # size or the accepted hidden would wrap the addresses.
    import moe_ep
    contract = (ROOT / "kernels" / "moe" / "expert.contract.toml").read_text()
    hidden_max = int(re.search(r"\[fact\.hidden\][^\[]*max = (\d+)", contract).group(1))
    rows = capacity_rows(max(moe_ep.WORLDS), moe_ep.MAX_TOKENS, 64)
    assert rows * (hidden_max // 8) < 2**32 - 1
    assert "(K / 8)" in (ROOT / "kernels" / "moe" / "expert.cu").read_text()


def _manifest():
    p = BIN / "moe_step.manifest.json"
    if not p.is_file():
        pytest.skip("tools/bazel build //kernels:moe_step first")
    return json.loads(p.read_text())


def test_manifest_has_the_ep_parameters_and_world_sized_workspaces():
    m = _manifest()
    fields = {(f["instance"], f["name"]) for f in m["params"]["fields"]}
    for inst, names in {"disp": ("rank", "world", "peers"), "ffn": ("rank", "world"),
                        "comb": ("rank", "world", "peers")}.items():
        assert all((inst, n) in fields for n in names), inst
    sizes = {w["name"]: w["bytes"] for w in m["workspaces"] if w.get("scope") == "kernel"}
    assert sizes["ys"] == "(world * t * top_k + experts * block_m) * 2 * hidden"
    assert sizes["xs"] == "max(min(world - 1, 1) * (world * t * top_k + experts * block_m) * 2 * hidden, 2 * hidden)"
    assert sizes["sync"] == str(SYNC_BYTES)


def _plan(lent, t=100, world=2, workspace=lambda w, n: 1 << 30):
    from pipelink.runtime import Manifest, plan_launch

    class Host:
        def require(self, cond, msg):
            assert cond, msg

        def tensor_map_2d(self, *a, **k):
            return bytes(128)
    m = Manifest.from_dict(_manifest())
    params = {"x": 1 << 20, "router_w": 1 << 20, "w13": 1 << 20, "w2": 1 << 20, "out": 1 << 20, "t": t,
              "rank": 0, "world": world, "peers": 1 << 20, "router_b": 0, "b13": 0, "b2": 0}
    return plan_launch(m, params, builtins={"num_sms": 132, "resident_ctas": 132}, host=Host(),
                       workspace=workspace, lent=lent)


def test_lent_workspaces_are_checked_against_the_launch():
    rows = capacity_rows(2, 100, 64)
    ok = {"sync": (1 << 21, SYNC_BYTES), "xs": (1 << 32, rows * 4096), "ys": (1 << 33, rows * 4096),
          "hs": (1 << 34, rows * 1536)}
    vals = _plan(ok).values
    assert {vals[k] for k in vals if k.endswith(".xs")} == {1 << 32}
    assert {vals[k] for k in vals if k.endswith(".sync")} == {1 << 21}
    for name, (ptr, n) in ok.items():
        for bad, why in (((ptr, n - 1 if name != "hs" else 100 * 8 * 1536), "bytes; this launch needs"),
                         ((ptr + 8, n), "aligned")):
            if name == "hs" and why != "aligned":
                bad = (ptr, (100 * 8 + 128 * 64) * 1536 - 1)  # hs: the SwiGLU owners' size (one rank's t)
            with pytest.raises(LaunchError) as e:
                _plan({**ok, name: bad})
            assert e.value.code == "R-WORKSPACE" and why in str(e.value), (name, str(e.value))


def owner_rows(counts, world, bm=64):
    """Model of dispatch.cu's layout: counts[r][e] rows of rank r for expert e -> for each
    rank r and expert e, the first row on e's owner (moe_shapes.h; mirrors the lane math)."""
    P = 128 // world
    tot = [sum(counts[r][e] for r in range(world)) for e in range(128)]
    padded = [-(-t // bm) * bm for t in tot]
    G = [sum(padded[:e]) for e in range(128)]
    return [[G[e] - G[e // P * P] + sum(counts[q][e] for q in range(r)) for e in range(128)] for r in range(world)]


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_owner_layout_is_disjoint_and_padded(world):
    import random
    rnd = random.Random(world)
    T, bm, P = 300, 64, 128 // world
    counts = [[0] * 128 for _ in range(world)]
    for r in range(world):
        for _ in range(T):
            for e in rnd.sample(range(128), 8):
                counts[r][e] += 1
    first = owner_rows(counts, world, bm)
    for o in range(world):
        used = []
        for e in range(o * P, (o + 1) * P):
            tot = sum(counts[r][e] for r in range(world))
            rows = [first[r][e] + i for r in range(world) for i in range(counts[r][e])]
            assert len(set(rows)) == len(rows) == tot
            if rows:
                assert min(rows) % bm == 0 and max(rows) - min(rows) == tot - 1  # contiguous from a tile start
            used += rows
        assert len(set(used)) == len(used) and max(used) < capacity_rows(world, T, bm)


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not (BIN / "moe_step.cubin").exists(), reason="bazel-bin/kernels/moe_step.cubin is not built")
@pytest.mark.parametrize("world, T", [(1, 64), (2, 16), (2, 300), (2, 2048)])
def test_ep_matches_reference_on_every_rank(world, T):
    pytest.importorskip("torch")
    from helpers.cp_worker import run_ranks
    res = run_ranks("moe", world, uuid.uuid4().hex, T, 4321, BIN)
    for r in res:
        assert not r["errors"] and r["launches"] == 4, r
        assert max(r["max_err"]) < 2e-2 and min(r["ok_frac"]) >= (0.75 if T < 64 else 0.9), r  # near-ties skipped
        assert max(r["vs_single"]) < 2e-2, r  # the same kernel at world 1 on the union of tokens


def test_one_rank_allocates_one_row_of_xs():
    """world = 1 reads rows from x through xrow: xs (unused there) is one row, not t * 8 rows."""
    sizes = {}

    def alloc(w, n):
        sizes[w.name] = n
        return 1 << 30
    t = 16384
    _plan(None, t=t, world=1, workspace=alloc)
    assert sizes["xs"] == 4096
    assert sizes["xrow"] == 4 * (t * 8 + 128 * 64)
    assert sizes["ys"] == (t * 8 + 128 * 64) * 4096
