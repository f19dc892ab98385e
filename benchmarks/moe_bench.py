"""One MoE layer (Qwen3-30B-A3B, or another linked model: --model) on the H200 (issues 9, 41):
correctness, linked vs control, baselines.

Shapes: x [T, 2048] bf16, router_w [128, 2048], w13 [128, 1536, 2048] (rows 0..767 of w13[e]
gate, 768..1535 up), w2 [128, 2048, 768]; top-8, weights renormalised to sum 1:
    logits = x @ router_w^T (f32), p = softmax(logits), (w, e) = top8(p), w /= sum(w)
    out[t] = sum_k w_k * (silu(x @ gate[e_k]^T) * (x @ up[e_k]^T)) @ w2[e_k]^T      -> bf16

    tools/bazel build //kernels/... --output_groups=+control     # CPU machine (moe_step, if present)
    # device tool, carry [".xfer/...", ".whl"] (liger-kernel):
    python3 benchmarks/moe_bench.py all [--tokens 1,16,128,1024,4096,16384] [--model qwen3_235b_a22b]

--model takes a model a kernel target serves (kernels/moe/moe_models.py LINKED): the shapes below
become that model's (hidden, inter, experts, top-k) and the moe_step columns load its target.
DeepSeek-V3's grouped sigmoid routing is moe_reference's (float32 in the baselines, float64 in
the reference) and its shared expert a dense SwiGLU added to every implementation's output (the
kernel's session adds it with torch on the launch's stream, moe_step.add_shared_expert).

Columns:
  moe_step, moe_step:control  kernels/moe/moe_step.py over bazel-bin/kernels/moe_step{,.control}.cubin
                              (skipped, with the reason, while that entry or cubin is missing)
  torch                       router + stable sort by expert + torch._grouped_mm (gate/up and
                              down) + weighted index_add combine, eager
  torch.compile               the same function under torch.compile (default mode, dynamic=True:
                              one compile with T symbolic; its first-call time is printed)
  liger                       liger-kernel 0.8.5's Triton fused MoE (LigerFusedMoEFunction: routing
                              metadata, gather + grouped GEMM + SwiGLU, down GEMM, gather-sum),
                              after the same torch router; LIGER_FUSED_MOE_AUTOTUNE=0 (one pinned
                              config: its autotuner would compile 32 configs per kernel). It calls
                              .item() once per step, so it cannot be captured: timed eagerly.
  sglang, sglang:kernels      SGLang 0.5.23's Triton fused MoE with the config SGLang picks for the
                              GPU, E and N (its Triton's folder, else another shipped one, else
                              its default tiles; the pick is printed)
                              (kernels/moe/moe_sglang.py; PIPELINK_SGLANG_DIR = the unpacked wheel):
                              the whole step, and its four kernels alone on routing made beforehand.

Subcommands (each prints one table; `all` runs check, sanitize, pair, bench):
  check     fresh random inputs per T, moe_step's output poisoned (NaN) first; float64 reference
            on every token for T <= 128 and on 256 sampled tokens otherwise (per expert, on the
            GPU); pass iff every element is written and
            |out - ref| <= 2e-2 * (|ref| + rms(ref)) everywhere (bf16 output and the bf16
            intermediate h give ~1e-2 of rms; the baselines, which also round gate/up to bf16,
            are held to 4e-2); tokens whose 8th and 9th logits are within 1e-4
            (routing is then precision-dependent) are excluded and counted.
  sanitize  compute-sanitizer memcheck / racecheck / synccheck on the linked moe_step at each T of
            --sanitize-tokens (default 1 and a ragged 37; 3 for layers over 2 GB), torch-free, through
            experiments/symbol_link/symbol_link_counterexample.py's target, checked against its f64
            reference; the runs go in parallel; fails if the tool is missing.
  pair      moe_step linked / control: ABBA rounds of CUDA-graph replays, each kernel on its own
            buffers, then on the other's (gpu_bench.both_ways_ratio).
  bench     every column per T: graphs (or eager calls for liger) in rounds with rotating order,
            median us per step.
  profile   (not in `all`) one launch per T between cudaProfilerStart/Stop, for
            ncu --profile-from-start off (the weight stream's DRAM throughput)
  bound     (not in `all`) the weight-read bound per T: torch.sum over as many experts' w13 and
            w2 as the step routes to, and cuBLAS streaming them in their layout (gemm16: 16 rows
            times each), timed beside moe_step and torch eager; eager / read is the most any step
            that reads its weights once could gain over eager.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")

import moe_sglang  # noqa: E402
from gpu_bench import both_ways_ratio, interleaved, parse_builds, parse_counts, require_gpu, run_gates, sanitizer  # noqa: E402

import moe_models  # noqa: E402

H, I, E, TOP_K = 2048, 768, 128, 8  # --model sets these and TARGET (main)
MODEL, TARGET, RENORM = "qwen3_30b_a3b", "moe_step", True
# A bias model's (gpt-oss) router_b, b13 and b2, made by weights(); empty for the others. Every
# column reads them from here, so the subcommands call all implementations with (x, rw, w13, w2).
BIASES: dict = {}
# DeepSeek-V3's score_bias (f32) and shared expert (shared_w13, shared_w2), made by weights();
# empty for the others.
EXTRAS: dict = {}
TOKENS = [1, 16, 128, 1024, 4096, 16384]
TOL = 2e-2  # moe_step (f32 accumulators into SwiGLU; h and the expert outputs rounded to bf16)
# The baselines also round gate/up to bf16 before SwiGLU (grouped_mm's bf16 output), as the models
# do: one more rounding, so on fresh inputs their max error reached 2.04e-2 (torch, T = 1024).
BASELINE_TOL = 4e-2
BIN = Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")  # as moe_step.load


def _shown(path: Path) -> str:
    """path as a message names it: relative to the checkout where it lies inside it (a
    PIPELINK_MOE_STEP_DIR elsewhere, or relative to the working directory, is named as given)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ---- inputs and the float64 reference ------------------------------------------------------

