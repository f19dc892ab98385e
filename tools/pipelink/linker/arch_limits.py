"""The hardware's limits that several passes hold contracts and placements to.

One place for them, so pack (limits.py), check and solve agree, and none of them has to import
another pass to learn a number.
"""

from __future__ import annotations

# Shared memory one block may use, by arch (the opt-in maximum, bytes).
SMEM_CAPACITY = {"sm_90a": 232448, "sm_90": 232448, "sm_100a": 232448, "sm_120a": 101376, "sm_80": 166912}
REGISTER_FILE = 65536  # 32-bit registers per SM
MAX_WARPS = 32  # warps per block (1,024 threads)
MIN_BUDGET = 24  # the smallest setmaxnreg budget
