"""Ragged batches on the H200 (issue 42): one attn_varlen_<variant> launch over a batch of
sequences of different lengths, against the same sequences one by one through our own kernels
(attention(...) per sequence, [1, H, L, D]) and against SDPA over the zero-padded batch (its best
backend: is_causal for causal, whose padding keys lie after every real query's keys; with a
boolean mask of the real keys for full).

Reads the kernels Bazel built (nothing is compiled or linked here):

    tools/bazel build //kernels/attention/... --output_groups=+control     # on the CPU machine
    python3 benchmarks/attention_ragged_bench.py --variants causal,full    # on the GPU machine

Inputs: 16 sequences (default) of lengths 1 .. --max-len evenly (or --spread geometric) spread, q ~ N(0, 1) bf16 in
FlashAttention's varlen layout; H = 32 query and --kv-heads 8 KV heads (Llama-3-8B), d = 128.
Before timing, every column is checked against the fp32 reference (varlen_reference) with a
NaN-poisoned output, |err| <= 2e-2 + 2e-2 |ref| on real rows. Timing: CUDA graphs replayed in
rotating rounds, each timed graph holding >= --sustain-ms of back-to-back calls (medians).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "attention"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from attention import attention, kernel_dir_default  # noqa: E402
from attention_check import ATOL, RTOL  # noqa: E402
from attention_reference import varlen_reference  # noqa: E402
from attention_varlen import VARLEN_VARIANTS  # noqa: E402
from gpu_bench import both_ways_ratio, interleaved, require_gpu  # noqa: E402

BIN = kernel_dir_default()


def lengths(n: int, longest: int, spread: str = "even") -> list[int]:
    """n lengths from 1 to `longest`, evenly spread, or geometrically (most of them short, as a
    serving batch of new requests)."""
    if spread == "geometric":
        return [round(longest ** (i / max(n - 1, 1))) for i in range(n)]
    return [1 + round(i * (longest - 1) / max(n - 1, 1)) for i in range(n)]


def columns(variant, lens, H, Hkv, D=128, seed=0):
    """{name: launch fn} of one ragged batch, and {name: (out, how to read it as [tokens, H, D])}."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    T, B, L = sum(lens), len(lens), max(lens)
    q, k, v = (torch.randn(T, h, D, device="cuda", generator=g).bfloat16() for h in (H, Hkv, Hkv))
    cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    fns, outs = {}, {}
    o = torch.empty_like(q)
    fns["pipelink"] = lambda: attention(q, k, v, variant, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L, out=o,
                                        kernel_dir=BIN)
    outs["pipelink"] = (o, lambda x: x)
    oc = torch.empty_like(q)
    fns["pipelink:control"] = lambda: attention(q, k, v, variant, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L,
                                                out=oc, control=True, kernel_dir=BIN)
    outs["pipelink:control"] = (oc, lambda x: x)
    # one by one: each sequence as its own [1, H, L_i, D] call (contiguous copies made once, outside timing)
    cuts = [sum(lens[:i]) for i in range(B + 1)]
    seqs = [tuple(t[cuts[i]:cuts[i + 1]].transpose(0, 1).unsqueeze(0).contiguous() for t in (q, k, v))
            for i in range(B)]
    one = [torch.empty_like(s[0]) for s in seqs]

    def one_by_one():
        for (qs, ks, vs), os_ in zip(seqs, one):
            attention(qs, ks, vs, variant, out=os_, kernel_dir=BIN)
    fns["pipelink_one_by_one"] = one_by_one
    outs["pipelink_one_by_one"] = (one, lambda xs: torch.cat([x[0].transpose(0, 1) for x in xs]))
    # SDPA over the zero-padded batch [B, H, L, D]
    pad = [torch.zeros(B, h, L, D, device="cuda", dtype=torch.bfloat16) for h in (H, Hkv, Hkv)]
    for i, s in enumerate(seqs):
        for p, t in zip(pad, s):
            p[i, :, :t.shape[2]] = t[0]
    causal = variant == "causal"
    mask = None if causal else (torch.arange(L, device="cuda")[None, :] < torch.tensor(lens, device="cuda")[:, None])[
        :, None, None, :]
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
        po = torch.empty(B, H, L, D, device="cuda", dtype=torch.bfloat16)

        def f(backend=backend, po=po):
            with sdpa_kernel([backend]):
                po.copy_(F.scaled_dot_product_attention(*pad, attn_mask=mask, is_causal=causal, enable_gqa=Hkv != H))
        try:
            f()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a backend that refuses the shape is left out
            print(f"    ({name}: does not run: {type(e).__name__}: {str(e).splitlines()[0][:100]})")
            continue
        fns[name] = f
        outs[name] = (po, lambda x, lens=lens: torch.cat([x[i, :, :n].transpose(0, 1) for i, n in enumerate(lens)]))
    return fns, outs, (q, k, v, cu)