def weights(seed=None):
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % 2**31)
    u = lambda *s: torch.rand(*s, device="cuda", generator=g) * 2 - 1  # noqa: E731

    def ub(*s, scale):  # bf16 uniform * scale, drawn 16 rows of dim 0 at a time (DeepSeek-V3's w13 is 15 GB)
        out = torch.empty(*s, dtype=torch.bfloat16, device="cuda")
        for i in range(0, s[0], 16):
            out[i:i + 16] = (u(*out[i:i + 16].shape) * scale).bfloat16()
        return out
    router_w = (u(E, H) / H**0.5).bfloat16()
    w13 = ub(E, 2 * I, H, scale=2 / H**0.5)
    w2 = ub(E, H, I, scale=2 / I**0.5)
    m = moe_models.MODELS[MODEL]
    EXTRAS.clear()
    if m.routing == moe_models.SIGMOID_GROUPED:  # a bias spread like the scores': groups and experts reorder
        EXTRAS["score_bias"] = u(E) * 0.1
    if m.shared_inter:
        EXTRAS.update(shared_w13=ub(2 * m.shared_inter, H, scale=2 / H**0.5),
                      shared_w2=ub(H, m.shared_inter, scale=2 / m.shared_inter**0.5))
    BIASES.clear()
    if moe_models.MODELS[MODEL].biases:  # gate/up biases up to 16: many gates and ups pass gpt-oss's clamp (7)
        BIASES.update(router_b=u(E).bfloat16(), b13=(u(E, 2 * I) * 16).bfloat16(), b2=(u(E, H) / 2).bfloat16())
    return router_w, w13, w2, g


def tokens(T, g):
    import torch
    return (torch.rand(T, H, device="cuda", generator=g) * 2 - 1).bfloat16()


