"""compute-sanitizer gate for the linked MoE kernels (issue 9): memcheck, racecheck, synccheck on
//kernels:moe_step, //kernels:moe_step_swiglu2 and //experiments:moe_step_team (the expert's team
mode, which moe_step runs from T = 8192, at every T) (bazel-bin) at a small T, each run checked
against the f64 reference (kernels/moe/moe_step.py). benchmarks/moe_bench.py's `sanitize` runs
only the linked moe_step through another worker; this one covers both SwiGLU builds.

    python3 benchmarks/moe_sanitize.py [--tokens 16] [--kernels moe_step,moe_step_swiglu2,moe_step_team]

Fails (exit 1) if compute-sanitizer is missing, a tool reports anything, or a result is wrong.
memcheck runs with --report-api-errors no: PyTorch's own driver calls (e.g. probing
primary contexts) return errors by design.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where each kernel is built: the product kernels in bazel-bin/kernels, the team build in
# bazel-bin/experiments ($PIPELINK_MOE_STEP_DIR, when set, holds them all).
BUILD_DIRS = (ROOT / "bazel-bin" / "kernels", ROOT / "bazel-bin" / "experiments")


def worker(name: str, T: int) -> int:
    sys.path.insert(0, str(ROOT / "tools"))
    sys.path.insert(0, str(ROOT / "kernels" / "moe"))
    import torch
    import moe_step as ms

    g = torch.Generator(device="cuda").manual_seed(5 + T)
    r = lambda *s, scale: (torch.randn(*s, generator=g, device="cuda") * scale).to(torch.bfloat16)  # noqa: E731
    x, rw, w13, w2 = r(T, 2048, scale=1.0), r(128, 2048, scale=0.05), r(128, 1536, 2048, scale=0.02), \
        r(128, 2048, 768, scale=0.02)
    out = torch.full((T, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
    kernel_dir = None if os.environ.get("PIPELINK_MOE_STEP_DIR") else \
        next((d for d in BUILD_DIRS if (d / f"{name}.cubin").is_file()), None)
    for _ in range(2):  # two launches: both counter sets
        out.fill_(float("nan"))
        ms.moe_step(x, rw, w13, w2, out, kernel_dir=kernel_dir, name=name)
        torch.cuda.synchronize()
    ref, gap = ms.reference(x, rw, w13, w2)
    ok = gap > 1e-4
    err = (out.double() - ref).abs()
    good = not torch.isnan(out).any().item() and bool((err <= 2e-2 + 2e-2 * ref.abs())[ok].all().item())
    print(f"RESULT {'correct' if good else 'wrong'} {name} T={T} max err {err[ok].max().item():.3e}", flush=True)
    return 0 if good else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", nargs="?", default="gate", choices=["gate", "worker"])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--kernels", default="moe_step,moe_step_swiglu2,moe_step_team")
    ap.add_argument("--name", default="moe_step")
    a = ap.parse_args()
    from gpu_bench import require_gpu, sanitize_jobs  # (here: the worker runs under the sanitizer, torch-only)
    if not require_gpu(f"moe_sanitize.py {a.cmd}"):
        return 1
    if a.cmd == "worker":
        return worker(a.name, a.tokens)
    return sanitize_jobs([(name, [sys.executable, __file__, "worker", "--name", name, "--tokens", str(a.tokens)])
                          for name in a.kernels.split(",")])


if __name__ == "__main__":
    sys.exit(main())
