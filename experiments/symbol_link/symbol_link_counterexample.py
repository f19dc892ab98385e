"""The symbol-linking counterexample (issue 9) on the GPU, bounded by a watchdog.

For a kernel and its one-owner geometry mutations (experiments/symbol_link/counterexample.bzl;
Bazel builds both links of each into bazel-bin/experiments), runs
  (a) the PLAIN link: the mutant's LTO-IR + the ORIGINAL composition's glue and manifest
      (old facts, smem placement, ring sizes), no contract check -- as teams link today;
  (b) the pipelink link of the mutated composition: propagated, or rejected with its code;
and classifies each (a) as hang (killed by the watchdog) / fault (the launch or the kernel
failed) / unwritten (the NaN poison left in every element) / partly unwritten / wrong /
correct, and each (b) as propagated-and-correct or rejected <codes>.

    tools/bazel build //experiments:gemm_swiglu_tma_mutations      # CPU machine
    python3 experiments/symbol_link/symbol_link_counterexample.py --kernel gemm_swiglu_tma [--json out.json]
    (attention: //experiments:attn_causal_mutations, --kernel attn_causal; attn_decode likewise)

Every launch runs in a child process (torch-free: numpy + the pipelink runtime over
cuda.bindings) in its own process session; a job that does not finish within --watchdog
seconds gets its whole process group SIGKILLed and the remaining jobs go to a fresh child,
so a hang can neither hang the harness nor leave a process behind. Inputs are fresh random
numbers each run; outputs are poisoned with NaN before each launch; the reference is
float64 (numpy), tolerance per case (below).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
BIN = ROOT / "bazel-bin"
BF16_NAN = 0x7FC0


# ---- problems (numpy, float64 references) ---------------------------------------------------

def bf16(v):
    """Round-to-nearest-even f32 -> (bf16 bits as uint16, the float64 values they hold)."""
    import numpy as np
    b = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return b, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def from_bf16(bits):
    import numpy as np
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def silu(h):
    import numpy as np
    return h / (1 + np.exp(-h))


def gemm_swiglu_problem(rng):
    """x [M, K] @ w[2N, K]^T -> silu(gate) * up, bf16 out; M and N not multiples of any tile."""
    M, N, K = 320, 1544, 1024
    xb, xf = bf16(rng.uniform(-1, 1, (M, K)))
    wb, wf = bf16(rng.uniform(-1, 1, (2 * N, K)) * (2 / K**0.5))
    h = xf @ wf.T
    return {"x": xb, "w": wb}, {"m": M, "n": N, "k": K}, ("out", (M, N)), silu(h[:, :N]) * h[:, N:]


def _bias_model_activation():
    """(limit, alpha) of the served MoE model with biases (gpt-oss: its clamped SwiGLU); the
    manifest's facts say `biases`, not which activation library was linked, and one model has them."""
    sys.path.insert(0, str(ROOT / "kernels" / "moe"))
    import moe_models
    (m,) = [m for m in moe_models.MODELS.values() if m.biases]
    return (m.limit, m.alpha) if m.activation == moe_models.CLAMPED_SWIGLU else None