def reference(x, router_w, w13, w2, rows):
    """float64 out[rows] and which of those rows route ambiguously (8th/9th logit gap < 1e-4)."""
    import torch
    if EXTRAS:  # DeepSeek-V3: moe_reference's grouped routing and shared expert
        import moe_reference
        out, gap = moe_reference.reference(moe_models.MODELS[MODEL], x[rows],
                                           {"router_w": router_w, "w13": w13, "w2": w2, **EXTRAS})
        return out, gap < 1e-4
    xd = x[rows].double()
    logits = xd @ router_w.double().t()
    b = {n: v.double() for n, v in BIASES.items()}
    if b:
        logits = logits + b["router_b"]
    top = logits.topk(TOP_K + 1, dim=1)
    ambiguous = (top.values[:, TOP_K - 1] - top.values[:, TOP_K]) < 1e-4
    p = torch.softmax(logits, dim=1)
    wv, ei = p.topk(TOP_K, dim=1)
    wv = wv / wv.sum(1, keepdim=True) if RENORM else wv
    out = torch.zeros(len(rows), H, dtype=torch.float64, device=x.device)
    for e in ei.unique().tolist():
        tk = (ei == e).nonzero()
        t, k = tk[:, 0], tk[:, 1]
        h = xd[t] @ w13[e].double().t() + (b["b13"][e] if b else 0.0)
        a = _activation(h[:, :I], h[:, I:])
        out.index_add_(0, t, wv[t, k, None] * (a @ w2[e].double().t() + (b["b2"][e] if b else 0.0)))
    return out, ambiguous


def _activation(gate, up):
    """The model's activation between the projections (moe_reference's: SwiGLU, or gpt-oss's clamped one)."""
    import moe_reference  # (imports torch)
    return moe_reference.activation(moe_models.MODELS[MODEL], gate, up)


def sample_rows(T, g):
    import torch
    if T <= 128:
        return torch.arange(T, device="cuda")
    edge = torch.tensor([0, 1, 63, 64, 127, 128, T - 1], device="cuda").clamp(max=T - 1)
    return torch.cat([edge, torch.randint(0, T, (249,), device="cuda", generator=g)]).unique()


def error(out, ref, keep) -> tuple[int, float, float]:
    """(unwritten, max |out-ref| / (|ref| + rms(ref)), normwise relative error) over kept rows."""
    import torch
    o, r = out[keep].double(), ref[keep]
    unwritten = int(torch.isnan(o).sum())
    rms = r.pow(2).mean().sqrt()
    d = (o - r).nan_to_num(0.0)
    return unwritten, float((d.abs() / (r.abs() + rms)).max()), float(d.norm() / r.norm())


# ---- implementations -----------------------------------------------------------------------

def route(x, router_w):
    import torch
    if "score_bias" in EXTRAS:  # DeepSeek-V3's grouped sigmoid routing, in float32
        import moe_reference
        ids, wv, _ = moe_reference.route(moe_models.MODELS[MODEL], x, {"router_w": router_w, **EXTRAS}, torch.float32)
        return wv, ids
    logits = x.float() @ router_w.float().t()
    if BIASES:
        logits = logits + BIASES["router_b"].float()
    wv, ei = torch.softmax(logits, dim=1).topk(TOP_K, dim=1)
    return (wv / wv.sum(1, keepdim=True) if RENORM else wv), ei


def torch_step(x, router_w, w13, w2):
    """Router, stable sort by expert, two grouped GEMMs, weighted combine: no host sync."""
    import torch
    T = x.shape[0]
    wv, ei = route(x, router_w)
    flat = ei.flatten()
    order = torch.argsort(flat, stable=True)
    tok = order // TOP_K
    counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    h = torch._grouped_mm(x[tok], w13.transpose(1, 2), offs=offs)
    if BIASES:  # gpt-oss: biases on both projections, its clamped SwiGLU
        e = flat[order]
        h = (h.float() + BIASES["b13"][e].float()).bfloat16()
        a = _activation(h[:, :I].float(), h[:, I:].float()).bfloat16()
    else:
        a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    if BIASES:
        y = y.float() + BIASES["b2"][e].float()
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float() * wv.flatten()[order, None])
    return with_shared(x, out).bfloat16()


