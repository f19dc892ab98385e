"""Context-parallel attention (issue 13) on ONE GPU: sanitizers over 1 rank and over 2 ranks as
2 processes sharing the GPU, and the 1-rank overhead of attn_cp against the single-GPU causal
kernel. Speed of N > 1 ranks needs one GPU per rank: not measured here.

    python benchmarks/cp_attention_check.py sanitize [TOOL]   # memcheck by default
    python benchmarks/cp_attention_check.py bench1 [S] [H]    # world 1: attn_cp vs attn_causal
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "attention"), str(ROOT / "tests"), str(ROOT / "benchmarks")]
BIN = ROOT / "bazel-bin" / "kernels" / "attention"


def sanitize(tool: str = "memcheck") -> int:
    from cp_worker import run_ranks
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


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:] or ["sanitize"]
    if cmd == "sanitize":
        sys.exit(sanitize(*rest))
    sys.exit(bench1(*map(int, rest)))
