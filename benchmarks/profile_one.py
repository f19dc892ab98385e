"""One launch of a Bazel-built GEMM + SwiGLU kernel at a Qwen shape, for ncu:
    ncu --clock-control none --section SpeedOfLight ... python3 benchmarks/profile_one.py gemm_swiglu_tma 2048
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gemm_swiglu_bench import BIN, HIDDEN, INTER, inputs, load  # noqa: E402
from gpu_bench import require_gpu, whole  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="a built gemm_swiglu kernel, e.g. gemm_swiglu_tma")
    ap.add_argument("M", type=whole(1), help="rows of x (tokens)")
    a = ap.parse_args(argv)
    if not (BIN / f"{a.kernel}.manifest.json").is_file():
        ap.error(f"kernel {a.kernel!r}: not built: {BIN / a.kernel}.manifest.json (hint: tools/bazel build "
                 f"//kernels:{a.kernel} --output_groups=+control)")
    if not require_gpu("profile_one.py"):
        return 1
    import torch
    g = load(a.kernel)
    x, w = inputs(a.M, INTER, HIDDEN)
    out = torch.empty((a.M, INTER), device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        g(x, w, out)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