def with_shared(x, out):
    """out plus DeepSeek-V3's shared expert of x, as moe_step applies it after its kernel (so every
    column pays the same for it): out as is for the other models."""
    if "shared_w13" not in EXTRAS:
        return out
    import moe_step
    moe_step.add_shared_expert(moe_models.MODELS[MODEL], x, out, EXTRAS["shared_w13"], EXTRAS["shared_w2"])
    return out


def liger_step_factory():
    if BIASES or moe_models.MODELS[MODEL].biases:
        raise moe_sglang.Unavailable(f"Liger's fused MoE has no expert biases or {MODEL}'s activation")
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    def liger_step(x, router_w, w13, w2):
        wv, ei = route(x, router_w)
        return with_shared(x, LigerFusedMoEFunction.apply(x, w13, w2, ei.int(), wv))  # f32 routing weights
    return liger_step


def sglang_factory():
    """moe_sglang.step_factory over PIPELINK_SGLANG_DIR, or raise with the reason it cannot run."""
    root = os.environ.get("PIPELINK_SGLANG_DIR")
    if not root:
        raise moe_sglang.Unavailable("PIPELINK_SGLANG_DIR is not set (kernels/moe/moe_sglang.py says how)")
    m = moe_models.MODELS[MODEL]
    act = None if m.activation == moe_models.SILU else _activation
    step, kernels, prepare = moe_sglang.step_factory(root, route, E, TOP_K, I, biases=BIASES, activation=act)
    if "shared_w13" not in EXTRAS:
        return step, kernels, prepare
    # DeepSeek-V3: the shared expert added to both columns (sglang:kernels still leaves the routing out)
    with_step = lambda x, rw, w13, w2: with_shared(x, step(x, rw, w13, w2))  # noqa: E731
    with_step.configs = step.configs
    return with_step, lambda x, w13, w2, r: with_shared(x, kernels(x, w13, w2, r)), prepare


def moe_step_columns(builds=()) -> tuple[dict, str]:
    """{'moe_step': opener, 'moe_step:control': opener, 'moe_step_<name>': opener for each
    (name, dir) of `builds`} or ({}, why not). opener(x, rw, w13, w2, out, workspaces=None)
    plans once (MoeStep.open) and returns the session's launch: no host work per call;
    opener.step is its MoeStep."""
    entry = ROOT / "kernels" / "moe" / "moe_step.py"
    if not entry.exists():
        return {}, f"{_shown(entry)} does not exist yet"
    cubins = {"moe_step": BIN / f"{TARGET}.cubin", "moe_step:control": BIN / f"{TARGET}.control.cubin"}
    missing = [_shown(p) for p in cubins.values() if not p.exists()]
    manifests = {n: BIN / f"{TARGET}.manifest.json" for n in cubins}
    for name, bdir in builds:  # another build's linked kernel (checked by parse_builds), same rounds
        cubins[f"moe_step_{name}"] = Path(bdir) / f"{TARGET}.cubin"
        manifests[f"moe_step_{name}"] = Path(bdir) / f"{TARGET}.manifest.json"
    if missing:
        return {}, f"not built: {', '.join(missing)} (tools/bazel build //kernels:{TARGET} --output_groups=+control)"
    import moe_step as m
    cls = getattr(m, "MoeStep", None)
    if cls is None:
        return {}, "kernels/moe/moe_step.py has no MoeStep(cubin, manifest) class to load linked and control"
    from pipelink.common.diagnostics import Rejected
    cols = {}
    for name, cubin in cubins.items():
        try:
            k = cls(cubin, manifests[name], model=MODEL)
        except Rejected as e:  # a --builds column that cannot load: say why, keep the rest
            if not name.startswith("moe_step_"):
                return {}, f"{name}: {e}"
            print(f"{name}: column skipped: {e}" + (f" (hint: {e.hint})" if getattr(e, "hint", "") else ""))
            continue
        cols[name] = lambda x, rw, w13, w2, out, workspaces=None, k=k: k.open(x, rw, w13, w2, out,
                                                                             workspaces=workspaces, **BIASES,
                                                                             **EXTRAS).launch
        cols[name].step = k
    return cols, ""


