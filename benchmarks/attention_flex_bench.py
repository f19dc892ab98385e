"""Masked attention variants vs FlexAttention compiled and SDPA on the H200 (issue 10).

B = 1, H = 32, d = 128, bf16, S = 8K and 32K: sliding window (W = 1024), document mask
(documents of 1..2047 tokens, mean ~1024) and block-sparse (~10% of 128 x 128 blocks kept,
every Q block keeps some), each timed side by side in one process: pipelink (linked), its
single-unit control, optionally an earlier build (--v2, same aux layouts where noted),
FlexAttention compiled (torch.compile(flex_attention, dynamic=False), block mask from
create_block_mask), SDPA with the same dense boolean mask (S <= --sdpa-mask-max) and SDPA
causal (flash / cuDNN: the dense causal reference). CUDA-graph replays in interleaved rounds
(gpu_bench.interleaved), medians in us.

A cold FlexAttention compile (inductor + triton) can take minutes on a fresh machine, so:
    warm   compiles each (variant, S) in its own subprocess, in parallel, each with a time limit
           (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR under --cache; tar them back for the next
           machine). A compile past its limit is reported 'timed out', not fatal.
    bench  sets the same cache dirs; each flex column compiles under SIGALRM (--compile-timeout):
           past it the column is recorded as 'timed out' and the rest of the table still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import attention_bench as ab  # noqa: E402  (puts tools/ and kernels/attention on sys.path)
from attention import attention, create_block_mask  # noqa: E402
from gpu_bench import interleaved, parse_builds, parse_counts, require_gpu  # noqa: E402

WINDOW = 1024
VARIANTS = ("sliding", "document", "block_sparse")
BATCH, KV_HEADS = 1, 32  # --batch, --kv-heads (Llama-3-8B's attention: --kv-heads 8, grouped-query)


def cache_env(cache: str) -> None:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache) / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(Path(cache) / "triton")


def problem(variant, S):
    """q, k, v, our kwargs, the mask predicate (for flex and the dense SDPA mask)."""
    q, k, v = ab.rand_qkv(BATCH, 32, S, S, seed=S, Hkv=KV_HEADS)
    if variant == "sliding":
        return q, k, v, {"window": WINDOW}, lambda b, h, i, j: (j <= i) & (i - j < WINDOW)
    if variant == "document":
        docs = ab.docs_for(BATCH, S, S, "cuda", mean=1024)
        return q, k, v, {"doc_ids": docs}, lambda b, h, i, j: docs[b, i] == docs[b, j]
    return q, k, v, {"block_mask": create_block_mask(ab.sparse_pred, None, None, S, S)}, ab.sparse_pred


def flex_compiled(q, k, v, pred):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask as fcbm
    from torch.nn.attention.flex_attention import flex_attention
    fa = torch.compile(flex_attention, dynamic=False)
    bm = fcbm(pred, q.shape[0] if q.shape[0] > 1 else None, None, q.shape[2], k.shape[2], device="cuda",
              _compile=True)
    f = lambda: fa(q, k, v, block_mask=bm, enable_gqa=k.shape[1] != q.shape[1])  # noqa: E731
    f()
    torch.cuda.synchronize()
    return f


def rows_reference(q, k, v, pred, heads=2, n=512):
    """fp32 reference of query rows [S/2, S/2 + n) of heads 0..heads-1 (masked rows give 0)."""
    import torch
    S = q.shape[2]
    r0 = S // 2
    qi = torch.arange(r0, r0 + n, device=q.device)[:, None]
    ki = torch.arange(S, device=q.device)[None, :]
    kv = [h // (q.shape[1] // k.shape[1]) for h in range(heads)]  # grouped-query: query head h's K/V head
    k, v = k[:, kv], v[:, kv]
    s = torch.einsum("hqd,hkd->hqk", q[0, :heads, r0:r0 + n].float(), k[0, :heads].float()) / q.shape[3] ** 0.5
    allow = pred(torch.tensor(0, device=q.device), torch.tensor(0, device=q.device), qi, ki)
    p = torch.softmax(s.masked_fill(~allow, float("-inf")), -1).nan_to_num(0.0)
    return torch.einsum("hqk,hkd->hqd", p, v[0, :heads].float()), (heads, r0, n)


def rows_error(out, ref_where):
    """max |out - ref| over the reference's rows; NaN (an unwritten row) reads as 9."""
    ref, (heads, r0, n) = ref_where
    return float((out[0, :heads, r0:r0 + n].float() - ref).abs().nan_to_num(9.0).max())


