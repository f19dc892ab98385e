"""benchmarks/solver_scale.py at a small size, run as its CLI: the synthetic composition goes
through compose -> check -> solve, the optimum is proven and reported, and the placement map is
byte-identical across solves and across processes. Also the map's wording of a proof and of a
gap left at the limit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pipelink.linker.solve import Placement, solver_status

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(\d+)\s+(.*)  map ([0-9a-f]{16})$")


def run_benchmark(cache: Path) -> list[tuple]:
    env = {**os.environ, "PIPELINK_BENCH_CACHE": str(cache), "PYTHONPATH": str(ROOT / "tools")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "solver_scale.py"), "--sizes", "16", "24",
                           "--repeat", "2", "--digest"], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [m.groups() for line in proc.stdout.splitlines() if (m := ROW.match(line))]
    assert len(rows) == 2, proc.stdout
    return rows


def test_small_compositions_proven_and_deterministic(tmp_path):
    first = run_benchmark(tmp_path / "cache")
    for handles, claims, smem, bound, status, _ in first:
        assert int(handles) in (16, 24) and int(claims) > 0
        assert status.startswith("optimal (proven in ") and status.endswith(" s)"), status
        assert smem == bound  # proven: the footprint is its own lower bound
    second = run_benchmark(tmp_path / "cache")  # another process: the same placements
    assert [(r[0], r[2], r[5]) for r in first] == [(r[0], r[2], r[5]) for r in second]


def placement(proven: bool, footprint: int, bound: int, unproven=()) -> Placement:
    return Placement(offsets={}, sizes={}, depths={}, barrier_ids={}, warp_begin={}, budgets={}, group_budgets=[],
                     warps=4, dynamic_smem=footprint, proven_optimal=proven, solve_seconds=1.5,
                     smem_lower_bound=bound, solver_work=1234567, limit="4,000,000 Z3 resource units per check",
                     unproven=unproven)


def test_status_words_proof_and_gap():
    assert solver_status(placement(True, 4096, 4096)) == "optimal (proven in 1,234,567 Z3 resource units)"
    assert solver_status(placement(True, 4096, 4096), 0.25) == "optimal (proven in 0.25 s)"
    gap = solver_status(placement(False, 5120, 4096, ("footprint",)))
    assert gap.startswith("best found, gap 1024 B to the lower bound 4096 B after limit 4,000,000 Z3 resource units")
    assert gap.endswith("(1,234,567 Z3 resource units; not proven: footprint)")