# ---- subcommands ---------------------------------------------------------------------------

def cmd_check(a) -> int:
    import torch
    router_w, w13, w2, g = weights()
    ours, why = moe_step_columns(a.builds)
    if why:
        print(f"moe_step: skipped ({why})")
    impls = {"torch": torch_step}
    try:
        impls["liger"] = liger_step_factory()
    except Exception as e:  # noqa: BLE001
        print(f"liger: skipped ({type(e).__name__}: {e})")
    try:
        impls["sglang"] = sglang_factory()[0]
    except Exception as e:  # noqa: BLE001
        print(f"sglang: skipped ({type(e).__name__}: {e})")
    bad = rows = 0
    for T in a.tokens:
        x = tokens(T, g)
        idx = sample_rows(T, g)
        ref, amb = reference(x, router_w, w13, w2, idx)
        keep = (~amb).nonzero().flatten()
        outs = {}
        for n, f in ours.items():
            outs[n] = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
            f(x, router_w, w13, w2, outs[n])()
        for n, f in impls.items():
            outs[n] = f(x, router_w, w13, w2)
        torch.cuda.synchronize()
        for n, o in outs.items():
            unwritten, err, nerr = error(o[idx], ref, keep)
            tol = TOL if n.startswith("moe_step") else BASELINE_TOL
            ok = unwritten == 0 and err <= tol
            bad += not ok
            rows += 1
            print(f"{'PASS' if ok else 'FAIL'}  {n:<17} T={T:<6} unwritten={unwritten} max_err={err:.2e} "
                  f"norm_rel={nerr:.2e} ({'f64 all' if T <= 128 else f'f64 {len(idx)} sampled'} tokens, "
                  f"{int(amb.sum())} ambiguous excluded, tol {tol})", flush=True)
    print(f"check: {rows - bad}/{rows} passed")
    return 1 if bad else 0


def cmd_bench(a) -> int:
    import torch
    router_w, w13, w2, g = weights()
    ours, why = moe_step_columns(a.builds)
    if why:
        print(f"moe_step columns skipped: {why}")
    try:
        liger = liger_step_factory()
    except Exception as e:  # noqa: BLE001
        liger = None
        print(f"liger column skipped: {type(e).__name__}: {e}")
    try:
        sgl_step, sgl_kernels, sgl_prepare = sglang_factory()
        print(f"sglang config (E={E}, N={I}): {sgl_step.configs}")
    except Exception as e:  # noqa: BLE001
        sgl_step = None
        print(f"sglang columns skipped: {type(e).__name__}: {e}")
    # dynamic=True: one compile with T symbolic for every T (automatic dynamic shapes compiled
    # T = 1 specialised first, then again; static compiles per T cost ~20+ s each there).
    compiled = torch.compile(torch_step, dynamic=True) if a.compile else None
    table = []
    for T in a.tokens:
        x = tokens(T, g)
        fns, graphable = {}, set()
        for n, f in ours.items():
            fns[n] = f(x, router_w, w13, w2, torch.empty(T, H, dtype=torch.bfloat16, device="cuda"))
            graphable.add(n)
        fns["torch"] = lambda: torch_step(x, router_w, w13, w2)
        graphable.add("torch")
        if compiled is not None:
            import time
            t0 = time.perf_counter()
            compiled(x, router_w, w13, w2)
            torch.cuda.synchronize()
            print(f"torch.compile: first call at T={T} took {time.perf_counter() - t0:.1f} s (compile or cache hit)",
                  flush=True)
            fns["torch.compile"] = lambda: compiled(x, router_w, w13, w2)
            graphable.add("torch.compile")
        if liger is not None:
            fns["liger"] = lambda: liger(x, router_w, w13, w2)
        if sgl_step is not None:
            routed = sgl_prepare(x, router_w, w13)
            fns["sglang"] = lambda: sgl_step(x, router_w, w13, w2)
            fns["sglang:kernels"] = lambda: sgl_kernels(x, w13, w2, routed)
            graphable |= {"sglang", "sglang:kernels"}
        t = interleaved(fns, 10 if T <= 1024 else 3, a.rounds, eager=set(fns) - graphable,
                        sustain_ms=a.sustain_ms)
        row = {"T": T, **{k: round(v, 2) for k, v in t.items()}}
        # whole steps only: sglang:kernels leaves the routing out
        base = [v for k, v in t.items() if not k.startswith("moe_step") and k != "sglang:kernels"]
        if "moe_step" in t:
            row["vs_best_baseline"] = round(min(base) / t["moe_step"], 3)
            if "sglang:kernels" in t:
                row["vs_sglang_kernels"] = round(t["sglang:kernels"] / t["moe_step"], 3)
            row["vs_torch_eager"] = round(t["torch"] / t["moe_step"], 3)
        table.append(row)
        print(json.dumps(row), flush=True)
    cols = [c for c in ("moe_step", "moe_step:control", *(f"moe_step_{n}" for n, _ in a.builds),
                        "torch", "torch.compile", "liger", "sglang", "sglang:kernels") if c in table[0]]
    print(f"\nMoE step ({MODEL}), us per step, median over {a.rounds} rotating rounds "
          f"(graph replays of >= {a.sustain_ms:g} ms each; liger eager)")
    print(f"{'T':>6} " + " ".join(f"{c:>16}" for c in cols) + ("  vs best  vs eager" if "moe_step" in cols else ""))
    for r in table:
        tail = f"  {r['vs_best_baseline']:7.3f} {r['vs_torch_eager']:8.3f}" if "moe_step" in r else ""
        print(f"{r['T']:>6} " + " ".join(f"{r.get(c, float('nan')):16.1f}" for c in cols) + tail)
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


