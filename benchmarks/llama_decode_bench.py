"""The decode megakernel of issue 43 on the GPU (//kernels/decode, bazel-bin): correctness,
sanitizers, linked / control, and ms per token against torch at several contexts.

    python3 benchmarks/llama_decode_bench.py check      # llama_tiny x {split, simple, control, unfused} 200 steps,
                                                        # llama3_1b x {split, simple, unfused} 128 steps, qwen3_1_7b
                                                        # 32 steps, graph replays; vs the fp32 reference
    python3 benchmarks/llama_decode_bench.py sanitize --steps 12   # memcheck, racecheck, synccheck: llama_tiny
                                                        # split, simple and unfused, 12 steps each
    python3 benchmarks/llama_decode_bench.py pair       # llama3_1b linked / control, ABBA both orders, context 1024
    python3 benchmarks/llama_decode_bench.py bench [--contexts 16,1024,4096,32768]
    python3 benchmarks/llama_decode_bench.py counterexample   # //experiments:llama_tiny_mutations: the weight
                                                        # stream's tile size changed, plain symbol link vs pipelink

Weights are random bf16 of the model's shapes (no trained model here); the KV cache is filled
with random values up to the context, and every step is timed at that context (each graph step
first resets the position: a 4-byte fill kernel, also in the torch graphs' timing). Sustained
regime: each timed graph holds >= 200 ms of steps; candidates interleaved in rounds (gpu_bench).
The floor is the bytes every step must read (packed weights + head) at 4.8 TB/s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "decode"))
sys.path.insert(0, str(ROOT / "benchmarks"))

HBM = 4.8e12  # the H200's datasheet rate; an H100 (80 GB) has 3.35e12: hbm() picks by the device's name


def hbm() -> float:
    import torch
    return 3.35e12 if "H100" in torch.cuda.get_device_name() else HBM


def _config(model: str = "llama_tiny"):
    """The config of a --model name: the linked test shape, or a published model."""
    import llama_models as lm
    return lm.LLAMA_TINY if model == "llama_tiny" else lm.MODELS[model]


def _weights(cfg, seed: int, device="cuda"):
    """Random weights on the GPU (llama_weights' layout and scale), float32."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, shape in cfg.tensors().items():
        if len(shape) == 1:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g, device=device)
        else:
            out[name] = torch.randn(shape, generator=g, device=device) * (0.5 / shape[1] ** 0.5)
    return out


def _forced(step, ids):
    """Teacher-forced logits [T, vocab] of the kernel, the logits poisoned before every step."""
    import torch
    out = []
    for t in ids[0].tolist():
        step.logits.fill_(float("nan"))
        step.state[0] = t
        step.launch()
        out.append(step.logits.double().cpu())
    torch.cuda.synchronize()
    return torch.stack(out)


# (model, steps, attention, control, unfused): what `check` runs, each in a worker under a watchdog
CHECKS = [("llama_tiny", 200, "split", False, False), ("llama_tiny", 200, "simple", False, False),
          ("llama_tiny", 200, "split", True, False), ("llama_tiny", 200, "split", False, True),
          ("llama3_2_1b", 128, "split", False, False), ("llama3_2_1b", 128, "simple", False, False),
          ("llama3_2_1b", 128, "split", False, True), ("qwen3_1_7b", 32, "split", False, False)]


# Other links of Llama-3.2-1B's composition that check and bench run beside the default build
# (kernels/decode/decode_models.bzl): name -> bazel-bin/kernels/decode/<name>.{cubin,manifest.json};
# sanitize runs the llama_tiny build of each (the name with llama_tiny for llama3_1b). Empty while
# no candidate is waiting to be timed (the per-warp attention became the default).
VARIANTS: tuple = ()
# links of other models with another package, checked (not timed): name -> (model, steps)
MODEL_VARIANTS: dict = {}


def variant_files(name: str) -> tuple:
    from llama_megakernel import default_kernel_dir
    d = default_kernel_dir()
    return d / f"{name}.cubin", d / f"{name}.manifest.json"


