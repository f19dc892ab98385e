"""The wgmma descriptors of the attention core and the hand-written GEMM consumers are built in
uniform registers. Runs on the CPU, on the kernels Bazel built.

A descriptor derived from `threadIdx` (the warpgroup index t / 128) is not provably warp-uniform
to ptxas: it lives in ordinary registers and is moved into uniform ones (two R2UR per 64-bit
descriptor, twice per wgmma) before every HGMMA. Broadcasting the index from lane 0, as CUTLASS's
canonical_warp_group_idx does, removes those moves: 4-9% faster on the GEMM consumers and the
attention core (docs/DECISIONS.md). This guards against a change that makes the index, or a
ring index the descriptors are summed from, non-uniform again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from pipelink.linker.sass import disassemble  # noqa: E402

BIN = ROOT / "bazel-bin" / "kernels"
ATTENTION = ["full", "causal", "sliding", "block_sparse", "document", "softcap", "alibi", "decode"]
# Not attn_decode_streamk: its descriptors stay in ordinary registers (broadcasting its tile count
# too did not change that), and it is bound by DRAM (4.5 TB/s), not by its instructions. Not the
# CuTe consumer: CuTe builds its own descriptors.
KERNELS = ([f"attention/attn_{v}{d}" for v in ATTENTION for d in ("", "_d64", "_d256")]
           + [f"gemm_swiglu_{v}" for v in ("tma", "tma_bn64", "tma_dp", "tma_c2", "tma_pp", "tma_pp_dp", "wgmma")])


def descriptor_moves(ins: list[str]) -> tuple[int, int]:
    """(HGMMA count, R2UR among the up to 12 instructions before each HGMMA, back to the previous one)."""
    hgmma = moves = 0
    for i, text in enumerate(ins):
        if "HGMMA" not in text:
            continue
        hgmma += 1
        for j in range(i - 1, max(i - 13, -1), -1):
            if "HGMMA" in ins[j]:
                break
            moves += ins[j].startswith("R2UR")
    return hgmma, moves


@pytest.mark.parametrize("kernel", KERNELS)
def test_wgmma_descriptors_in_uniform_registers(kernel):
    for cubin in (BIN / f"{kernel}.cubin", BIN / f"{kernel}.control.cubin"):
        if not cubin.exists():
            pytest.skip(f"{cubin} not built (tools/bazel build //kernels/... --output_groups=+control)")
        ins = [x for f in disassemble(cubin.read_bytes(), what=cubin.name).values() for x in f]
        hgmma, moves = descriptor_moves(ins)
        assert hgmma, f"{cubin.name}: no HGMMA"
        # Before the broadcast: about 3 per HGMMA (attention 117 for 40, GEMM 23 for 12); after: 0-1.
        assert moves * 4 < hgmma, f"{cubin.name}: {moves} R2UR feed its {hgmma} HGMMA (descriptors not uniform)"


def test_the_check_sees_the_moves():
    """The counter finds the moves in SASS shaped like the pre-broadcast core's."""
    before = ["R2UR UR16, R6", "R2UR UR17, R7", "IMAD.MOV.U32 R7, RZ, RZ, 0x40000040",
              "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "R2UR UR18, R198",
              "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24"]
    after = ["UIADD3 UR22, UR32, 0x400, URZ", "UMOV UR21, 0x40000040", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24"]
    assert descriptor_moves(before) == (2, 3)
    assert descriptor_moves(after) == (1, 0)
