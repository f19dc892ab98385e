"""Where a Llama-3.2-1B decode step's time goes, op by op (an sm_90 GPU; bazel-bin):

    python3 benchmarks/llama_decode_timeline.py [--context 1024] [--warmup 5] [--build llama3_1b_b8_trace]

Runs //kernels/decode:llama3_1b_trace (or another trace link: `llama3_1b_b8_trace` is batch 8,
every sequence at the context), the megakernel with the step package built with DEC_TRACE
(dec_step.cu: thread 0 of every CTA's step role stamps each op with the global timer into the
state buffer past the batch's state words, dec.h trace_base), on random weights and a random
cache of `context` positions.
Prints, for each kind of op averaged over the layers: its span on the critical path (the last
CTA done with it minus the last CTA done with the matvec op before it; O's span holds the
attention op, whose window the attention role's own stamps take apart: its wake-up after the
QKV op, the prologue, the blocks, the merge, the release and the handoff to O), the counter's latency (a CTA going on after the wait minus the previous op's
last CTA done), the input's time, the tiles' time (median and slowest CTA), the time the tiles
waited for the weight stream, and the skew (the last CTA done minus the median one). A
diagnostic: stamps cost a little time themselves, so the totals are close to, not equal to,
the bench's figures."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "decode"))
sys.path.insert(0, str(ROOT / "benchmarks"))

TRACE_BASE, TRACE_WORDS = 16, 8  # kernels/decode/dec.h
KINDS = ("QKV", "O", "GU", "DOWN")
COUNTS = {"tasks", "chunks"}  # measures that are counts, not ns


def trace_base(batch: int) -> int:
    """dec.h trace_base: the stamps start past the batch's state words."""
    from llama_megakernel import ST_WORDS
    return max(TRACE_BASE, ST_WORDS * batch)


def op_kind(k: int, layers: int) -> tuple[str, int]:
    """dec.h's op index k -> (kind, layer)."""
    if k == 0:
        return "EMBED", 0
    if k == 1 + 5 * layers:
        return "HEAD", 0
    return ("QKV", "ATTN", "O", "GU", "DOWN")[(k - 1) % 5], (k - 1) // 5


def analyse(stamps, layers: int, attn=None) -> dict:
    """stamps: int64 [ops, G, 8], the step's records; attn: int64 [layers, G, 8], the attention
    role's, or None (u32 words, not yet unwrapped) -> per kind of op, the mean over layers of each
    measure (us); with attn also "ATTN", the attention op's window taken apart."""
    import numpy as np
    ran = stamps[:, :, 5] > 0  # loads taken: the CTA ran the matvec op
    # the low 32 bits of the timer: differences to one stamp, signed, are right across a wrap (a
    # step lasts far less than 2^31 ns); then ns since the first stamp
    ref = int(stamps[:, :, 0][ran][0])

    def unwrap(words):
        return (words - ref + (1 << 31)) % (1 << 32) - (1 << 31)
    t = unwrap(stamps[:, :, :4])
    origin = int(t[:, :, 0][ran].min())
    t = t - origin
    rows: dict[str, list[dict]] = {}
    done_max: dict[int, float] = {}
    went_median: dict[int, float] = {}
    prev_done = None
    for k in range(stamps.shape[0]):
        kind, layer = op_kind(k, layers)
        if kind in ("EMBED", "ATTN") or not ran[k].any():
            continue
        m = ran[k]
        begin, went, built, done = (t[k, m, f].astype(np.float64) for f in range(4))
        row = {"tiles": float(np.median(done - built)), "tiles_max": float((done - built).max()),
               "input": float(np.median(built - went)), "stream_wait": float(np.median(stamps[k, m, 4])),
               "skew": float(done.max() - np.median(done))}
        if prev_done is not None:
            row["span"] = float(done.max() - prev_done)
            row["latency"] = float(np.median(went - prev_done))
        prev_done = done_max[k] = float(done.max())
        went_median[k] = float(np.median(went))
        rows.setdefault(kind, []).append(row)
    if attn is not None:  # dec_attn_split.cu: begins, went, ready, scored, merged, released, chunks, merger
        at = unwrap(attn[:, :, :6]) - origin
        for layer in range(layers):
            m = attn[layer, :, 6] > 0
            kq = 1 + 5 * layer
            if not m.any() or kq not in done_max or kq + 2 not in went_median:
                continue
            begin, went, ready, scored, merged, released = (at[layer, m, f].astype(np.float64) for f in range(6))
            rows.setdefault("ATTN", []).append({
                "window": went_median[kq + 2] - done_max[kq], "wake": float(np.median(went)) - done_max[kq],
                "prologue": float(np.median(ready - went)), "blocks": float(np.median(scored - ready)),
                "merge": float(np.median(merged - scored)), "merge_max": float((merged - scored).max()),
                "release": float(np.median(released - merged)), "handoff": went_median[kq + 2] - float(released.max()),
                "tasks": float(m.sum()), "chunks": float(attn[layer, m, 6].max())})
    out = {}
    for kind, rs in rows.items():
        out[kind] = {f: statistics.mean(r[f] for r in rs if f in r) / (1 if f in COUNTS else 1e3)
                     for f in rs[-1] if any(f in r for r in rs)}
    first = t[1, ran[1], 0].min() if ran[1].any() else 0
    out["total"] = float(prev_done - first) / 1e3
    return out