def check_one(model: str, steps: int, attention: str, control: bool, unfused: bool, files=None) -> int:
    """One build against the fp32 reference over `steps` teacher-forced steps (in a worker)."""
    import torch
    import llama_reference as ref
    from llama_megakernel import MegakernelStep
    cfg = _config(model)
    w = _weights(cfg, seed=7)
    ids = torch.randint(0, cfg.vocab, (1, steps), generator=torch.Generator().manual_seed(3)).cuda()
    want = ref.prefill(w, cfg, ids)[0][0].double().cpu()
    s = MegakernelStep(cfg, w, max_seq=steps, attention=attention, control=control, unfused=unfused,
                       kernel_files=files)
    got = _forced(s, ids)
    state = s.state.cpu().tolist()
    r = ref.agreement(got, want)
    ok = r["ok"] and bool(torch.isfinite(got).all()) and state[1] == steps and state[2] == 0 \
        and state[0] == int(got[-1].argmax())
    what = Path(files[0]).stem if files else s.target
    print(f"RESULT {'correct' if ok else 'wrong'} {what} control={control} {steps} steps: worst rel "
          f"{r['worst_rel']:.2e} (tol 2e-2) at step {r['worst_step'][1]}, decisive token mismatches "
          f"{len(r['token_mismatches'])}, state {state}", flush=True)
    return 0 if ok else 1


def prefill_one(model: str, prompt: int, steps: int) -> int:
    """A prompt of `prompt` tokens through the attention prefill (llama_prefill: the serving
    attention's causal kernel) and its last token through the megakernel, then `steps`
    teacher-forced decode steps; every logits row against the fp32 reference (in a worker)."""
    import torch
    import llama_reference as ref
    from llama_megakernel import MegakernelStep
    cfg = _config(model)
    w = _weights(cfg, seed=5)
    ids = torch.randint(0, cfg.vocab, (1, prompt + steps), generator=torch.Generator().manual_seed(6)).cuda()
    want = ref.prefill(w, cfg, ids)[0][0, prompt - 1:].double().cpu()
    s = MegakernelStep(cfg, w, max_seq=prompt + steps)
    s.logits.fill_(float("nan"))
    first, _ = s.prefill(ids[:, :prompt])
    got = torch.cat([first.double().cpu(), _forced(s, ids[:, prompt:])]) if steps else first.double().cpu()
    r = ref.agreement(got, want)
    ok = r["ok"] and bool(torch.isfinite(got).all()) and int(s.state[1]) == prompt + steps
    print(f"RESULT {'correct' if ok else 'wrong'} {s.target} attention prefill of {prompt} + {steps} steps: worst rel "
          f"{r['worst_rel']:.2e} (tol 2e-2) at row {r['worst_step'][1]}, decisive token mismatches "
          f"{len(r['token_mismatches'])}", flush=True)
    return 0 if ok else 1


def graph_one() -> int:
    """llama_tiny: a prompt of 5 through the kernel, then 20 replays of one captured step; the
    tokens the kernel chains on the device against the reference's greedy tokens (in a worker)."""
    import torch
    from llama import Llama, ReferenceStep
    from llama_megakernel import MegakernelStep
    cfg = _config()
    w = _weights(cfg, seed=11)
    prompt = torch.randint(0, cfg.vocab, (1, 5), generator=torch.Generator().manual_seed(4))
    s = MegakernelStep(cfg, w, max_seq=64)
    s.prefill(prompt.cuda())
    g = s.graph()
    tokens = [int(s.state[0])]
    for _ in range(20):
        g.replay()
        tokens.append(int(s.state[0]))
    torch.cuda.synchronize()
    m = Llama(cfg, {k: v.cpu() for k, v in w.items()})
    want = m.generate(prompt[0].tolist(), 21, step=ReferenceStep(cfg, m.weights)).tolist()
    agree = next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b), len(want))
    ok = agree >= 19 and int(s.state[1]) == 25  # a near-tie in bf16 may fork the chain late
    print(f"RESULT {'correct' if ok else 'wrong'} llama_tiny graph replays: first {agree} of 21 greedy tokens "
          f"equal the reference's, position {int(s.state[1])}", flush=True)
    return 0 if ok else 1


