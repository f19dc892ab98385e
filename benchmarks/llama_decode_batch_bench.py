"""The decode megakernel at batch > 1 (issue 43's B = 8 / 32 rows; kernels/decode/decode_models.bzl
DECODE_BATCHES): correctness of a ragged batch against the fp32 reference, and µs per step.

    python3 benchmarks/llama_decode_batch_bench.py check     # llama_tiny_b3/b20, llama3_1b_b4/b8/b32: ragged
                                                             # prompts through the attention prefill, then
                                                             # teacher-forced steps, every row vs fp32
    python3 benchmarks/llama_decode_batch_bench.py bench --contexts 1024,4096 --rounds 4
        # Llama-3.2-1B shapes: llama3_1b_b8, llama3_1b_b4 and llama3_1b (batch 1) per step, torch.compile
        # of a batch-8 bf16 step (CUDA graph); sustained (each timed graph >= 200 ms), interleaved rounds
    ncu --launch-skip 2 --launch-count 1 ... python3 benchmarks/llama_decode_batch_bench.py profile \
        --batches 32 --contexts 1024                    # one step of a link, for ncu

Each check runs in a child process under a watchdog, as llama_decode_bench.py's workers. Reads
bazel-bin/kernels/decode (tools/bazel build //kernels/decode/... --output_groups=+control) and, for
the prefill, bazel-bin/kernels/attention's attn_causal_d64.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "benchmarks", ROOT / "kernels" / "decode", ROOT / "tools"):
    sys.path.insert(0, str(p))

from llama_decode_bench import _at_context, _config, _torch_step, _weights, hbm, run_watched, variant_files  # noqa: E402

# (model, batch, prompt lengths, decode steps): what `check` runs, each in a worker
CHECKS = [("llama_tiny", 3, (7, 1, 300), 24),
          ("llama_tiny", 20, (7, 1, 300, 2, 64, 65, 127, 128, 129, 3, 5, 200, 250, 31, 33, 17, 16, 15, 100, 90), 12),
          ("llama3_2_1b", 8, (1, 5, 17, 64, 100, 300, 513, 1000), 16),
          ("llama3_2_1b", 4, (1000, 1, 40, 7), 16),
          ("llama3_2_1b", 32, (1, 3, 7, 15, 31, 64, 100, 127, 128, 129, 200, 255, 256, 257, 300, 400, 450, 511, 512,
                               513, 600, 700, 777, 800, 850, 900, 950, 999, 1000, 17, 40, 5), 8)]


def variant_target(model: str, batch: int, variant: str) -> str:
    """The link of `model` at `batch` built with another package (decode_models.bzl's _<variant> links)."""
    import llama_pack
    return f"{llama_pack.kernel_target(_config(model), batch)}_{variant}"


def batch_one(model: str, batch: int, prompts: list[int], steps: int, variant: str | None = None) -> int:
    """B prompts of different lengths through the attention prefill (each into its own cache) and
    their last tokens through one megakernel step, then `steps` teacher-forced steps of the whole
    batch; every sequence's logits rows against the fp32 reference, poisoned before each step.
    variant: the link <target>_<variant> instead of the default one."""
    import torch
    import llama_reference as ref
    from llama_megakernel import ST_POS, ST_WORDS, MegakernelStep
    cfg = _config(model)
    w = _weights(cfg, seed=9)
    gen = torch.Generator().manual_seed(12)
    ids = [torch.randint(0, cfg.vocab, (n + steps,), generator=gen).cuda() for n in prompts]
    files = variant_files(variant_target(model, batch, variant)) if variant else None
    s = MegakernelStep(cfg, w, max_seq=max(prompts) + steps, batch=batch, kernel_files=files)
    s.logits.fill_(float("nan"))
    first, _ = s.prefill([x[:n] for x, n in zip(ids, prompts)])
    rows = [first.double().cpu().reshape(batch, -1)]  # batch 1: logits are [vocab]
    for i in range(steps):
        s.logits.fill_(float("nan"))
        s.set_tokens([int(x[n + i]) for x, n in zip(ids, prompts)])
        s.launch()
        rows.append(s.logits.double().cpu().reshape(batch, -1))
    torch.cuda.synchronize()
    got = torch.stack(rows, 1)  # [B, steps + 1, vocab]
    worst, bad, mism = 0.0, [], 0
    for b, (x, n) in enumerate(zip(ids, prompts)):
        want = ref.prefill(w, cfg, x[None])[0][0, n - 1:].double().cpu()
        r = ref.agreement(got[b], want)
        worst, mism = max(worst, r["worst_rel"]), mism + len(r["token_mismatches"])
        if not (r["ok"] and bool(torch.isfinite(got[b]).all())):
            bad.append(b)
    pos = [int(s.state[ST_WORDS * b + ST_POS]) for b in range(batch)]
    ok = not bad and pos == [n + steps for n in prompts]
    print(f"RESULT {'correct' if ok else 'wrong'} {files[0].stem if files else s.target} prompts {list(prompts)} + {steps} steps: worst rel "
          f"{worst:.2e} (tol 2e-2), decisive token mismatches {mism}, wrong sequences {bad}, positions {pos}",
          flush=True)
    return 0 if ok else 1


def worker_args(model, batch, prompts, steps, variant=None) -> list[str]:
    return ["worker", "--model", model, "--batch", str(batch), "--prompts", ",".join(map(str, prompts)),
            "--steps", str(steps)] + (["--variant", variant] if variant else [])


def cmd_check(a) -> int:
    """Every CHECKS row with its default link, then with each --variant's link where it is built."""
    bad = 0
    rows = list(CHECKS) + [(*row, v) for v in a.variant or () for row in CHECKS
                           if variant_files(variant_target(row[0], row[1], v))[0].is_file()]
    for row in rows:
        outcome, said = run_watched(worker_args(*row), a.watchdog, __file__)
        bad += outcome != "correct"
        print(f"{'PASS' if outcome == 'correct' else 'FAIL'}  {said}", flush=True)
    return 1 if bad else 0


def cmd_bench(a) -> int:
    import torch
    import llama_models as lm
    from gpu_bench import interleaved
    from llama_megakernel import MegakernelStep, default_kernel_dir
    cfg = lm.MODELS["llama3_2_1b"]
    w = _weights(cfg, seed=1)
    contexts = [int(c) for c in a.contexts.split(",")]
    max_seq = max(contexts) + 1
    batches = [int(b) for b in a.batches.split(",")]
    steps = {f"b{b}": MegakernelStep(cfg, w, max_seq=max_seq, batch=b) for b in batches}
    if a.control:  # the first batch's single-unit control cubin, on the same buffers (linked / control)
        b0 = f"b{batches[0]}"
        steps[b0 + "_control"] = steps[b0].sharing_buffers(Path(str(steps[b0].manifest_path).replace(
            ".manifest.json", ".control.cubin")))
    for c in a.also or ():  # an earlier build of the first batch's target, on the same buffers
        b0 = f"b{batches[0]}"
        steps[f"{b0}_{Path(c).stem}"] = steps[b0].sharing_buffers(Path(c))
    for n in a.also_target or ():  # another link at the first batch (other facts: its own buffers, packed for it)
        d = default_kernel_dir()
        steps[f"b{batches[0]}_{n}"] = MegakernelStep(cfg, w, max_seq=max_seq, batch=batches[0],
                                                     kernel_files=(d / f"{n}.cubin", d / f"{n}.manifest.json"))
    s1 = steps.get("b1") or next(iter(steps.values()))
    weights = s1.bufs["weights"].numel() * 2 + s1.bufs["head"].numel() * 2
    kv_token = cfg.layers * cfg.kv_heads * cfg.head_dim * 2 * 2  # K and V bytes a cached position
    print(f"{torch.cuda.get_device_name()}: weights a step {weights / 1e9:.3f} GB at {hbm() / 1e12:.2f} TB/s; "
          "floor = (weights + every sequence's K/V) / HBM")
    for c in contexts:
        fns = {k: _at_context(s, c) for k, s in steps.items()}
        if a.compile_batch and c <= a.torch_max_context:
            fns[f"compile_b{a.compile_batch}"] = _torch_step(cfg, w, c + 1, c, compiled=True, batch=a.compile_batch)
        t = interleaved(fns, inner=20, rounds=a.rounds, sustain_ms=200.0, skip_failing=True)
        for k, us in t.items():
            b = int(k.split("_b")[-1]) if k.startswith("compile") else int(k[1:].split("_")[0])
            floor = (weights + b * c * kv_token) / hbm() * 1e6
            extra = ""
            if k.startswith("b") and f"compile_b{b}" in t:
                extra = f"  torch.compile / ours {t[f'compile_b{b}'] / us:.3f}"
            if k.endswith("_control"):
                extra = f"  linked / control {t[k.removesuffix('_control')] / us:.4f}"
            elif k.startswith("b") and "_" in k:
                extra = f"  {k.split('_')[0]} / it {t[k.split('_')[0]] / us:.4f}"
            print(f"context {c:>6}  {k:>12}  {us:9.1f} us a step  {us / b:8.1f} us a token  floor {floor:7.1f} us  "
                  f"{100 * floor / us:5.1f}% of floor{extra}", flush=True)
    return 0


def cmd_profile(a) -> int:
    """Three launches of the first --batches link at the first --contexts, every sequence at that
    context (the caches random), for ncu --launch-skip 2 --launch-count 1: one step's profile."""
    import torch
    import llama_models as lm
    from llama_megakernel import MegakernelStep
    cfg = lm.MODELS["llama3_2_1b"]
    c, b = int(a.contexts.split(",")[0]), int(a.batches.split(",")[0])
    run = _at_context(MegakernelStep(cfg, _weights(cfg, seed=1), max_seq=c + 1, batch=b), c)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    print(f"profile: llama3_2_1b batch {b} context {c}: 3 launches", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["check", "bench", "worker", "profile"])
    ap.add_argument("--model", default="llama_tiny", choices=["llama_tiny", "llama3_2_1b"])
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--prompts", default="7,1,300", help="worker: each sequence's prompt length")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--watchdog", type=float, default=240.0)
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--batches", default="8,4,1", help="bench: the linked batches timed side by side")
    ap.add_argument("--compile-batch", type=int, default=8, help="bench: torch.compile's batch (0: none)")
    ap.add_argument("--torch-max-context", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--control", action="store_true", help="bench: the first batch's control cubin in the same rounds")
    ap.add_argument("--also-target", action="append", metavar="TARGET",
                    help="bench: another //kernels/decode link at the first batch (other facts, e.g. another "
                         "down_chunks), on its own buffers, packed for it")
    ap.add_argument("--variant", action="append", metavar="SUFFIX",
                    help="check: also each row's link <target>_SUFFIX where it is built (a candidate's); worker: that link")
    ap.add_argument("--also", action="append", metavar="CUBIN",
                    help="bench: an earlier build of the first batch's target (its cubin) in the same rounds")
    a = ap.parse_args(argv)
    from gpu_bench import refused_as_fail, require_gpu
    if not require_gpu(f"llama_decode_batch_bench.py {a.cmd}"):
        return 1
    if a.cmd == "worker":
        return refused_as_fail(lambda x: batch_one(x.model, x.batch, [int(n) for n in x.prompts.split(",")], x.steps,
                                                   (x.variant or [None])[-1]), a)
    return refused_as_fail({"check": cmd_check, "bench": cmd_bench, "profile": cmd_profile}[a.cmd], a)


if __name__ == "__main__":
    sys.exit(main())
