"""One linked MoE model (or test link) against its f64 reference on a GPU: used by
tests/kernels/test_moe_step.py and, as a worker that prints `RESULT correct`, by the sanitizer
gate (gpu_bench.sanitize_jobs).

    python3 tests/helpers/moe_model_check.py --model qwen3_30b_a3b_grouped --tokens 1,37

Fresh random weights and tokens (seeded), the output NaN-poisoned first; tolerance
|out - ref| <= 2e-2 (|ref| + rms(ref)) on tokens whose routing margin (moe_reference's gap) is
above 1e-4 (near-ties may route either way: left out and counted, at most max(2, T / 10)).
--routed-only: a model with a shared expert (DeepSeek-V3) without it, in the kernel and the
reference alike: the sanitizer runs then see the linked kernel and no torch GEMM (racecheck
reports hazards inside cuBLAS's own bf16 kernels, which run the shared expert).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "tools", ROOT / "kernels" / "moe"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import moe_models  # noqa: E402


def model_weights(torch, m, seed):
    """Random weights of model m (and the generator, for its tokens)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    E, H, I = m.experts, m.hidden, m.inter

    def r(*s, scale):  # bf16 normal * scale, drawn 16 rows of dim 0 at a time (DeepSeek-V3's w13 is 15 GB)
        out = torch.empty(*s, dtype=torch.bfloat16, device="cuda")
        for i in range(0, s[0], 16):
            part = out[i:i + 16]
            part.copy_(torch.randn(*part.shape, generator=g, device="cuda") * scale)
        return out

    w = {"router_w": r(E, H, scale=H**-0.5), "w13": r(E, 2 * I, H, scale=H**-0.5), "w2": r(E, H, I, scale=I**-0.5)}
    if m.biases:  # gate/up biases of several units: gpt-oss's clamp (7) is reached
        w |= {"router_b": r(E, scale=1.0), "b13": r(E, 2 * I, scale=6.0), "b2": r(E, H, scale=0.5)}
    if m.routing == moe_models.SIGMOID_GROUPED:  # a bias spread like the scores': groups and experts reorder
        w["score_bias"] = torch.randn(E, generator=g, device="cuda") * 0.1
    if m.shared_inter:  # DeepSeek-V3's shared expert (weight 1, added to the routed sum)
        Is = m.shared_inter
        w |= {"shared_w13": r(2 * Is, H, scale=H**-0.5), "shared_w2": r(H, Is, scale=Is**-0.5)}
    return w, g


def check(model, T: int, seed: int = 4321, stats: dict | None = None, routed_only: bool = False) -> str:
    """'' if the layer of `model` matches its reference at T tokens, else what is wrong; `stats`
    (if given) gets the near-tied token count and the largest error on the others. routed_only:
    the layer without its shared expert (the same kernel; nothing runs after it)."""
    import dataclasses

    import torch

    import moe_reference
    import moe_step as ms

    m = moe_models.resolve_model(model)
    if routed_only:
        m = dataclasses.replace(m, shared_inter=0)
    w, g = model_weights(torch, m, seed)
    x = torch.randn(T, m.hidden, generator=g, device="cuda").to(torch.bfloat16)
    out = torch.full((T, m.hidden), float("nan"), dtype=torch.bfloat16, device="cuda")
    ms.MoeLayer(m, w)(x, out)
    torch.cuda.synchronize()
    ref, gap = moe_reference.reference(m, x, w)
    ok = gap > 1e-4
    tied = int((~ok).sum())
    if tied > max(2, T // 10):
        return f"{m.name} T={T}: {tied} of {T} tokens near-tied"
    if torch.isnan(out).any():
        return f"{m.name} T={T}: unwritten (NaN-poisoned) output"
    err = (out.double() - ref).abs()
    rms = ref[ok].pow(2).mean().sqrt()
    if stats is not None:
        stats.update(tied=tied, max_err=err[ok].max().item(), rel=(err[ok] / (ref[ok].abs() + rms)).max().item())
    bad = (err > 2e-2 * (ref.abs() + rms))[ok]
    if bad.any():
        return f"{m.name} T={T}: {int(bad.sum())} elements off, max err {err[ok].max().item():.3e}"
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a linked model or a moe_models.VARIANTS test link")
    ap.add_argument("--tokens", default="1,37", help="comma-separated T values")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--routed-only", action="store_true", help="leave the shared expert out (kernel and reference)")
    a = ap.parse_args()
    wrong = []
    for T in (int(t) for t in a.tokens.split(",")):
        stats: dict = {}
        if w := check(a.model, T, a.seed, stats, a.routed_only):
            wrong.append(w)
        print(f"{a.model} T={T}: " + (w or f"near-tied {stats['tied']}, max |err| {stats['max_err']:.3e}, "
                                            f"max err / (|ref| + rms) {stats['rel']:.3e} (tolerance 2e-2)"), flush=True)
    print("RESULT " + ("correct" if not wrong else "wrong: " + "; ".join(wrong)), flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