def run_watched(args: list[str], watchdog: float, script: str = __file__) -> tuple[str, str]:
    """`script`'s worker (this script's by default) with `args` in a child process: (outcome, its
    RESULT line or the reason). A hung kernel is killed with its process, so it costs the
    watchdog, not the run."""
    try:
        p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=watchdog)
    except subprocess.TimeoutExpired:
        return "hang", f"no result in {watchdog:.0f} s (killed)"
    text = p.stdout + p.stderr
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT")), "")
    if line:
        return line.split()[1], line
    tail = text.strip().splitlines()[-1][:160] if text.strip() else ""
    return "failed", f"rc {p.returncode}: {tail}"


def check_args(model, steps, attention, control, unfused) -> list[str]:
    return ["worker-check", "--model", model, "--steps", str(steps), "--attention", attention] + \
        (["--control"] if control else []) + (["--unfused"] if unfused else [])


def cmd_check(a) -> int:
    bad = 0
    prefills = [["worker-prefill", "--model", m, "--prompt", str(p), "--steps", "16"]
                for m, p in (("llama_tiny", 300), ("llama3_2_1b", 1000), ("qwen3_1_7b", 200))]
    variants = [check_args("llama3_2_1b", 128, "split", False, False) + ["--files", *map(str, variant_files(v))]
                for v in VARIANTS if variant_files(v)[0].is_file()]
    variants += [check_args(model, steps, "split", False, False) + ["--files", *map(str, variant_files(v))]
                 for v, (model, steps) in MODEL_VARIANTS.items() if variant_files(v)[0].is_file()]
    for args in [check_args(*row) for row in CHECKS] + variants + prefills + [["worker-graph"]]:
        outcome, said = run_watched(args, a.watchdog)
        bad += outcome != "correct"
        print(f"{'PASS' if outcome == 'correct' else 'FAIL'}  {said}", flush=True)
    return 1 if bad else 0


def worker(attention: str, files: tuple | None = None, steps: int = 70, unfused: bool = False) -> int:
    import torch
    import llama_reference as ref
    from llama_megakernel import MegakernelStep
    cfg = _config()
    w = _weights(cfg, seed=9)
    ids = torch.randint(0, cfg.vocab, (1, steps), generator=torch.Generator().manual_seed(1)).cuda()
    s = MegakernelStep(cfg, w, max_seq=steps + 10, attention=attention, kernel_files=files, unfused=unfused)
    r = ref.agreement(_forced(s, ids), ref.prefill(w, cfg, ids)[0][0].double().cpu())
    print(f"RESULT {'correct' if r['ok'] else 'wrong'} {s.target} worst rel {r['worst_rel']:.2e}", flush=True)
    return 0 if r["ok"] else 1


def cmd_sanitize(a) -> int:
    from gpu_bench import sanitize_jobs
    jobs = [(f"llama_tiny {att}", [sys.executable, __file__, "worker", "--attention", att, "--steps", str(a.steps)])
            for att in ("split", "simple")]
    jobs.append(("llama_tiny unfused", [sys.executable, __file__, "worker", "--unfused", "--steps", str(a.steps)]))
    jobs.append(("llama_tiny_b3 (a ragged batch)", [sys.executable, str(Path(__file__).with_name("llama_decode_batch_bench.py")),
                                                    "worker", "--model", "llama_tiny", "--batch", "3", "--prompts", "7,1,30",
                                                    "--steps", str(a.steps)]))
    wide = [sys.executable, str(Path(__file__).with_name("llama_decode_batch_bench.py")), "worker", "--model",
            "llama_tiny", "--batch", "20", "--prompts", "7,1,30,2,3,4,5,6,8,9,10,11,12,13,14,15,16,17,18,40",
            "--steps", "1"]  # (racecheck: about 80 s a launch)
    jobs.append(("llama_tiny_b20 (wide, ragged)", wide))
    # each variant's llama_tiny build (a Llama-3.2-1B step under racecheck takes minutes)
    tiny = [v.replace("llama3_1b", "llama_tiny", 1) for v in VARIANTS]
    jobs += [(f"llama_tiny {v}", [sys.executable, __file__, "worker", "--steps", str(a.steps),
                                  "--files", *map(str, variant_files(v))]) for v in tiny if variant_files(v)[0].is_file()]
    return sanitize_jobs(jobs, timeout=a.watchdog)