def _count(lo: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{v} is below {lo}")
        return v
    return parse


def _manifest_batch(path: Path):
    """The build's batch (its kernel fact; 1 for builds from before the fact). MegakernelStep
    checks it and the manifest, and says what is wrong with either."""
    import json
    try:
        return json.loads(path.read_text()).get("facts", {}).get("batch", 1)
    except (OSError, ValueError, AttributeError):
        return 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=_count(0), default=1024, help="cached positions (0 .. max_positions - 1)")
    ap.add_argument("--warmup", type=_count(0), default=5)
    ap.add_argument("--build", default="llama3_1b_trace",
                    help="a link with the step's stamps (decode_models.bzl): llama3_1b_trace, llama3_1b_b8_trace")
    a = ap.parse_args(argv)
    from gpu_bench import refused_as_fail, require_gpu
    if not require_gpu("llama_decode_timeline.py"):
        return 1
    return refused_as_fail(_run, a)  # a refused build or argument: its code and hint, not a traceback


def _run(a) -> int:
    import torch
    import llama_models as lm
    from llama_decode_bench import _at_context, _weights
    from llama_megakernel import MegakernelStep, default_kernel_dir
    d = default_kernel_dir()
    files = (d / f"{a.build}.cubin", d / f"{a.build}.manifest.json")
    if not files[0].is_file():
        print(f"FAIL {files[0]} not built: tools/bazel build //kernels/decode:{a.build}")
        return 1
    cfg = lm.MODELS["llama3_2_1b"]
    G = torch.cuda.get_device_properties(0).multi_processor_count  # grid = resident CTAs: one a SM
    ops = 2 + 5 * cfg.layers
    batch = _manifest_batch(files[1])
    base = trace_base(batch if isinstance(batch, int) else 1)
    s = MegakernelStep(cfg, _weights(cfg, seed=5), max_seq=a.context + 1, kernel_files=files, batch=batch,
                       state_words=base + (ops + cfg.layers) * G * TRACE_WORDS)
    run = _at_context(s, a.context)
    for _ in range(a.warmup):
        run()
    s.state[base:].zero_()
    run()
    torch.cuda.synchronize()
    words = s.state[base:].cpu().view(ops + cfg.layers, G, TRACE_WORDS).numpy().astype("int64") % (1 << 32)
    r = analyse(words[:ops], cfg.layers, words[ops:])
    print(f"{torch.cuda.get_device_name()}: {a.build} (batch {batch}) at context {a.context}, grid {G}: "
          f"{r.pop('total'):.1f} us from the first QKV wait to the HEAD's last CTA (us, mean over layers)")
    print(f"{'op':<5} {'span':>7} {'latency':>8} {'input':>7} {'tiles':>7} {'tiles max':>9} {'stream wait':>11} {'skew':>6}")
    for kind in (*KINDS, "HEAD"):
        v = r.get(kind)
        if v:
            print(f"{kind:<5} {v.get('span', float('nan')):7.2f} {v.get('latency', float('nan')):8.2f} {v['input']:7.2f} "
                  f"{v['tiles']:7.2f} {v['tiles_max']:9.2f} {v['stream_wait']:11.2f} {v['skew']:6.2f}")
    v = r.get("ATTN")
    if v:  # the attention op's window: the QKV op's last CTA done to the O op's median CTA going on
        print(f"attention window {v['window']:.2f} us ({v['tasks']:.0f} tasks, {v['chunks']:.0f} chunks a head): "
              f"wake {v['wake']:.2f}, prologue {v['prologue']:.2f}, blocks {v['blocks']:.2f}, "
              f"merge {v['merge']:.2f} (slowest {v['merge_max']:.2f}), release {v['release']:.2f}, "
              f"handoff to O {v['handoff']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
