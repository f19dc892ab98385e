"""Context-parallel attention (issue 13) on ONE GPU: sanitizers over 1 rank and over 2 ranks as
2 processes sharing the GPU, and the 1-rank overhead of attn_cp against the single-GPU causal
kernel. Speed of N > 1 ranks needs one GPU per rank: not measured here.

    python benchmarks/cp_attention_check.py sanitize [TOOL]   # memcheck by default
    python benchmarks/cp_attention_check.py bench1 [S] [H]    # world 1: attn_cp vs attn_causal
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "attention"), str(ROOT / "tests"), str(ROOT / "benchmarks")]
BIN = ROOT / "bazel-bin" / "kernels" / "attention"
from gpu_bench import COMPUTE_SANITIZER_TOOLS, require_gpu, whole  # noqa: E402


def sanitize(tool: str = "memcheck") -> int:
    from helpers.cp_worker import run_ranks
    bad = 0
    for world, S, H in ((1, 1024, 2), (2, 1024, 2)):
        prefix = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "7", "--report-api-errors", "no"]
        try:
            res = run_ranks("attn", world, uuid.uuid4().hex, S, H, 77, BIN, prefix=prefix)
        except AssertionError as e:
            print(f"{tool} world={world}: FAILED\n{str(e)[-3000:]}")
            bad += 1
            continue
        for r in res:
            summ = re.findall(r"(?:ERROR|RACECHECK) SUMMARY: [^\n]*", r["log"])
            print(f"{tool} world={world} S={S} H={H} rank {r['rank']}: {summ} rel={r['rel']} ready={r['ready']} "
                  f"done={r['done']}")
    return bad


def bench1(S: int = 8192, H: int = 32) -> int:
    import torch
    from attention import attention
    from attention_cp import CpAttention
    from pipelink.runtime.peers import UnixExchange
    ex = UnixExchange(uuid.uuid4().hex, 1, 0)
    cp = CpAttention(ex, B=1, H=H, seq_len=S, kernel_dir=BIN)
    q, k, v = (torch.randn(1, H, S, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cp.k_local.copy_(k)
    cp.v_local.copy_(v)
    o1, o2 = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    fa = lambda: attention(q, k, v, variant="causal", out=o1, kernel_dir=BIN)  # noqa: E731
    fb = lambda: cp(q, out=o2)  # noqa: E731  (K/V already in the symmetric buffer)
    fa(), fb()
    torch.cuda.synchronize()
    diff = (o1.float() - o2.float()).abs().max().item()
    ta, tb = interleaved_ms(fa, fb)
    flops = 4 * S * S * 128 * H / 2
    print(f"world=1 S={S} H={H}: attn_causal {ta:.3f} ms ({flops / ta / 1e9:.0f} TFLOP/s), attn_cp {tb:.3f} ms "
          f"({flops / tb / 1e9:.0f} TFLOP/s), cp/single {tb / ta:.4f}, max |diff| {diff:.2e}")
    cp.close()
    ex.close()
    return 0


def interleaved_ms(fa, fb, rounds: int = 10, reps: int = 10):
    """Median ms per call, ABBA-interleaved rounds of `reps` eager calls timed with events (the
    cp entry copies nothing when K/V are already in place, so eager calls are comparable)."""
    import torch
    ta, tb = [], []
    for r in range(rounds):
        for f, acc in ((fa, ta), (fb, tb)) if r % 2 == 0 else ((fb, tb), (fa, ta)):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(reps):
                f()
            e1.record()
            torch.cuda.synchronize()
            acc.append(e0.elapsed_time(e1) / reps)
    return sorted(ta)[len(ta) // 2], sorted(tb)[len(tb) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    sz = sub.add_parser("sanitize", help="compute-sanitizer over 1 and 2 ranks")
    sz.add_argument("tool", nargs="?", default="memcheck", choices=COMPUTE_SANITIZER_TOOLS)
    b1 = sub.add_parser("bench1", help="world 1: attn_cp against attn_causal")
    b1.add_argument("S", nargs="?", type=whole(256), default=8192, help="sequence length (default %(default)s)")
    b1.add_argument("H", nargs="?", type=whole(1), default=32, help="heads (default %(default)s)")
    a = ap.parse_args(argv)
    cmd = a.cmd or "sanitize"
    if cmd == "bench1" and a.S % 256:
        ap.error(f"S {a.S}: a multiple of 256 (two 128-row zigzag chunks a rank)")
    if not require_gpu(f"cp_attention_check.py {cmd}"):
        return 1
    return sanitize(getattr(a, "tool", "memcheck")) if cmd == "sanitize" else bench1(a.S, a.H)


if __name__ == "__main__":
    sys.exit(main())