def cmd_counterexample(a) -> int:
    """Each link of the mutated composition in a worker under a watchdog: the plain symbol link
    (the original glue: every reader still sees tile_elems 16384) must misbehave (wrong, a hang
    or a fault), the pipelink link (tile_elems 8192 propagated) must be correct."""
    import json
    index = ROOT / "bazel-bin" / "experiments" / "llama_tiny_mutations.json"
    if not index.is_file():
        print(f"FAIL {index} not built: tools/bazel build //experiments:llama_tiny_mutations")
        return 1
    bad = 0
    for m in json.loads(index.read_text())["mutations"]:
        for how in ("plain", "pipelink"):
            cubin, manifest = (ROOT / "bazel-bin" / m["files"][f"{how}.{x}"] for x in ("cubin", "manifest.json"))
            outcome, said = run_watched(["worker", "--steps", "70", "--files", str(cubin), str(manifest)], a.watchdog)
            expected = how == "pipelink"
            ok = (outcome == "correct") == expected
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {m['name']:<14} {how:<9} {outcome}: {said}   ({m['what']})", flush=True)
    return 1 if bad else 0


def _at_context(step, context: int):
    """A launch function of one step with every sequence at `context` cached positions (the
    caches filled at random)."""
    import torch
    from llama_megakernel import ST_POS, ST_WORDS
    g = torch.Generator(device="cuda").manual_seed(context)
    for c in (step.kcache, step.vcache):
        c[..., :context, :].copy_(torch.randn(c[..., :context, :].shape, generator=g, device="cuda").to(c.dtype))
    pos = step.state[ST_POS::ST_WORDS][:step.batch]

    def run():
        pos.fill_(context)
        step.launch()
    return run