def moe_step_problem(rng, T=16, experts=128, hidden=2048, inter=768, top_k=8, renormalize=1, biases=0):
    """One MoE layer (default Qwen3-30B-A3B's shape; a linked model's facts give others) on T
    tokens; float64 reference (f64 copies per used expert). biases: router, gate/up and down
    biases and the bias model's activation (gpt-oss); else the bias pointers are lent null."""
    import numpy as np
    E, H, I = experts, hidden, inter

    def bits(shape, scale):
        # Random bf16 bit patterns (cheap for 400M values): random sign and 7-bit mantissa,
        # magnitude in [scale / 16, scale) from one of four exponents.
        r = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
        top = int(np.floor(np.log2(scale))) + 127 - 1
        return (r & 0x807F) | ((top - ((r >> 7) & 3)) << 7).astype(np.uint16)
    xb, rb = bits((T, H), 1.0), bits((E, H), H**-0.5)
    w13b, w2b = bits((E, 2 * I, H), 2 * H**-0.5), bits((E, H, I), 2 * I**-0.5)
    xf, rf = from_bf16(xb), from_bf16(rb)
    tensors = {"x": xb, "router_w": rb, "w13": w13b, "w2": w2b}
    if biases:  # gate/up biases up to 16: many gates and ups pass the clamp (7)
        tensors |= {"router_b": bits((E,), 1.0), "b13": bits((E, 2 * I), 16.0), "b2": bits((E, H), 0.5)}
        limit, alpha = _bias_model_activation()

        def act(h):
            g, u = np.minimum(h[:, :I], limit), np.clip(h[:, I:], -limit, limit)
            return g / (1 + np.exp(-alpha * g)) * (u + 1)
    else:
        def act(h):
            return silu(h[:, :I]) * h[:, I:]
    bias = {n: from_bf16(tensors[n]) if biases else 0.0 for n in ("router_b", "b13", "b2")}
    logits = xf @ rf.T + (bias["router_b"] if biases else 0.0)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    order = np.argsort(-p, axis=1, kind="stable")
    top = order[:, :top_k]
    # A token whose 8th and 9th logits lie within 1e-4 may route either way in f32 (moe_bench.py
    # excludes the same tokens): its reference row is NaN, which classify() leaves out.
    sorted_logits = np.take_along_axis(logits, order[:, top_k - 1:top_k + 1], 1)
    ambiguous = sorted_logits[:, 0] - sorted_logits[:, 1] < 1e-4
    wts = np.take_along_axis(p, top, 1)
    if renormalize:
        wts /= wts.sum(1, keepdims=True)
    ref = np.zeros((T, H))
    for e in np.unique(top):
        t, j = np.nonzero(top == e)
        h = xf[t] @ from_bf16(w13b[e]).T + (bias["b13"][e] if biases else 0.0)
        y = act(h) @ from_bf16(w2b[e]).T + (bias["b2"][e] if biases else 0.0)
        ref[t] += wts[t, j, None] * y
    ref[ambiguous] = np.nan
    unread = {} if biases else {"router_b": 0, "b13": 0, "b2": 0}
    return tensors, {"t": T, "rank": 0, "world": 1, "peers": 0, **unread}, ("out", (T, H)), ref


def _attention_ref(q, k, v, scale, causal):
    import numpy as np
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)


def attention_problem(rng, *, head_dim=128, decode=False):
    """attn_causal (B=2, H=2, S=640: 5 Q blocks, tiles of 1..5 KV blocks) or attn_decode (8 query
    rows over 2048 keys in 4 splits); head_dim from the linked kernel's facts (a propagated d = 64
    core computes d = 64 attention). Names follow kernels/attention (q, k, v, aux, o, ...)."""
    import numpy as np
    B, H, Lq, Lkv = (2, 2, 8, 2048) if decode else (2, 2, 640, 640)
    qb, qf = bf16(rng.uniform(-1, 1, (B, H, Lq, head_dim)))
    kb, kf = bf16(rng.uniform(-1, 1, (B, H, Lkv, head_dim)))
    vb, vf = bf16(rng.uniform(-1, 1, (B, H, Lkv, head_dim)))
    scale = 1.0 / head_dim**0.5
    scalars = {"q_len": Lq, "kv_len": Lkv, "bh": B * H, "kv_group": 1, "scale": scale,
               **({"splits": 4} if decode else {})}
    aux = np.array([B * H, Lkv, 0, 0] if decode else [0] * 4, np.int32)  # decode: {bh, kv_len}, as attention.py
    return ({"q": qb, "k": kb, "v": vb, "aux": aux}, scalars, ("o", (B, H, Lq, head_dim)),
            _attention_ref(qf, kf, vf, scale, causal=not decode))


