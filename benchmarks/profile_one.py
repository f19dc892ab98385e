"""One launch of a Bazel-built GEMM + SwiGLU kernel at a Qwen shape, for ncu:
    ncu --clock-control none --section SpeedOfLight ... python3 benchmarks/profile_one.py gemm_swiglu_tma 2048
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gemm_swiglu_bench import HIDDEN, INTER, inputs, load  # noqa: E402

import torch  # noqa: E402

name, M = sys.argv[1], int(sys.argv[2])
g = load(name)
x, w = inputs(M, INTER, HIDDEN)
out = torch.empty((M, INTER), device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    g(x, w, out)
torch.cuda.synchronize()