def _torch_step(cfg, w, max_seq: int, context: int, compiled: bool, mode: str = "default", batch: int = 1):
    """gpt-fast style bf16 decode step of `batch` sequences over static caches of max_seq =
    context + 1 positions."""
    import torch
    import torch.nn.functional as F
    import llama_reference as ref
    bf = torch.bfloat16
    W = {k: v.to(bf) for k, v in w.items()}
    L, kvh, hd, B = cfg.layers, cfg.kv_heads, cfg.head_dim, batch
    kc = torch.randn(L, B, kvh, max_seq, hd, device="cuda", dtype=bf)
    vc = torch.randn(L, B, kvh, max_seq, hd, device="cuda", dtype=bf)
    inv = ref.rope_inv_freq(cfg, torch.float32).cuda()
    ang = torch.arange(max_seq, device="cuda", dtype=torch.float32)[:, None] * inv[None]
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    pos = torch.tensor([context], device="cuda")
    tok = torch.arange(1, B + 1, device="cuda")
    head = W["model.embed_tokens.weight"] if cfg.tie_word_embeddings else W["lm_head.weight"]

    def rms(x, wt):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + cfg.rms_eps)).to(bf) * wt

    def rope(x):  # [B, n, hd]
        c, s = cos[pos], sin[pos]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    def step():
        x = W["model.embed_tokens.weight"][tok]
        for i in range(L):
            p = f"model.layers.{i}."
            h = rms(x, W[p + "input_layernorm.weight"])
            q = rope((h @ W[p + "self_attn.q_proj.weight"].T).view(B, cfg.heads, hd))
            k = rope((h @ W[p + "self_attn.k_proj.weight"].T).view(B, kvh, hd))
            v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, kvh, hd)
            kc[i].index_copy_(2, pos, k[:, :, None])
            vc[i].index_copy_(2, pos, v[:, :, None])
            o = F.scaled_dot_product_attention(q.view(B, cfg.heads, 1, hd), kc[i], vc[i],
                                               enable_gqa=True).reshape(B, -1)
            x = x + o @ W[p + "self_attn.o_proj.weight"].T
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            x = x + (F.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ \
                W[p + "mlp.down_proj.weight"].T
        return rms(x, W["model.norm.weight"]) @ head.T

    fn = torch.compile(step, mode=mode, fullgraph=True) if compiled else step
    return lambda: (pos.fill_(context), fn())


def cmd_bench(a) -> int:
    missing = [str(f) for c in a.also or () for f in (Path(c), Path(c).with_suffix(".manifest.json")) if not f.is_file()]
    if missing:  # before anything is loaded
        print(f"FAIL R-MANIFEST: --also: no {', '.join(missing)} (hint: pass an earlier build's llama3_1b cubin "
              "with its .manifest.json beside it)")
        return 1
    import torch
    import llama_models as lm
    from gpu_bench import interleaved
    from llama_megakernel import MegakernelStep
    cfg = lm.MODELS["llama3_2_1b"]
    w = _weights(cfg, seed=1)
    contexts = [int(c) for c in a.contexts.split(",")]
    max_seq = max(contexts) + 1
    steps = {att: MegakernelStep(cfg, w, max_seq=max_seq, attention=att) for att in ("split", "simple")}
    steps["unfused"] = MegakernelStep(cfg, w, max_seq=max_seq, unfused=True)
    for v in VARIANTS:  # other links of the same composition, in the same rounds
        if variant_files(v)[0].is_file():
            steps[v] = MegakernelStep(cfg, w, max_seq=max_seq, kernel_files=variant_files(v))
    also = [Path(c) for c in a.also or ()]
    for c in also:  # an earlier build of llama3_1b carried to the device (e.g. the commit before a change)
        steps[c.stem] = MegakernelStep(cfg, w, max_seq=max_seq, kernel_files=(c, c.with_suffix(".manifest.json")))
    floor_bytes = steps["split"].bufs["weights"].numel() * 2 + steps["split"].bufs["head"].numel() * 2
    floor_us = floor_bytes / hbm() * 1e6
    print(f"{torch.cuda.get_device_name()}: weights read a step: {floor_bytes / 1e9:.3f} GB; floor {floor_us:.1f} us "
          f"at {hbm() / 1e12:.2f} TB/s")
    print("context  split us  simple us  split/simple  unfused us  unfused/split  torch.compile us  compile/split  "
          "eager us  eager/split  split % of floor")
    for c in contexts:
        fns = {att: _at_context(s, c) for att, s in steps.items()}
        if c <= a.torch_max_context:
            if a.compile_contexts is None or c in a.compile_contexts:
                fns["compile"] = _torch_step(cfg, w, c + 1, c, compiled=True, mode=a.compile_mode)
            fns["eager"] = _torch_step(cfg, w, c + 1, c, compiled=False)
        t = interleaved(fns, inner=20, rounds=a.rounds, sustain_ms=200.0, skip_failing=True)
        sp = t["split"]
        cells = [f"{c:>7}", f"{sp:9.1f}", f"{t['simple']:9.1f}", f"{t['simple'] / sp:12.3f}",
                 f"{t['unfused']:10.1f}", f"{t['unfused'] / sp:13.3f}"]
        for k in ("compile", "eager"):
            cells += [f"{t[k]:16.1f}", f"{t[k] / sp:13.3f}"] if k in t else ["-".rjust(16), "-".rjust(13)]
        cells.append(f"{100 * floor_us / sp:15.1f}%")
        cells += [f"{v} {t[v]:.1f} us (split / it {sp / t[v]:.3f})" for v in [*VARIANTS, *(c.stem for c in also)] if v in t]
        print("  ".join(cells), flush=True)
    return 0


def cmd_pair(a) -> int:
    """Llama-3.2-1B linked / control at each --batches size (llama3_1b, _b8, _b32), on the same
    weights, cache and state, each kernel on its own workspaces and then on the other's
    (gpu_bench.both_ways_ratio: where a workspace lies moves one cubin against itself), both orders
    of each pair."""
    import llama_models as lm
    from gpu_bench import both_ways_ratio, sustained_inner
    from llama_megakernel import MegakernelStep, default_kernel_dir
    cfg = lm.MODELS["llama3_2_1b"]
    w = _weights(cfg, seed=2)
    bad = 0
    for batch in (int(b) for b in a.batches.split(",")):
        lk = MegakernelStep(cfg, w, max_seq=1100, batch=batch)
        linked_cubin, control_cubin = (default_kernel_dir() / f"{lk.target}{s}.cubin" for s in ("", ".control"))
        ct = lk.sharing_buffers(control_cubin)
        lk_x = lk.sharing_buffers(linked_cubin, workspaces=ct.kernel.workspace_buffers())
        ct_x = lk.sharing_buffers(control_cubin, workspaces=lk.kernel.workspace_buffers())
        own = (_at_context(lk, 1024), _at_context(ct, 1024))
        swapped = (_at_context(lk_x, 1024), _at_context(ct_x, 1024))
        inner = sustained_inner(own[0], 1, 260.0)  # each timed graph sustained
        r1, q1, ta, tb, o1, x1 = both_ways_ratio(own, swapped, inner, a.rounds)
        r2, q2, _, _, o2, x2 = both_ways_ratio(own[::-1], swapped[::-1], inner, a.rounds)
        r = (r1 / r2) ** 0.5
        ok = abs(r - 1) <= 0.002
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {lk.target} linked / control at context 1024: {r:.4f} (orders {r1:.4f}, "
              f"1/{r2:.4f}; own workspaces {(o1 / o2) ** 0.5:.4f}, exchanged {(x1 / x2) ** 0.5:.4f}; "
              f"IQR {max(q1, q2):.4f}; {ta:.1f} vs {tb:.1f} us)", flush=True)
        del lk, ct, lk_x, ct_x, own, swapped
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["check", "sanitize", "pair", "bench", "counterexample", "worker", "worker-check",
                                    "worker-graph", "worker-prefill"])
    ap.add_argument("--model", default="llama_tiny", choices=["llama_tiny", "llama3_2_1b", "llama3_8b", "qwen3_1_7b"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=300, help="worker-prefill: the prompt's length")
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--unfused", action="store_true")
    ap.add_argument("--files", nargs=2, help="worker: another link's cubin and manifest")
    ap.add_argument("--watchdog", type=float, default=180.0, help="check, counterexample: seconds before a worker is a hang")
    ap.add_argument("--attention", default="split", choices=["split", "simple"])
    ap.add_argument("--contexts", default="16,1024,4096,32768")
    ap.add_argument("--batches", default="1", help="pair: the Llama-3.2-1B batch sizes (1, 8, 32) whose links are paired")
    ap.add_argument("--torch-max-context", type=int, default=32768)
    ap.add_argument("--compile-contexts", type=lambda v: {int(c) for c in v.split(",")}, default=None,
                    help="bench: the contexts torch.compile is timed at (default: all up to --torch-max-context)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--also", action="append", metavar="CUBIN",
                    help="bench: another Llama-3.2-1B build (CUBIN and CUBIN's .manifest.json beside it) in the same rounds")
    ap.add_argument("--compile-mode", default="default",
                    help="bench: torch.compile's mode for the baseline (max-autotune-no-cudagraphs tunes for minutes)")
    a = ap.parse_args(argv)
    from gpu_bench import refused_as_fail, require_gpu
    if not require_gpu(f"llama_decode_bench.py {a.cmd}"):
        return 1
    return refused_as_fail(_dispatch, a)


def _dispatch(a) -> int:
    if a.cmd == "worker":
        return worker(a.attention, tuple(a.files) if a.files else None, a.steps, a.unfused)
    if a.cmd == "worker-check":
        return check_one(a.model, a.steps, a.attention, a.control, a.unfused, tuple(a.files) if a.files else None)
    if a.cmd == "worker-prefill":
        return prefill_one(a.model, a.prompt, a.steps)
    if a.cmd == "worker-graph":
        return graph_one()
    return {"check": cmd_check, "sanitize": cmd_sanitize, "pair": cmd_pair, "bench": cmd_bench,
            "counterexample": cmd_counterexample}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