def linked_over_control(variant, inputs, rounds) -> tuple[float, float]:
    """Linked / control of the varlen kernel, each on its own output and then on the other's
    (gpu_bench.both_ways_ratio) -> (median ratio, IQR)."""
    import torch
    q, k, v, cu = inputs
    oa, ob = torch.empty_like(q), torch.empty_like(q)

    def call(o, control):
        return lambda: attention(q, k, v, variant, cu_seqlens_q=cu, cu_seqlens_k=cu, out=o, control=control,
                                 kernel_dir=BIN)
    r, iqr, *_ = both_ways_ratio((call(oa, False), call(ob, True)), (call(ob, False), call(oa, True)), 3, rounds)
    return r, iqr


def check(fns, outs, inputs, variant) -> list[str]:
    """Every column against the fp32 reference, outputs poisoned with NaN first -> failures."""
    import torch
    q, k, v, cu = inputs
    ref = varlen_reference(q, k, v, cu.cpu(), cu.cpu(), variant)
    bad = []
    for name, f in fns.items():
        out, read = outs[name]
        for t in (out if isinstance(out, list) else [out]):
            t.fill_(float("nan"))
        f()
        torch.cuda.synchronize()
        got = read(out).float()
        err = (got - ref).abs()
        n_bad = int((err > ATOL + RTOL * ref.abs()).sum()) + int(torch.isnan(got).sum())
        print(f"  check {name:<22} beyond tolerance or unwritten: {n_bad}, max err {float(err.nan_to_num(9).max()):.2e}")
        if n_bad:
            bad.append(name)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="causal,full")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--spread", choices=["even", "geometric"], default="even", help="the lengths from 1 to --max-len")
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--sustain-ms", type=float, default=200.0)
    ap.add_argument("--pair-rounds", type=int, default=20, help="ABBA rounds of the linked / control ratio")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    if not variants or any(v not in VARLEN_VARIANTS for v in variants):
        ap.error(f"--variants {a.variants!r}: a comma list of {', '.join(VARLEN_VARIANTS)}")
    for flag, value, lo in (("--sequences", a.sequences, 1), ("--max-len", a.max_len, 1), ("--kv-heads", a.kv_heads, 1),
                            ("--rounds", a.rounds, 1), ("--pair-rounds", a.pair_rounds, 1)):
        if value < lo:
            ap.error(f"{flag} {value}: at least {lo}")
    if 32 % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads}: a divisor of the 32 query heads")
    if not require_gpu("attention_ragged_bench.py"):
        return 1
    lens = lengths(a.sequences, a.max_len, a.spread)
    rows, failed = [], []
    for variant in variants:
        fns, outs, inputs = columns(variant, lens, 32, a.kv_heads)
        failed += [f"{variant}:{n}" for n in check(fns, outs, inputs, variant)]
        t = interleaved(fns, 2, a.rounds, skip_failing=True, sustain_ms=a.sustain_ms)
        pair, iqr = linked_over_control(variant, inputs, a.pair_rounds)
        sdpa = {n: x for n, x in t.items() if n.startswith("sdpa")}
        best = min(sdpa, key=sdpa.get) if sdpa else None
        pairs = sum(n * (n + 1) // 2 if variant != "full" else n * n for n in lens)  # (query, key) pairs computed
        row = {"variant": variant, "lens": lens, **t, "best_sdpa": best,
               "tflops": 4 * 128 * 32 * pairs / t["pipelink"] / 1e6,
               "tflops_one_by_one": 4 * 128 * 32 * pairs / t["pipelink_one_by_one"] / 1e6,
               "vs_one_by_one": t["pipelink_one_by_one"] / t["pipelink"],
               "vs_sdpa_padded": sdpa[best] / t["pipelink"] if best else float("nan"),
               "linked_over_control": pair, "linked_over_control_iqr": iqr}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nus per call, median of {a.rounds} rotating rounds, each timed graph >= {a.sustain_ms:.0f} ms of calls "
          f"({a.sequences} sequences of 1 .. {a.max_len} tokens spread {a.spread}, H=32, Hkv={a.kv_heads}, d=128, bf16)")
    for r in rows:
        others = "  ".join(f"{n} {r[n]:.1f}" for n in r if isinstance(r[n], float) and n.startswith(("sdpa", "pipelink"))
                           and not n.startswith("tflops"))
        print(f"  {r['variant']:<8} {others}  | vs one by one {r['vs_one_by_one']:.3f}x, vs {r['best_sdpa']} padded "
              f"{r['vs_sdpa_padded']:.3f}x, {r['tflops']:.0f} TFLOP/s (one by one {r['tflops_one_by_one']:.0f}), "
              f"linked/control {r['linked_over_control']:.4f} "
              f"(both ways, IQR {r['linked_over_control_iqr']:.4f})")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if failed:
        print(f"FAIL: {', '.join(failed)} beyond tolerance")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
