"""Context-parallel causal attention (issue 13): kernels/attention/attention_cp.py and
//kernels/attention:attn_cp (attn_cp_loader + the unchanged attn_core + zigzag variant).

CPU: the zigzag helpers and shape refusals; attn_cp links the very attn_core package every
single-GPU variant links (same sha256; needs the kernels built).
GPU (skipped without torch + an sm_90 GPU + the built kernels): world 1 against the fp32
reference and the single-GPU causal kernel; world 2 as two processes sharing one GPU, three
launches each with fresh K/V (READY / DONE counters advance), against the fp32 reference.
Speed needs one GPU per rank (not measured here)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin" / "kernels" / "attention"
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "attention"), str(ROOT / "tests")]

from attention_cp import chunk_rows  # noqa: E402
from pipelink.runtime import LaunchError  # noqa: E402


@pytest.mark.parametrize("S, world", [(0, 1), (1000, 1), (256 * 3, 2), (True, 1), (640, 2)])
def test_sequence_must_cut_into_whole_chunks(S, world):
    with pytest.raises(LaunchError) as e:
        chunk_rows(S, world)
    assert e.value.code == "R-SHAPE" and "2 * world" in e.value.hint


def test_chunk_rows():
    assert chunk_rows(32768, 2) == 8192 and chunk_rows(1024, 4) == 128


def test_zigzag_round_trip():
    torch = pytest.importorskip("torch")
    from attention_cp import zigzag_shard, zigzag_unshard
    x = torch.arange(2 * 3 * 1024 * 2).reshape(2, 3, 1024, 2)
    for world in (1, 2, 4):
        parts = [zigzag_shard(x, world, r) for r in range(world)]
        assert torch.equal(zigzag_unshard(parts), x)
        c = 1024 // (2 * world)
        assert torch.equal(parts[0][:, :, c:], x[:, :, (2 * world - 1) * c:])  # rank 0: first and last chunk


def _manifest_core_digest(kernel):
    m = json.loads((BIN / f"{kernel}.manifest.json").read_text())
    return {i["name"]: i.get("package_digest") for i in m["instances"]}["core"]


@pytest.mark.skipif(not (BIN / "attn_cp.manifest.json").exists() or not (BIN / "attn_causal.manifest.json").exists(),
                    reason="bazel build //kernels/attention:attn_cp //kernels/attention:attn_causal first")
def test_cp_links_the_unchanged_core():
    # (tests/kernels/test_attention.py checks, through the link actions, that the attn_core.plpkg file
    # attn_cp links has the sha256 of every variant's)
    assert _manifest_core_digest("attn_cp") == _manifest_core_digest("attn_causal")


@pytest.mark.requires_gpu(sm=90)
@pytest.mark.skipif(not all((BIN / f"{k}.cubin").exists() for k in ("attn_cp", "attn_causal")),
                    reason="bazel-bin/kernels/attention is not built")
@pytest.mark.parametrize("world, S, H", [(1, 1024, 4), (1, 4096, 2), (2, 1024, 4), (2, 4096, 2)])
def test_cp_attention_matches_reference(world, S, H):
    pytest.importorskip("torch")
    from helpers.cp_worker import run_ranks
    res = run_ranks("attn", world, uuid.uuid4().hex, S, H, 1234, BIN)
    for r in res:
        assert not r["errors"] and max(r["rel"]) < 2e-2, r
        assert r["ready"] == [3] * world and r["done"] == [3] * world, r
        if world == 1:
            assert r["vs_single_max_abs"] < 2e-2, r


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_visit_table_is_causal_in_ring_order(world):
    from attention_cp import PARTIAL, visit_table
    C = 256
    cb, row = C // 128, 1 + 2 * world * C // 128
    for rank in range(world):
        t = visit_table(world, rank, C)
        assert len(t) == 2 * cb * row
        for lb in range(2 * cb):
            gq = rank * cb + lb if lb < cb else (2 * world - 1 - rank) * cb + lb - cb
            n, blocks = t[lb * row], t[lb * row + 1: lb * row + 1 + t[lb * row]]
            assert sorted(b & ~PARTIAL for b in blocks) == list(range(gq + 1))  # causal, each block once
            assert [b for b in blocks if b & PARTIAL] == [gq | PARTIAL]  # only the diagonal is partial
            owners = [min(c, 2 * world - 1 - c) for c in ((b & ~PARTIAL) // cb for b in blocks)]
            steps = [(rank - s) % world for s in owners]
            assert steps == sorted(steps) and n == gq + 1  # ring order: own blocks, then rank-1's, ...
