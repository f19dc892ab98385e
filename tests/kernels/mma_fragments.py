"""mma.sync m16n8k16 (bf16 operands, f32 sums) assembled from every lane's registers, by the PTX
ISA's fragment layout: A row-major with row gid (a0, a2) / gid + 8 (a1, a3) and columns
2 qd + (0, 1), + 8 for a2, a3; B column-major with rows 2 qd + (0, 1) (b0) and + 8 (b1), column
gid; C rows gid (c0, c1) / gid + 8 (c2, c3), columns 2 qd + (0, 1). The lane-by-lane emulations of
the decode megakernel's tile products (tests/kernels/test_decode_*.py) share it."""

from __future__ import annotations

import numpy as np


def mma_m16n8k16(c, a_regs, b_regs) -> None:
    """c [32 lanes][4] += A · B, a_regs [32][4][2] (a0..a3, two elements each), b_regs [32][2][2]."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        gid, qd = lane // 4, lane % 4
        for r in range(4):
            for e in range(2):
                i = 2 * r + e
                row = gid if i in (0, 1, 4, 5) else gid + 8
                col = 2 * qd + (i & 1) + (8 if i >= 4 else 0)
                A[row, col] = a_regs[lane][r][e]
        for r in range(2):
            for e in range(2):
                B[2 * qd + e + 8 * r, gid] = b_regs[lane][r][e]
    C = A @ B
    for lane in range(32):
        gid, qd = lane // 4, lane % 4
        for i in range(4):
            c[lane][i] += C[gid + (8 if i >= 2 else 0), 2 * qd + (i & 1)]