def cmd_bound(a) -> int:
    """The weight-read bound at each T: a step reads every routed expert's w13 and w2 once, so
    no step is faster than reading those bytes. Timed side by side with moe_step and the eager
    torch step (same rounds): torch.sum (f32 accumulate) over the same number of contiguous
    expert weights, the fastest read-only stream torch has here. bound x eager = eager / read:
    the most any MoE step could be faster than eager if it did nothing but read its weights.
    `gemm16`: the same weights in their own layout ([rows, K], K contiguous, as the expert's TMA
    boxes read them) streamed by cuBLAS, as two dense GEMMs of 16 random rows (torch.mm over
    w13[:n] viewed [n 1536, 2048] and w2[:n] viewed [n 2048, 768]): compute is negligible there,
    so its rate is what NVIDIA's GEMM gets from these bytes in this layout. `torch:calls`: the
    eager step as plain Python calls instead of graph replays (launch overhead included)."""
    import torch
    router_w, w13, w2, g = weights()
    ours, why = moe_step_columns()
    if why:
        print(f"moe_step column skipped: {why}")
    per_expert = (w13[0].numel() + w2[0].numel()) * w13.element_size()
    table = []
    for T in a.tokens:
        x = tokens(T, g)
        n = int(route(x, router_w)[1].unique().numel())  # routed experts: the weights a step must read
        fns = {"torch": lambda: torch_step(x, router_w, w13, w2),
               "read": lambda: (w13[:n].sum(dtype=torch.float32), w2[:n].sum(dtype=torch.float32))}
        a13 = (torch.rand(16, H, device="cuda", generator=g) * 2 - 1).bfloat16()
        a2 = (torch.rand(16, I, device="cuda", generator=g) * 2 - 1).bfloat16()
        w13v, w2v = w13[:n].view(-1, H), w2[:n].view(-1, I)
        fns["gemm16"] = lambda: (torch.mm(a13, w13v.t()), torch.mm(a2, w2v.t()))
        if "moe_step" in ours:
            fns["moe_step"] = ours["moe_step"](x, router_w, w13, w2,
                                               torch.empty(T, H, dtype=torch.bfloat16, device="cuda"))
        # The same eager step as Python calls, not a graph replay: what launch count costs it.
        fns["torch:calls"] = fns["torch"]
        t = interleaved(fns, 10 if T <= 1024 else 3, a.rounds, eager={"torch:calls"})
        gb = n * per_expert / 1e9
        row = {"T": T, "experts": n, "GB": round(gb, 3), **{k: round(v, 2) for k, v in t.items()},
               "read_TBps": round(gb / t["read"] * 1e3, 3), "bound_vs_eager": round(t["torch"] / t["read"], 3),
               "gemm16_TBps": round(gb / t["gemm16"] * 1e3, 3), "gemm16_vs_eager": round(t["torch"] / t["gemm16"], 3)}
        if "moe_step" in t:
            row["moe_step_TBps"] = round(gb / t["moe_step"] * 1e3, 3)
            row["vs_torch_eager"] = round(t["torch"] / t["moe_step"], 3)
        table.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nweight-read bound, us, median over {a.rounds} rotating rounds of graph replays")
    print(f"{'T':>6} {'experts':>7} {'GB':>6} {'read':>8} {'TB/s':>6} {'gemm16':>8} {'TB/s':>6} {'torch':>8} "
          f"{'bound x eager':>13} {'gemm16 x eager':>14} {'moe_step':>9} {'TB/s':>6} {'x eager':>7} {'torch:calls':>11}")
    for r in table:
        print(f"{r['T']:>6} {r['experts']:>7} {r['GB']:>6.3f} {r['read']:>8.1f} {r['read_TBps']:>6.2f} "
              f"{r['gemm16']:>8.1f} {r['gemm16_TBps']:>6.2f} {r['torch']:>8.1f} {r['bound_vs_eager']:>13.3f} "
              f"{r['gemm16_vs_eager']:>14.3f} {r.get('moe_step', float('nan')):>9.1f} "
              f"{r.get('moe_step_TBps', float('nan')):>6.2f} {r.get('vs_torch_eager', float('nan')):>7.3f} "
              f"{r['torch:calls']:>11.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


def cmd_pair(a) -> int:
    """linked / control, each kernel timed on its own buffers and then on the other's (gpu_bench.
    both_ways_ratio): one cubin against itself moved by up to 1.2% with where its buffers lay."""
    import torch
    ours, why = moe_step_columns()
    if why:
        print(f"pair: skipped ({why})")
        return 0
    router_w, w13, w2, g = weights()
    linked, control = ours["moe_step"], ours["moe_step:control"]
    ratios = []
    for T in a.tokens:
        x = tokens(T, g)
        ol, oc = (torch.empty(T, H, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        own = (linked(x, router_w, w13, w2, ol), control(x, router_w, w13, w2, oc))
        swapped = (linked(x, router_w, w13, w2, oc, workspaces=control.step.kernel.workspace_buffers()),
                   control(x, router_w, w13, w2, ol, workspaces=linked.step.kernel.workspace_buffers()))
        r, iqr, ta, tb, r_own, r_swapped = both_ways_ratio(own, swapped, 10 if T <= 1024 else 3, a.rounds)
        ratios.append(r)
        print(f"  moe_step T={T:<6} linked {ta:9.2f} us  control {tb:9.2f} us  linked/control {r:.4f} (IQR {iqr:.4f}; "
              f"own buffers {r_own:.4f}, exchanged {r_swapped:.4f})", flush=True)
    print(f"pair: geomean {statistics.geometric_mean(ratios):.4f}, worst |linked/control - 1| = "
          f"{max(abs(r - 1) for r in ratios) * 100:.3f}%")
    return 0


def cmd_sanitize(a) -> int:
    """memcheck, racecheck and synccheck at each of --sanitize-tokens (issue 41: T = 1 and a ragged T), all
    runs at once (each its own process and CUDA context; the sanitizer's cost is mostly the host's
    instrumentation, and the machine has cores to spare)."""
    import subprocess
    san = sanitizer()
    if san is None:
        print("FAIL compute-sanitizer not found: the sanitizer gate cannot pass without it")
        return 1
    cubin = BIN / f"{TARGET}.cubin"
    if not cubin.exists():
        print(f"FAIL {_shown(cubin)} is missing: nothing to sanitize")
        return 1
    runs = {}
    for T in a.sanitize_tokens:
        for tool in ("memcheck", "racecheck", "synccheck"):
            cmd = [san, "--tool", tool, "--error-exitcode", "9", "--print-limit", "10", sys.executable,
                   str(ROOT / "experiments" / "symbol_link" / "symbol_link_counterexample.py"), "target",
                   "--kernel", "moe_step", "--tokens", str(T),
                   "--cubin", str(cubin), "--manifest", str(BIN / f"{TARGET}.manifest.json")]
            runs[(T, tool)] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bad = 0
    for (T, tool), proc in runs.items():
        try:
            text, _ = proc.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            proc.kill()
            text = proc.communicate()[0] + "\ntimed out after 540 s"
        ok = proc.returncode == 0 and "RESULT correct" in text
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {TARGET} T={T:<5} {tool:<10} rc={proc.returncode} "
              f"{' '.join(ln for ln in text.splitlines() if 'SUMMARY' in ln or 'RESULT' in ln)}", flush=True)
        if not ok:
            print("    " + "\n    ".join(text.splitlines()[-25:]))
    print(f"sanitize {TARGET}: {len(runs) - bad}/{len(runs)} clean")
    return 1 if bad else 0


def cmd_profile(a) -> int:
    """One launch of moe_step per T between cudaProfilerStart and Stop, on fresh random inputs after
    two warm launches, for ncu --profile-from-start off (BENCHMARKS.md: the weight stream's DRAM
    throughput). Checks the launch's output is written."""
    import torch
    ours, why = moe_step_columns()
    if why:
        print(f"profile: skipped ({why})")
        return 1
    router_w, w13, w2, g = weights()
    for T in a.tokens:
        x = tokens(T, g)
        out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        launch = ours["moe_step"](x, router_w, w13, w2, out)
        launch()
        launch()
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        launch()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profile {TARGET} T={T}: launched once; output written: {not bool(torch.isnan(out).any())}", flush=True)
    return 0


def use_model(name: str) -> None:
    """Every function here reads the layer's shape from these globals."""
    global H, I, E, TOP_K, MODEL, TARGET, RENORM
    m = moe_models.MODELS[name]
    H, I, E, TOP_K, MODEL, TARGET = m.hidden, m.inter, m.experts, m.top_k, m.name, m.kernel
    RENORM = bool(m.facts()["renormalize"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["check", "sanitize", "pair", "bench", "bound", "profile", "all"])
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sustain-ms", type=float, default=200.0,
                    help="bench: each timed graph holds at least this many ms of calls (default %(default)s)")
    ap.add_argument("--sanitize-tokens", help="sanitize: the T of each run (default 1 and a ragged 37, or 3 for "
                                              "layers over 2 GB: Qwen3-235B at T = 37 ran past 500 s)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="leave out the torch.compile column")
    ap.add_argument("--builds", default="", help="check, bench: name=dir,... other builds' moe_step (columns moe_step_<name>)")
    ap.add_argument("--model", default=MODEL, choices=moe_models.LINKED, help="the linked model (default %(default)s)")
    ap.add_argument("--json")
    a = ap.parse_args()
    use_model(a.model)
    a.tokens = parse_counts(ap, "--tokens", a.tokens)
    if a.sanitize_tokens is None:
        a.sanitize_tokens = "1,37" if E * 3 * H * I * 2 <= 2 << 30 else "1,3"  # w13 + w2 bytes
    a.sanitize_tokens = parse_counts(ap, "--sanitize-tokens", a.sanitize_tokens)
    a.builds = parse_builds(ap, a.builds, f"{TARGET}.manifest.json", f"{TARGET}.cubin")
    if not require_gpu(f"moe_bench.py {a.cmd}"):
        return 1
    return run_gates(a, {"check": cmd_check, "sanitize": cmd_sanitize, "pair": cmd_pair, "bench": cmd_bench,
                         "bound": cmd_bound, "profile": cmd_profile})


if __name__ == "__main__":
    sys.exit(main())
