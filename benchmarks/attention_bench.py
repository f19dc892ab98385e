"""Attention variants on the H200 (issue 10): correctness, sanitizers, linked vs control, baselines.

Reads the kernels Bazel built (nothing is compiled or linked here):

    tools/bazel build //kernels/attention/... --output_groups=+control     # on the CPU machine
    python3 benchmarks/attention_bench.py all                               # on the GPU machine

Subcommands (`all` runs check, sanitize, pair, bench):
  check     every variant, linked and control, on fresh random inputs (q, k, v ~ N(0, 1) bf16),
            output poisoned with NaN first: every element must be written and
            |out - ref| <= 2e-2 + 2e-2 |ref| everywhere against an fp32 reference of the same
            mask / score function (P is rounded to bf16 as in FA3: ~0.4% relative). Bad inputs
            must be refused with their R-* code.
  sanitize  compute-sanitizer memcheck / racecheck / synccheck on each linked variant (small
            shapes, attn kernels only); fails if the tool is missing.
  pair      linked / control per variant: ABBA rounds of CUDA-graph replays, each kernel on its own
            output and then on the other's (gpu_bench.both_ways_ratio), median ratio.
  bench     prefill B=1, H=32, d=128 at S = 4K, 8K, 32K: causal vs SDPA's fastest backend
            (flash / cuDNN / efficient) (sliding window, document and block-sparse vs
            FlexAttention compiled: attention_flex_bench.py); decode (q_len 1) over KV 4K..128K and batch 1..64
            vs SDPA's backends and FlexAttention. Graph replays, interleaved rounds, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "attention"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import attention_check  # noqa: E402
from attention import VARIANTS, attention, create_block_mask  # noqa: E402
from attention_varlen import VARLEN_VARIANTS  # noqa: E402
from attention_check import ATOL, RTOL, docs_for, entry_variant, paged_cache, rand_qkv, variant_kwargs  # noqa: E402
from gpu_bench import (both_ways_ratio, expect, interleaved, parse_builds, parse_counts, parse_shapes,  # noqa: E402
                       require_gpu, run_gates, sanitizer)

BIN = Path(os.environ.get("PIPELINK_ATTENTION_DIR") or ROOT / "bazel-bin" / "kernels" / "attention")
WINDOW = 1024


def sparse_pred(b, h, q, k):  # ~10% of blocks, every Q block keeps some
    return ((q // 128) * 13 + (k // 128) * 7) % 10 == 0


def split_dim(v: str) -> tuple[str, int]:
    """'causal' -> ('causal', 128); 'causal:64' -> ('causal', 64) (the attn_core_d64 build; :256 likewise)."""
    name, _, d = v.partition(":")
    return name, int(d or 128)


# The bench's names: the entry's variants, and decode_uniform / decode_streamk (variant "decode"
# with schedule= "uniform" (attn_decode) / "streamk" (attn_decode_streamk); plain "decode" lets the
# entry pick by shape), and decode_paged / prefill_paged (attn_decode_paged, attn_prefill_paged over
# pages: attention_check.check_paged), and varlen_<variant> (attn_varlen_<variant>: a ragged batch,
# attention_check.check_ragged).
NAMES = VARIANTS + ("decode_uniform", "decode_streamk", "decode_paged", "prefill_paged") + tuple(
    f"varlen_{v}" for v in VARLEN_VARIANTS)


def check_one(variant, B, H, Lq, Lkv, control, D=128):
    """attention_check.check_one on the kernels in BIN."""
    return attention_check.check_one(variant, B, H, Lq, Lkv, control, D, kernel_dir=BIN)


def cmd_check(a) -> int:
    import torch
    rows = []
    for vd in a.variants:
        variant, D = split_dim(vd)
        shapes = ([(1, 2, 1, 4096), (2, 3, 16, 8192), (3, 2, 5, 384),
                   (5, 32, 1, 8192), (5, 32, 2, 4096)] if entry_variant(variant) == "decode"  # 160 heads: two splits / one
                  else [(1, 2, 256, 256), (2, 3, 1024, 1024), (1, 2, 2048, 2048),
                        (1, 32, 2048, 2048)])  # 512 tiles: persistent CTAs take 3-4 each (tile boundaries)
        if variant == "full":
            shapes.append((1, 2, 256, 1024))
        for kind in ("linked", "control"):
            for B, H, Lq, Lkv in shapes:
                ok, msg = check_one(variant, B, H, Lq, Lkv, kind == "control", D)
                rows.append((vd, kind, f"B={B} H={H} Lq={Lq} Lkv={Lkv}", ok, msg))
    q, k, v = rand_qkv(1, 2, 256, 256)
    refusals = [
        ("fp16 q", lambda: attention(q.half(), k, v, "causal", kernel_dir=BIN), "R-DTYPE"),
        ("block_sparse Lq % 128", lambda: attention(q[:, :, :200].contiguous(), k[:, :, :200].contiguous(),
                                                    v[:, :, :200].contiguous(), "block_sparse",
                                                    block_mask=create_block_mask(lambda b, h, q_, k_: k_ <= q_, None,
                                                                                 None, 200, 200, device="cuda"),
                                                    kernel_dir=BIN), "R-SHAPE"),
        ("ragged, one offsets tensor", lambda: attention(q[0].transpose(0, 1).contiguous(),
                                                         k[0].transpose(0, 1).contiguous(),
                                                         v[0].transpose(0, 1).contiguous(), "causal",
                                                         cu_seqlens_q=torch.tensor([0, 256], dtype=torch.int32,
                                                                                   device="cuda"), kernel_dir=BIN),
         "R-PARAM"),
        ("d = 96", lambda: attention(q[..., :96].contiguous(), k[..., :96].contiguous(), v[..., :96].contiguous(),
                                     "full", kernel_dir=BIN), "R-SHAPE"),
        ("alibi slopes", lambda: attention(q, k, v, "alibi", slopes=[1.0], kernel_dir=BIN), "R-PARAM"),
        ("causal Lq != Lkv", lambda: attention(q, torch.cat([k, k], 2), torch.cat([v, v], 2), "causal",
                                               kernel_dir=BIN), "R-SHAPE"),
        ("no block mask", lambda: attention(q, k, v, "block_sparse", kernel_dir=BIN), "R-PARAM"),
        ("window 0", lambda: attention(q, k, v, "sliding", window=0, kernel_dir=BIN), "R-PARAM"),
        ("decode 17 rows", lambda: attention(q[:, :, :17].contiguous(), k, v, "decode", kernel_dir=BIN), "R-SHAPE"),
        ("unknown variant", lambda: attention(q, k, v, "nope", kernel_dir=BIN), "R-PARAM"),
        ("non-contiguous", lambda: attention(q.transpose(1, 2), k, v, "full", kernel_dir=BIN), "R-LAYOUT"),
        ("doc ids int64", lambda: attention(q, k, v, "document", doc_ids=torch.zeros(1, 256, dtype=torch.int64,
                                                                                     device="cuda"),
                                            kernel_dir=BIN), "R-DTYPE"),
    ]
    for name, fn, code in refusals:
        rows.append(("refusal", "", name, *expect(fn, code)))
    bad = 0
    for r in rows:
        bad += not r[3]
        print(f"{'PASS' if r[3] else 'FAIL'}  {r[0]:<13} {r[1]:<8} {r[2]:<28} {r[4]}")
    print(f"check: {len(rows) - bad}/{len(rows)} passed (tolerance |err| <= {ATOL} + {RTOL} |ref|, fp32 reference)")
    return 1 if bad else 0


# ---- timing -------------------------------------------------------------------------------

def sdpa_fns(q, k, v, causal):
    """SDPA per backend (enable_gqa where k and v have fewer heads than q); a backend that
    refuses the shape is reported and left out."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    fns = {}
    gqa = k.shape[1] != q.shape[1]
    for name, b in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                    ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
        def f(b=b):
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        try:
            f()
            fns[name] = f
        except Exception as e:  # noqa: BLE001
            print(f"    ({name} unavailable: {str(e).splitlines()[0][:100]})")
    return fns