# Kernel name -> (problem maker, tol, floor): correct iff max |out - ref| / (|ref| + floor *
# rms(ref)) <= tol (gemm: as gemm_swiglu_bench; moe: as moe_bench, whose bf16 intermediate h
# gives errors of ~1e-2 rms on every element). moe_step's names follow kernels/moe/ (x,
# router_w, w13, w2, out, t; one rank: rank 0 of world 1, no peers).
CASES = {
    "gemm_swiglu_tma": (gemm_swiglu_problem, 2e-2, 0.01),
    "moe_step": (moe_step_problem, 2e-2, 1.0),
    # attention: normwise (floor 1: |err| <= tol (|ref| + rms)); decode's outputs average 2048 keys
    # (rms ~0.02), so a per-element relative test would judge bf16 P's rounding near zeros
    "attn_causal": (attention_problem, 2e-2, 1.0),
    "attn_decode": (lambda rng, **f: attention_problem(rng, decode=True, **f), 2e-2, 1.0),
}
# Kernel name -> the facts its problem depends on: each launch gets the problem of its manifest's
# facts (a plain link runs with the original's; a propagated head_dim = 64 link with d = 64 data).
PROBLEM_FACTS = {"attn_causal": ("head_dim",), "attn_decode": ("head_dim",),
                 "moe_step": ("experts", "hidden", "inter", "top_k", "renormalize", "biases")}
INDEX_DIRS = ("experiments",)  # where symbol_link_mutations targets live in bazel-bin


def classify(out, ref, tol, floor=0.01) -> tuple[str, str]:
    import numpy as np
    got = from_bf16(out)
    nan = int(np.isnan(got).sum())
    if nan == got.size:
        return "unwritten", f"all {nan} elements still NaN"
    # NaN reference rows (moe_step's ambiguously routed tokens) are left out of the comparison.
    skip = ~np.isfinite(ref.reshape(len(ref), -1)).all(1)
    if skip.all():  # (an unwritten element still says so)
        if nan:
            return "partly unwritten", f"{nan}/{got.size} elements still NaN; every reference row ambiguous"
        return "undetermined", f"all {len(ref)} reference rows are ambiguous (near-tied routing): nothing to compare"
    kept_ref, kept_got = ref[~skip], got[~skip]
    rms = float(np.sqrt((kept_ref**2).mean()))
    err = float(np.nan_to_num(np.abs(kept_got - kept_ref) / (np.abs(kept_ref) + floor * rms), nan=0.0).max())
    note = f"; {int(skip.sum())} ambiguous rows excluded" if skip.any() else ""
    if nan:
        return "partly unwritten", f"{nan}/{got.size} elements still NaN; max_rel of the rest {err:.2e}{note}"
    return ("correct" if err <= tol else "wrong"), f"max_rel {err:.2e} (tol {tol}){note}"


# ---- the child: runs jobs, one line per event on stdout ------------------------------------