class Timeout(Exception):
    pass


def with_limit(seconds, fn):
    def on_alarm(signum, frame):
        raise Timeout(f"over {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cmd_compile(a) -> int:
    """One (variant, S) flex compile (what `warm` runs in a subprocess)."""
    cache_env(a.cache)
    t0 = time.time()
    q, k, v, _, pred = problem(a.variant, a.seqs[0])
    flex_compiled(q, k, v, pred)
    print(f"compiled flex {a.variant} S={a.seqs[0]} in {time.time() - t0:.1f} s", flush=True)
    return 0


def cmd_warm(a) -> int:
    cache_env(a.cache)
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS=str(a.threads), PYTHONUNBUFFERED="1")
    procs = []
    for S in a.seqs:
        for variant in a.variants:
            cmd = [sys.executable, __file__, "compile", "--variant", variant, "--seqs", str(S), "--cache", a.cache,
                   "--batch", str(a.batch), "--kv-heads", str(a.kv_heads)]
            procs.append((variant, S, time.time(), subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                                                   stderr=subprocess.STDOUT, text=True,
                                                                   start_new_session=True)))
    for variant, S, t0, p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, a.timeout - (time.time() - t0)))
            tail = [ln for ln in out.splitlines() if ln.startswith("compiled") or "Error" in ln][-2:]
            print(f"warm {variant} S={S}: rc={p.returncode} {time.time() - t0:.1f} s  {' | '.join(tail)}", flush=True)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            print(f"warm {variant} S={S}: timed out after {a.timeout} s", flush=True)
    return 0


def v2_launch(v2dir, variant, q, k, v, out, kw):
    """The earlier build (its aux layouts: sliding = window word; block_sparse's first 8 header
    words and lists are unchanged and the bench mask has no PARTIAL block; document: not run)."""
    from attention import _variant_aux, load
    kern = load(variant, kernel_dir=v2dir)
    aux = _variant_aux(variant, q, 1, 32, q.shape[2], block_mask=kw.get("block_mask"), window=kw.get("window"),
                       doc_ids=None, softcap=None)
    S = q.shape[2]
    params = {"q": q, "k": k, "v": v, "o": out, "aux": aux, "q_len": S, "kv_len": S, "bh": 32, "kv_group": 1,
              "scale": 1.0 / 128 ** 0.5}
    return lambda: kern.launch_with(params)