_flex = None


def compiled_flex():
    """torch.compile of flex_attention, compiled once for every Flex column."""
    global _flex
    if _flex is None:
        import torch
        from torch.nn.attention.flex_attention import flex_attention
        _flex = torch.compile(flex_attention, dynamic=False)
    return _flex


def flex_fn(q, k, v, mask_mod, score_mod=None):
    from torch.nn.attention.flex_attention import create_block_mask as fcbm
    flex = compiled_flex()
    B, H, Lq, _ = q.shape
    bm = fcbm(mask_mod, None, None, Lq, k.shape[2], device="cuda", _compile=True) if mask_mod else None
    gqa = k.shape[1] != H
    f = lambda: flex(q, k, v, block_mask=bm, score_mod=score_mod, enable_gqa=gqa)  # noqa: E731
    f()
    return f


def flex_paged_fn(q, kp, vp, table, kv_len):
    """FlexAttention's paged decode (torch.nn.attention.experimental._paged_attention) over the same
    pages in the same shuffled order as ours: its physical layout [1, Hkv, pages * page_size, d] holds
    our pool's bytes, its page table is our block table, and the logical block mask (blocks of a
    page) is converted to physical pages as PagedAttention does it. -> a function, or raises."""
    import torch
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask as fcbm
    flex = compiled_flex()
    n_pages, hkv, ps, d = kp.shape
    B, per = table.shape
    pa = PagedAttention(n_pages, ps, B, device=str(q.device))
    pages = table.long()
    pa.page_table[:, :per] = pages
    pa.physical_to_logical[torch.arange(B, device=q.device)[:, None], pages] = torch.arange(per, device=q.device)
    if hasattr(pa, "seq_lens"):  # (newer torch: lengths below the capacity; 2.11 masks by pages alone)
        pa.seq_lens[:] = kv_len
    pa.capacity[:] = per * ps
    pa.empty_pages = []
    kc, vc = (t.permute(1, 0, 2, 3).reshape(1, hkv, n_pages * ps, d) for t in (kp, vp))
    logical = fcbm(lambda b, h, q_idx, kv_idx: kv_idx >= 0, B, None, 1, kv_len, device=str(q.device), BLOCK_SIZE=ps)
    bm = pa.convert_logical_block_mask(logical)
    f = lambda: flex(q, kc, vc, block_mask=bm, enable_gqa=True)  # noqa: E731
    f()
    return f