def launch_once(cubin: str, manifest: str, data, scalars: dict, out_name: str, out_shape) :
    """Load, copy the inputs in, poison the output, launch, synchronise, copy it back (torch-free)."""
    import numpy as np
    from cuda.bindings import driver as cu
    from pipelink.runtime import Kernel, LaunchError

    def ok(r, what):
        err = r[0] if isinstance(r, tuple) else r
        if err != cu.CUresult.CUDA_SUCCESS:
            raise LaunchError("R-CUDA", f"{what}: {err.name}")
        return r[1] if isinstance(r, tuple) and len(r) == 2 else None

    k = Kernel.load(cubin, manifest)
    ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0), "cuDeviceGet")), "ctx")
    ok(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    ptrs = {}
    for name, a in data.items():
        a = np.ascontiguousarray(a)
        ptrs[name] = ok(cu.cuMemAlloc(max(a.nbytes, 1)), "cuMemAlloc")
        ok(cu.cuMemcpyHtoD(ptrs[name], a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
    out = np.full(out_shape, BF16_NAN, np.uint16)
    ptrs[out_name] = ok(cu.cuMemAlloc(out.nbytes), "cuMemAlloc")
    ok(cu.cuMemcpyHtoD(ptrs[out_name], out.ctypes.data, out.nbytes), "cuMemcpyHtoD")
    k.launch_with({**{n: int(p) for n, p in ptrs.items()}, **scalars}, stream=0)
    ok(cu.cuCtxSynchronize(), "cuCtxSynchronize after the launch")
    ok(cu.cuMemcpyDtoH(out.ctypes.data, ptrs[out_name], out.nbytes), "cuMemcpyDtoH")
    for p in ptrs.values():
        ok(cu.cuMemFree(p), "cuMemFree")
    k.close()
    ok(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")
    return out


def worker(jobfile: str) -> int:
    import numpy as np
    from pipelink.runtime import LaunchError

    spec = json.loads(Path(jobfile).read_text())
    npz = np.load(spec["problem"])
    data = {n: npz[n] for n in npz.files}
    for job in spec["jobs"]:
        print(f"START {job['label']}", flush=True)
        try:
            out = launch_once(job["cubin"], job["manifest"], data, spec["scalars"], *spec["out"])
        except LaunchError as e:  # a fault poisons the context: report and let a new child go on
            print(f"FAULT {job['label']} {e.code}: {e.diagnostics[0].message}", flush=True)
            return 3
        path = Path(spec["outdir"]) / f"{job['label']}.npy"
        np.save(path, out)
        print(f"DONE {job['label']} {path}", flush=True)
    return 0


def target(kernel: str, cubin: str, manifest: str, seed: int | None, tokens: int | None = None) -> int:
    """One launch in this process on a fresh problem (what compute-sanitizer runs): RESULT <class>."""
    import numpy as np
    make, tol, floor = CASES[kernel]
    facts = json.loads(Path(manifest).read_text()).get("facts", {})
    shape_facts = {k: facts[k] for k in PROBLEM_FACTS.get(kernel, ()) if k in facts}  # the linked model's
    if tokens is not None:
        shape_facts["T"] = tokens
    inputs, scalars, (out_name, shape), ref = make(np.random.default_rng(seed), **shape_facts)
    from pipelink.runtime import LaunchError
    try:
        out = launch_once(cubin, manifest, inputs, scalars, out_name, shape)
    except LaunchError as e:
        print(f"RESULT fault {e.code}: {e.diagnostics[0].message}")
        return 1
    kind, info = classify(out, ref, tol, floor)
    print(f"RESULT {kind} {info}")
    return 0 if kind == "correct" else 1


# ---- the parent: watchdog ------------------------------------------------------------------

def run_jobs(jobs: list[dict], problem: str, scalars: dict, out: tuple, tmp: Path, watchdog: float,
             startup: float = 120.0, cmd: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """label -> ('done', path) | ('hang', why) | ('fault', why). Never waits unbounded.
    cmd: the child's argv before the job file (default: this script's `worker`)."""
    cmd = cmd or [sys.executable, __file__, "worker"]
    results: dict[str, tuple[str, str]] = {}
    pending = list(jobs)
    n = 0
    while pending:
        n += 1
        jobfile = tmp / f"jobs{n}.json"
        jobfile.write_text(json.dumps({"problem": problem, "scalars": scalars, "out": out,
                                       "outdir": str(tmp), "jobs": pending}))
        err = open(tmp / f"worker{n}.stderr", "w+")
        p = subprocess.Popen([*cmd, str(jobfile)], stdout=subprocess.PIPE,
                             stderr=err, start_new_session=True, cwd=ROOT)
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        current, deadline, buf = None, time.monotonic() + startup, ""
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    label = current or pending[0]["label"]
                    results[label] = ("hang", f"no result within {watchdog if current else startup:.0f} s; "
                                              "process group killed")
                    break
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(p.stdout.fileno(), 65536)  # raw: a buffered readline would hide lines from select
                if not chunk:  # the child exited
                    if current:
                        err.seek(0)
                        tail = " | ".join(err.read().strip().splitlines()[-3:])
                        results[current] = ("fault", f"child exited rc={p.poll()}: {tail}")
                    break
                buf += chunk.decode(errors="replace")
                *lines, buf = buf.split("\n")
                for line in lines:
                    kind, _, rest = line.strip().partition(" ")
                    label, _, info = rest.partition(" ")
                    if kind == "START":
                        current, deadline = label, time.monotonic() + watchdog
                    elif kind == "DONE":
                        results[label], current = ("done", info), None
                        deadline = time.monotonic() + startup
                    elif kind == "FAULT":
                        results[label], current = ("fault", info), None
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the whole session: nothing survives a hang
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                print(f"warning: child {p.pid} did not exit 60 s after SIGKILL", file=sys.stderr)
            sel.close()
            p.stdout.close()
            err.close()
        done = set(results)
        if not any(j["label"] in done for j in pending):  # died before its first job: no endless restarts
            err_text = (tmp / f"worker{n}.stderr").read_text().strip().splitlines()[-3:]
            results[pending[0]["label"]] = ("fault", "the child died before the job: " + " | ".join(err_text))
            done.add(pending[0]["label"])
        pending = [j for j in pending if j["label"] not in done]
    return results


def run(index_path: Path, watchdog: float, seed: int | None) -> dict:
    import numpy as np
    index = json.loads(index_path.read_text())
    kernel = index["kernel"]
    if kernel not in CASES:
        raise SystemExit(f"no problem defined for kernel {kernel!r} (CASES has {sorted(CASES)})")
    make, tol, floor = CASES[kernel]
    keys = PROBLEM_FACTS.get(kernel, ())
    rng = np.random.default_rng(seed)
    f = lambda rel: str(BIN / rel)  # noqa: E731
    original_facts = json.loads(Path(f(index["original"]["manifest"])).read_text())["facts"]
    pkey = lambda facts: tuple(facts[k] for k in keys)  # noqa: E731  the problem a launch gets
    jobs = [({"label": "original", "cubin": f(index["original"]["cubin"]), "manifest": f(index["original"]["manifest"])},
             pkey(original_facts))]
    pipelink = {}
    for m in index["mutations"]:
        files = m["files"]
        jobs.append(({"label": f"{m['name']}.plain", "cubin": f(files["plain.cubin"]),
                      "manifest": f(files["plain.manifest.json"])}, pkey(original_facts)))  # the original's host code
        pipelink[m["name"]] = json.loads(Path(f(files["pipelink.json"])).read_text())
        if pipelink[m["name"]]["outcome"] == "linked":
            jobs.append(({"label": f"{m['name']}.pipelink", "cubin": f(files["pipelink.cubin"]),
                          "manifest": f(files["pipelink.manifest.json"])}, pkey(pipelink[m["name"]]["facts"])))
    with tempfile.TemporaryDirectory(prefix="symlink-cx-") as td:
        tmp = Path(td)
        res, refs = {}, {}
        t0 = time.monotonic()
        for n, key in enumerate(dict.fromkeys(k for _, k in jobs)):  # one problem (and child) per fact set
            inputs, scalars, out, ref = make(rng, **dict(zip(keys, key)))
            sub = tmp / f"p{n}"
            sub.mkdir()
            np.savez(sub / "problem.npz", **inputs)
            group = [j for j, k in jobs if k == key]
            res.update(run_jobs(group, str(sub / "problem.npz"), scalars, out, sub, watchdog))
            refs.update({j["label"]: ref for j in group})
        wall = time.monotonic() - t0

        def outcome(label):
            kind, info = res.get(label, ("fault", "not run"))
            if kind != "done":
                return kind, info
            return classify(np.load(info), refs[label], tol, floor)
        orig = outcome("original")
        rows = []
        for m in index["mutations"]:
            plain = outcome(f"{m['name']}.plain")
            pl = pipelink[m["name"]]
            if pl["outcome"] == "rejected":
                b = (f"rejected {' '.join(sorted(set(pl['codes'])))}", pl["messages"][0] if pl["messages"] else "")
            else:
                kind, info = outcome(f"{m['name']}.pipelink")
                changed = {k: f"{original_facts.get(k)}->{v}" for k, v in pl["facts"].items()
                           if original_facts.get(k) != v}
                b = (("propagated-and-correct" if kind == "correct" else f"propagated-but-{kind}"),
                     f"{info}; facts {changed or 'unchanged'}")
            rows.append({"mutation": m["name"], "owner": m["owner"], "what": m["what"],
                         "plain": plain[0], "plain_detail": plain[1], "pipelink": b[0], "pipelink_detail": b[1]})
    return {"kernel": kernel, "original": orig, "watchdog_s": watchdog, "wall_s": round(wall, 1), "rows": rows}


def default_index(kernel: str) -> Path:
    """bazel-bin/<dir>/<kernel>_mutations.json for the first of INDEX_DIRS that has it."""
    paths = [BIN / d / f"{kernel}_mutations.json" for d in INDEX_DIRS]
    return next((p for p in paths if p.exists()), paths[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", nargs="?", default="run", choices=["run", "worker", "target"])
    ap.add_argument("jobfile", nargs="?")
    ap.add_argument("--kernel", default="gemm_swiglu_tma")
    ap.add_argument("--index", help="default: bazel-bin/experiments/<kernel>_mutations.json")
    ap.add_argument("--watchdog", type=float, default=8.0, help="seconds a launch may take before it is a hang")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json")
    ap.add_argument("--cubin", help="target: the kernel to launch once (with --manifest)")
    ap.add_argument("--manifest")
    ap.add_argument("--tokens", type=int, help="target, moe_step: the problem's T (default 16)")
    a = ap.parse_args()
    if a.cmd == "worker":
        return worker(a.jobfile)
    if a.cmd == "target":
        if a.tokens is not None and a.kernel != "moe_step":
            ap.error("--tokens: only the moe_step problem takes a token count")
        if a.tokens is not None and not 1 <= a.tokens <= 65536:
            ap.error(f"--tokens {a.tokens}: between 1 and 65536")
        return target(a.kernel, a.cubin, a.manifest, a.seed, a.tokens)
    index = Path(a.index) if a.index else default_index(a.kernel)
    if not index.exists():
        print(f"FAIL {index} is missing: tools/bazel build //{index.parent.relative_to(BIN)}:{a.kernel}_mutations")
        return 1
    r = run(index, a.watchdog, a.seed)
    print(f"{r['kernel']}: original (pipelink) {r['original'][0]} ({r['original'][1]}); watchdog {r['watchdog_s']} s, "
          f"{r['wall_s']} s in all")
    print(f"{'mutation':<24} {'owner':<6} {'(a) plain symbol link':<22} {'(b) pipelink':<30} details")
    for row in r["rows"]:
        print(f"{row['mutation']:<24} {row['owner']:<6} {row['plain']:<22} {row['pipelink']:<30} "
              f"(a) {row['plain_detail']}; (b) {row['pipelink_detail']}")
    bad_b = [x for x in r["rows"] if not (x["pipelink"].startswith("rejected") or x["pipelink"] == "propagated-and-correct")]
    print(f"counterexample: plain {sum(x['plain'] != 'correct' for x in r['rows'])}/{len(r['rows'])} not correct; "
          f"pipelink {len(r['rows']) - len(bad_b)}/{len(r['rows'])} rejected or propagated-and-correct")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    return 0 if not bad_b and r["original"][0] == "correct" else 1


if __name__ == "__main__":
    sys.exit(main())