def cmd_bench(a) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cache_env(a.cache)
    table = []
    for S in a.seqs:
        inner = max(1, 16384 // S)
        causal_ref = None
        for variant in a.variants:
            q, k, v, kw, pred = problem(variant, S)
            outs = {n: torch.empty_like(q) for n in ("pl", "ctl", "v2")}
            fns = {"pipelink": lambda: attention(q, k, v, variant, out=outs["pl"], kernel_dir=ab.BIN, **kw),
                   "pipelink:control": lambda: attention(q, k, v, variant, out=outs["ctl"], control=True,
                                                        kernel_dir=ab.BIN, **kw)}
            if a.v2 and a.v2_same_aux:  # another build with this tree's aux layouts
                fns["pipelink_v2"] = lambda: attention(q, k, v, variant, out=outs["v2"], kernel_dir=a.v2, **kw)
            elif a.v2 and variant != "document":
                fns["pipelink_v2"] = v2_launch(a.v2, variant, q, k, v, outs["v2"], kw)
            for name, bdir in a.builds:  # other builds with this tree's aux layouts: column pipelink_<name>
                outs[name] = torch.empty_like(q)
                fns[f"pipelink_{name}"] = (lambda o=outs[name], d=bdir:
                                           attention(q, k, v, variant, out=o, kernel_dir=d, **kw))
            notes = {}
            t0 = time.time()
            try:
                fns["flex_compiled"] = with_limit(a.compile_timeout, lambda: flex_compiled(q, k, v, pred))
                notes["flex_compile_s"] = round(time.time() - t0, 1)
            except Timeout:
                notes["flex_compiled"] = f"timed out ({a.compile_timeout} s)"
            except Exception as e:  # noqa: BLE001
                notes["flex_compiled"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
            if S <= a.sdpa_mask_max:
                qi = torch.arange(S, device="cuda")
                bi = torch.arange(BATCH, device="cuda")[:, None, None, None]
                dense = pred(bi, torch.tensor(0, device="cuda"), qi[None, None, :, None], qi[None, None, None, :])
                gqa = KV_HEADS != 32

                def sdpa_mask(dense=dense):
                    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
                        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=gqa)
                fns["sdpa_mask"] = sdpa_mask
            if causal_ref is None and a.sdpa_causal:
                causal_ref = {}
                for name, b in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def f(b=b):
                        with sdpa_kernel([b]):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                  enable_gqa=k.shape[1] != q.shape[1])
                    fns[f"sdpa_causal_{name}"] = f
            # correctness of ours at this size: the same output as flex (bf16 vs bf16)
            t = interleaved(fns, inner, a.rounds, skip_failing=True, sustain_ms=a.sustain_ms)
            if "pipelink" in t:  # both against an fp32 reference of 512 rows of 2 heads (mid-sequence)
                outs["pl"].fill_(float("nan"))
                fns["pipelink"]()
                ref = rows_reference(q, k, v, pred)
                notes["pipelink_err"] = rows_error(outs["pl"], ref)
                if "flex_compiled" in fns:
                    notes["flex_err"] = rows_error(fns["flex_compiled"](), ref)
            row = {"variant": variant, "S": S, **t, **notes}
            if "pipelink" in t and "flex_compiled" in t:
                row["vs_flex"] = t["flex_compiled"] / t["pipelink"]
            if "pipelink" in t and "sdpa_mask" in t:
                row["vs_sdpa_mask"] = t["sdpa_mask"] / t["pipelink"]
            table.append(row)
            print(json.dumps(row), flush=True)
            del fns, outs
            torch.cuda.empty_cache()
    print(f"\nus per call, median of {a.rounds} interleaved rounds of CUDA-graph replays (B={BATCH}, H=32, "
          f"Hkv={KV_HEADS}, d=128, bf16)")
    for r in table:
        flex = r.get("flex_compiled")
        flex_s = f"{flex:9.1f}" if isinstance(flex, float) else f"{r.get('flex_compiled', 'n/a')!s:>9}"
        cols = "  ".join(f"{n} {r[n]:.1f}" for n in r if isinstance(r[n], float) and
                         (n.startswith("sdpa") or n.startswith("pipelink_") or n == "pipelink:control"))
        print(f"  {r['variant']:<13} S={r['S']:<6} pipelink {r.get('pipelink', float('nan')):9.1f}  flex {flex_s}  "
              f"vs flex {r.get('vs_flex', float('nan')):.3f}x  | {cols}")
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["warm", "compile", "bench"])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--variant", default="sliding")
    ap.add_argument("--seqs", default="8192,32768")
    ap.add_argument("--cache", default="/tmp/flexcache")
    ap.add_argument("--timeout", type=int, default=300, help="warm: seconds per compile subprocess")
    ap.add_argument("--threads", type=int, default=4, help="warm: inductor compile threads per subprocess")
    ap.add_argument("--compile-timeout", type=int, default=120, help="bench: seconds per flex column's compile")
    ap.add_argument("--sdpa-mask-max", type=int, default=8192, help="bench: largest S for the dense-mask SDPA column")
    ap.add_argument("--sdpa-causal", action="store_true", help="bench: add SDPA causal columns (flash, cuDNN)")
    ap.add_argument("--v2", help="bench: a directory with an earlier build's cubins (column pipelink_v2)")
    ap.add_argument("--v2-same-aux", action="store_true", help="bench: --v2 takes this tree's aux layouts (all variants)")
    ap.add_argument("--builds", default="", help="bench: name=dir,... more builds with this tree's aux layouts "
                    "(columns pipelink_<name>)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--sustain-ms", type=float, default=200.0,
                    help="bench: each timed graph holds at least this many ms of calls (0: the fixed counts)")
    ap.add_argument("--batch", type=int, default=1, choices=range(1, 65), metavar="B", help="batch (default 1)")
    ap.add_argument("--kv-heads", type=int, default=32, choices=[1, 2, 4, 8, 16, 32],
                    help="K/V heads of the 32 query heads (8: Llama-3-8B's grouped-query attention)")
    ap.add_argument("--json")
    a = ap.parse_args()
    global BATCH, KV_HEADS
    BATCH, KV_HEADS = a.batch, a.kv_heads
    a.variants = [v for v in a.variants.split(",") if v]
    a.seqs = parse_counts(ap, "--seqs", a.seqs, 128)
    a.builds = parse_builds(ap, a.builds, "attn_*.manifest.json")
    if not require_gpu(f"attention_flex_bench.py {a.cmd}"):
        return 1
    return {"warm": cmd_warm, "compile": cmd_compile, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