def cmd_bench(a) -> int:
    import torch
    table = []
    for S in a.seqs:
        B, H, D = a.batch, a.heads, a.head_dim
        q, k, v = rand_qkv(B, H, S, S, seed=S, Hkv=a.kv_heads, D=D)
        inner = max(1, 16384 // S)
        flops_full = 4 * B * H * S * S * D
        cases = {  # the masked variants vs FlexAttention: attention_flex_bench.py
            "causal": ({}, lambda: sdpa_fns(q, k, v, True), lambda: flex_fn(q, k, v, lambda b, h, i, j: j <= i), 0.5),
        }
        for variant in a.prefill:
            kw, sdpa, flex, frac = cases[variant]
            outs = {n: torch.empty_like(q) for n in ("pl", "ctl")}
            fns = {"pipelink": lambda: attention(q, k, v, variant, out=outs["pl"], kernel_dir=BIN, **kw),
                   "pipelink:control": lambda: attention(q, k, v, variant, out=outs["ctl"], control=True,
                                                        kernel_dir=BIN, **kw)}
            for name, bdir in a.builds:  # other builds: column pipelink_<name>
                fns[f"pipelink_{name}"] = (lambda o=torch.empty_like(q), d=bdir:
                                           attention(q, k, v, variant, out=o, kernel_dir=d, **kw))
            if sdpa:
                fns.update(sdpa())
            if flex and (variant != "causal" or a.flex_causal):
                try:
                    t0 = time.time()  # a cold inductor cache took > 45 s on a fresh device machine
                    print(f"    (flex {variant} S={S}: compiling)", flush=True)
                    fns["flex_compiled"] = flex()
                    print(f"    (flex {variant} S={S}: compiled in {time.time() - t0:.1f} s)", flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"    (flex unavailable: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
            t = interleaved(fns, inner, a.rounds, skip_failing=True, sustain_ms=a.sustain_ms)
            if "pipelink" not in t:
                print(f"FAIL {variant} S={S}: pipelink was not timed")
                continue
            base = {n: x for n, x in t.items() if not n.startswith("pipelink")}
            best = min(base, key=base.get) if base else None
            row = {"kind": "prefill", "variant": variant, "S": S, "D": D, **{n: x for n, x in t.items()}, "best_baseline": best,
                   "speedup": base[best] / t["pipelink"] if best else float("nan")}
            if frac:
                row["tflops"] = flops_full * frac / t["pipelink"] / 1e6
            table.append(row)
            print(json.dumps(row), flush=True)
    for B, KV in a.decode:
        H, Hkv, D = a.heads, a.kv_heads, a.head_dim  # Hkv < H: grouped-query decode (Llama 3: 8 of 32)
        q, k, v = rand_qkv(B, H, 1, KV, seed=KV + B, Hkv=Hkv, D=D)
        out = torch.empty_like(q)
        ctl = torch.empty_like(q)
        fns = {"pipelink": lambda: attention(q, k, v, "decode", out=out, kernel_dir=BIN),
               "pipelink:control": lambda: attention(q, k, v, "decode", out=ctl, control=True, kernel_dir=BIN)}
        for sched in ("uniform", "streamk"):  # each schedule forced (pipelink: the entry's pick by shape)
            fns[f"pipelink_{sched}"] = (lambda o=torch.empty_like(q), sched=sched:
                                        attention(q, k, v, "decode", out=o, schedule=sched, kernel_dir=BIN))
        for name, bdir in a.builds:  # other builds: column pipelink_<name>
            fns[f"pipelink_{name}"] = (lambda o=torch.empty_like(q), d=bdir:
                                       attention(q, k, v, "decode", out=o, kernel_dir=d, schedule=a.build_schedule))
        for n in a.decode_splits:  # the split count swept: columns pipelink_s<n> (the default's own column: pipelink)
            if n <= KV // 128:
                fns[f"pipelink_s{n}"] = (lambda o=torch.empty_like(q), n=n:
                                         attention(q, k, v, "decode", out=o, splits=n, kernel_dir=BIN))
        for ps in a.paged:  # the same cache in FlashInfer HND pages (shuffled): columns pipelink_paged<ps>
            kp, vp, pages = paged_cache(k, v, ps, seed=KV + ps)
            lens = torch.full((B,), KV, dtype=torch.int32, device=q.device)
            for col, bdir in ((f"pipelink_paged{ps}", BIN), *((f"pipelink_{n}_paged{ps}", d) for n, d in a.builds)):
                fns[col] = (lambda o=torch.empty_like(q), kp=kp, vp=vp, pages=pages, lens=lens, d=bdir:
                            attention(q, kp, vp, "decode", out=o, block_table=pages, seq_lens=lens, kernel_dir=d))
        fns.update(sdpa_fns(q, k, v, False))
        for ps in a.flex_paged:  # FlexAttention's paged decode on the same pages, checked against SDPA first
            kp, vp, pages = paged_cache(k, v, ps, seed=KV + ps)
            try:
                t0 = time.time()
                f = flex_paged_fn(q, kp, vp, pages, KV)
                ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
                err = ((f().float() - ref).abs() - (ATOL + RTOL * ref.abs())).max().item()
                if err > 0:
                    print(f"    (flex paged {ps}: wrong by {err:.3g} past the tolerance; left out)")
                else:
                    fns[f"flex_paged{ps}"] = f
                    print(f"    (flex paged {ps}: compiled and checked in {time.time() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"    (flex paged {ps} unavailable: {type(e).__name__}: {str(e).splitlines()[0][:160]})")
        if a.flex_decode:
            try:
                fns["flex_compiled"] = flex_fn(q, k, v, None)
            except Exception as e:  # noqa: BLE001
                print(f"    (flex decode unavailable: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
        t = interleaved(fns, 20, a.rounds, skip_failing=True, sustain_ms=a.sustain_ms)
        if "pipelink" not in t:
            print(f"FAIL decode B={B} KV={KV}: pipelink was not timed")
            continue
        base = {n: x for n, x in t.items() if not n.startswith("pipelink")}
        best = min(base, key=base.get) if base else None
        kv_bytes = 2 * B * Hkv * KV * D * 2
        row = {"kind": "decode", "variant": "decode", "B": B, "KV": KV, "Hkv": Hkv, "D": D, **t, "best_baseline": best,
               "speedup": base[best] / t["pipelink"] if best else float("nan"),
               "tbs": kv_bytes / t["pipelink"] / 1e6}
        for ps in a.flex_paged:  # our paged decode over Flex's, the same pages (x > 1: ours faster)
            if f"flex_paged{ps}" in t and f"pipelink_paged{ps}" in t:
                row[f"paged{ps}_x_flex"] = t[f"flex_paged{ps}"] / t[f"pipelink_paged{ps}"]
        table.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nus per call, median of {a.rounds} interleaved rounds of CUDA-graph replays (prefill B={a.batch}, "
          f"H={a.heads}, Hkv={a.kv_heads}, d={a.head_dim}, bf16)")
    for r in table:
        shape = f"S={r['S']}" if r["kind"] == "prefill" else f"B={r['B']} KV={r['KV']} Hkv={r['Hkv']}"
        others = "  ".join(f"{n} {r[n]:.3f}x" if "_x_" in n else f"{n} {r[n]:.1f}" for n in r
                           if isinstance(r[n], float) and n not in ("pipelink", "speedup", "tflops", "tbs"))
        extra = f" {r['tflops']:.0f} TFLOP/s" if "tflops" in r else (f" {r['tbs']:.2f} TB/s" if "tbs" in r else "")
        print(f"  {r['variant']:<13} {shape:<16} pipelink {r['pipelink']:9.1f}{extra}  | {others}  | "
              f"vs {r['best_baseline']}: {r['speedup']:.3f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


def cmd_pair(a) -> int:
    import torch
    rows = []
    for vd in a.variants:
        variant, D = split_dim(vd)
        decode = entry_variant(variant) == "decode"
        B, H, Lq, L = (8, 32, 1, 16384) if decode else (1, 32, 4096, 4096)
        q, k, v = rand_qkv(B, H, Lq, L, seed=1, D=D)
        kw, _ = variant_kwargs(variant, B, H, L, q.device)
        variant = entry_variant(variant)
        if variant == "sliding":
            kw = {"window": WINDOW}
        if vd.split(":")[0] in ("decode_paged", "prefill_paged"):  # the same problem in HND pages of 64 tokens
            if vd.startswith("prefill"):
                q = q[:, :, :1024].contiguous()  # chunked prefill: the last 1024 of 4096 tokens
            k, v, table = paged_cache(k, v, 64, seed=7)
            kw = {"block_table": table, "seq_lens": torch.full((B,), L, dtype=torch.int32, device=q.device)}
            variant = "decode" if vd.startswith("decode") else "causal"
        elif vd.startswith("varlen_"):  # a ragged batch: 16 sequences of 1 .. 4096 tokens, packed
            lens = [1 + round(i * 4095 / 15) for i in range(16)]
            cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
            q = torch.randn(sum(lens), H, D, device="cuda").bfloat16()
            k, v = torch.randn_like(q), torch.randn_like(q)
            kw = {"cu_seqlens_q": cu, "cu_seqlens_k": cu, **({"window": WINDOW} if variant == "sliding" else
                                                               {"softcap": 30.0} if variant == "softcap" else {})}
        oa, ob = torch.empty_like(q), torch.empty_like(q)
        def call(o, control):
            return lambda: attention(q, k, v, variant, out=o, control=control, kernel_dir=BIN, **kw)

        # Each kernel on its own output, then on the other's: where a buffer lies moved document
        # linked / control by 0.23% with identical SASS (BENCHMARKS.md, "Method").
        r, iqr, ta, tb, r1, r2 = both_ways_ratio((call(oa, False), call(ob, True)), (call(ob, False), call(oa, True)),
                                                 10 if variant == "decode" else 3, a.rounds)
        rows.append((vd, ta, tb, r, iqr))
        print(f"  {vd:<16} linked {ta:9.2f} us  control {tb:9.2f} us  linked/control {r:.4f}  IQR {iqr:.4f}"
              f"  (own {r1:.4f}, swapped {r2:.4f})", flush=True)
    worst = max(abs(r[3] - 1) for r in rows)
    print(f"pair: {len(rows)} variants, geomean {statistics.geometric_mean([r[3] for r in rows]):.4f}, "
          f"worst |linked/control - 1| = {worst * 100:.3f}%")
    return 0


def cmd_sanitize(a) -> int:
    san = sanitizer()
    if san is None:
        print("FAIL compute-sanitizer not found: the sanitizer gate cannot pass without it")
        return 1
    import concurrent.futures as cf

    def run(job):
        vd, tool = job
        variant, D = split_dim(vd)
        # API errors off: torch's cuInit probes (34 host-API records, no device fault) made every
        # memcheck fail; device memory errors in the attn_ kernels are still reported and gate.
        cmd = [san, "--tool", tool, "--error-exitcode", "9", "--print-limit", "10", "--kernel-name", "kns=attn_",
               *(["--report-api-errors", "no"] if tool == "memcheck" else []),
               sys.executable, __file__, "one", "--variant", variant, "--dim", str(D)]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(cmd, 124, "", f"TIMEOUT after {a.timeout} s")
        return vd, tool, p, time.time() - t0

    jobs = [(v, t) for v in a.variants for t in a.tools.split(",")]
    bad, n = 0, len(jobs)
    with cf.ThreadPoolExecutor(a.jobs) as ex:  # one GPU, several small checked launches at once
        for variant, tool, p, dt in ex.map(run, jobs):
            text = p.stdout + p.stderr
            summary = [ln.strip("= ") for ln in text.splitlines() if "SUMMARY" in ln]
            ok = p.returncode == 0 and "RESULT OK" in text
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {variant:<16} {tool:<10} rc={p.returncode} {' '.join(summary)} "
                  f"({dt:.1f} s)", flush=True)
            if not ok:  # the findings first, without host backtraces
                keep = [ln for ln in text.splitlines() if ln.strip(" =") and "Host Frame" not in ln]
                print("    " + "\n    ".join(keep[:30]))
    print(f"sanitize: {n - bad}/{n} clean")
    return 1 if bad else 0


def cmd_one(a) -> int:
    """One small checked launch (what the sanitizer runs)."""
    # prefill: 288 tiles on the 132 SMs, so each CTA crosses tile boundaries under the sanitizer
    # decode_uniform: 8 splits a head, then 132 heads of one split each (the combine's direct path);
    # decode (stream-K): 4 CTAs a head, ranges across heads; then 132 heads, 2 blocks each, on 132 CTAs
    shapes = [(2, 2, 3, 1024), (1, 132, 2, 1024)] if entry_variant(a.variant) == "decode" else [(1, 36, 1024, 1024)]
    bad = 0
    for shape in shapes:
        ok, msg = check_one(a.variant, *shape, control=False, D=a.dim)
        bad += not ok
        print(("RESULT OK " if ok else "RESULT WRONG ") + msg)
    return 1 if bad else 0


def cmd_prof(a) -> int:
    """Three launches of one variant at the bench's shape (B=1, H=32, S=--seqs[0]; decode: the
    first --decode shape B x KV with --kv-heads), then three of cuDNN's SDPA on the same inputs
    (when it runs there), for ncu:
    ncu --clock-control none --section SpeedOfLight --section WarpStateStats -k regex:attn_
        --launch-skip 2 --launch-count 1 python3 benchmarks/attention_bench.py prof --variant causal"""
    import torch
    decode = entry_variant(a.variant) == "decode"
    B, S = a.decode[0] if decode else (1, a.seqs[0])
    H, Lq = 32, 1 if decode else S
    q, k, v = rand_qkv(B, H, Lq, S, seed=3, Hkv=a.kv_heads if decode else H)
    kw, _ = variant_kwargs(a.variant, B, H, S, q.device)
    variant = entry_variant(a.variant)
    if a.variant == "sliding":  # the masks of the benches (attention_flex_bench.py)
        kw = {"window": WINDOW}
    elif a.variant == "block_sparse":
        kw = {"block_mask": create_block_mask(sparse_pred, None, None, S, S)}
    elif a.variant == "document":
        kw = {"doc_ids": docs_for(B, S, S, q.device, mean=1024)}
    out = torch.empty_like(q)
    for _ in range(3):
        attention(q, k, v, variant, out=out, kernel_dir=BIN, **kw)
    base = sdpa_fns(q, k, v, a.variant == "causal").get("sdpa_cudnn")  # the baseline beside it
    for _ in range(3 if base else 0):
        base()
    torch.cuda.synchronize()
    print(f"prof: {a.variant} B={B} H={H} Hkv={k.shape[1]} Lq={Lq} Lkv={S}: 3 launches" + (", then 3 of cuDNN's SDPA" if base else ""))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["check", "pair", "bench", "sanitize", "one", "prof", "all"])
    ap.add_argument("--variants", default=",".join(NAMES), help="name, or name:64 / name:256 (head dim 64 / 256)")
    ap.add_argument("--variant", default="causal")
    ap.add_argument("--dim", type=int, default=128, help="one: head dim (64 / 256: the attn_core_d64 / _d256 build)")
    ap.add_argument("--tools", default="memcheck,racecheck,synccheck")
    ap.add_argument("--seqs", default="4096,8192,32768")
    ap.add_argument("--prefill", default="causal")
    ap.add_argument("--decode", default="1x4096,1x32768,1x131072,8x32768,32x8192,64x4096")
    ap.add_argument("--kv-heads", type=int, default=32, choices=[1, 2, 4, 8, 16, 32],
                    help="bench: K/V heads of the 32 query heads, prefill and decode (8: Llama-3-8B's GQA)")
    ap.add_argument("--heads", type=int, default=32, choices=[8, 16, 32, 64], help="bench: query heads")
    ap.add_argument("--head-dim", type=int, default=128, choices=[64, 128, 256],
                    help="bench: head dim of prefill and decode (the attn_<variant>_d64 / _d256 builds)")
    ap.add_argument("--batch", type=int, default=1, choices=range(1, 65), metavar="B",
                    help="bench: prefill batch (default 1)")
    ap.add_argument("--paged", default="", help="bench: decode page sizes to time beside contiguous (16,64)")
    ap.add_argument("--flex-causal", action="store_true")
    ap.add_argument("--flex-decode", action="store_true")
    ap.add_argument("--flex-paged", default="", help="bench: FlexAttention's paged decode at these page sizes (16,64)")
    ap.add_argument("--build-schedule", choices=["uniform", "streamk"], help="bench: decode schedule of --builds")
    ap.add_argument("--decode-splits", default="", help="bench: split counts to time beside the default (1,2,4)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sustain-ms", type=float, default=200.0,
                    help="bench: each timed graph holds at least this many ms of calls (0: the fixed counts)")
    ap.add_argument("--jobs", type=int, default=7, help="sanitize: runs at once")
    ap.add_argument("--timeout", type=int, default=150, help="sanitize: seconds per run")
    ap.add_argument("--builds", default="", help="bench: name=dir,... more builds (columns pipelink_<name>)")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.variants = [v for v in a.variants.split(",") if v]
    a.seqs = parse_counts(ap, "--seqs", a.seqs, 128)
    a.prefill = [v for v in a.prefill.split(",") if v]
    a.builds = parse_builds(ap, a.builds, "attn_*.manifest.json")
    a.decode = parse_shapes(ap, "--decode", a.decode)
    a.decode_splits = parse_counts(ap, "--decode-splits", a.decode_splits)
    a.paged = parse_counts(ap, "--paged", a.paged, minimum=16)
    a.flex_paged = parse_counts(ap, "--flex-paged", a.flex_paged, minimum=16)
    for flag, sizes in (("--paged", a.paged), ("--flex-paged", a.flex_paged)):
        if any(ps not in (16, 32, 64, 128) for ps in sizes):
            ap.error(f"{flag} {sizes}: page sizes of 16, 32, 64 or 128 tokens")
    if a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads} does not divide --heads {a.heads}")
    if not require_gpu(f"attention_bench.py {a.cmd}"):
        return 1
    if a.cmd == "one":
        return cmd_one(a)
    if a.cmd == "prof":
        return cmd_prof(a)
    return run_gates(a, {"check": cmd_check, "sanitize": cmd_sanitize, "pair": cmd_pair, "bench": cmd_bench})


if __name__ == "__main__":
    sys.exit(main())
