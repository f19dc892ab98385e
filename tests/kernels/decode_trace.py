"""Where a decode megakernel build goes wrong, op by op (an sm_90 GPU; a diagnostic the GPU test
and the device script run in a child process under a watchdog):

    python3 tests/kernels/decode_trace.py [--steps 3]

llama_tiny's unfused build runs one launch per op with its activations in buffers lent from
here (workspaces x, qkv, ao, h), so after each launch the op's output is read and compared with
decode_emulator's same op applied to the kernel's own inputs (f64, the kernel's rounding
points): a wrong op is named, with its error, instead of a wrong final logit. The cache row the
attention op appends and the published token and position are compared too. Prints one line an
op and a RESULT line; exit 0 when every op agrees within 1e-2 of its largest expected value."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "tools", ROOT / "kernels" / "decode", ROOT / "tests" / "kernels"):
    sys.path.insert(0, str(p))

import llama_models as lm  # noqa: E402
from decode_emulator import F64, Emulator, bf16  # noqa: E402
from llama_megakernel import MegakernelStep, launch_params  # noqa: E402
from llama_weights import random_weights  # noqa: E402

TOL = 1e-2


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got = got.to(F64).cpu()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def trace(steps: int) -> int:
    cfg = lm.LLAMA_TINY
    dev = torch.device("cuda", 0)
    w = random_weights(cfg, seed=12)
    s = MegakernelStep(cfg, w, max_seq=steps + 1, unfused=True, prefill="megakernel")
    ws = {"x": torch.zeros(cfg.hidden, dtype=torch.float32, device=dev),
          "qkv": torch.zeros(cfg.heads * cfg.head_dim + 2 * cfg.kv_heads * cfg.head_dim, dtype=torch.float32, device=dev),
          "ao": torch.zeros(cfg.heads * cfg.head_dim, dtype=torch.bfloat16, device=dev),
          "h": torch.zeros(cfg.inter, dtype=torch.bfloat16, device=dev)}
    sessions = [s.kernel.open(workspaces=ws, **p) for p in
                launch_params(cfg, s.bufs, s.logits, s.state, s.kcache, s.vcache, s.max_seq, unfused=True)]
    bufs = {k: v.cpu() for k, v in s.bufs.items()}
    em = Emulator(cfg, bufs, max_seq=steps + 1, grid=s.kernel.resident_ctas, split=True)
    norms = bufs["norms"].to(F64)
    worst, bad = 0.0, []

    def report(step, op, what, rel):
        nonlocal worst
        worst = max(worst, rel)
        ok = rel <= TOL
        if not ok:
            bad.append(f"step {step} op {op} {what}")
        print(f"{'ok  ' if ok else 'BAD '} step {step} op {op:>3} {what:<16} max rel {rel:.2e}", flush=True)

    token = 7
    for step in range(steps):
        s.state.copy_(torch.tensor([token, step, 0, 0], dtype=torch.int32))
        s.logits.fill_(float("nan"))
        op = 0
        for sess in sessions:
            before = {k: v.clone().to(F64).cpu() for k, v in ws.items()}
            sess.launch()
            torch.cuda.synchronize()
            layer, kind = (op - 1) // 5, (op - 1) % 5
            if op == 0:
                report(step, op, "EMBED", _rel(ws["x"], bufs["embed"][token].to(F64)))
            elif op == 1 + 5 * cfg.layers:
                ys, _ = em._matvec("head", 0, em._rmsnorm(before["x"], norms[2 * cfg.layers]))
                want = torch.cat(ys)
                report(step, op, "HEAD logits", _rel(s.logits, want))
                got_tok = int(s.state[0])
                if got_tok != int(torch.argmax(want)) and float(want.max() - want[got_tok]) > TOL * float(want.abs().max()):
                    bad.append(f"step {step} argmax {got_tok} vs {int(torch.argmax(want))}")
                    print(f"BAD  step {step} argmax token {got_tok}, expected {int(torch.argmax(want))}", flush=True)
                if int(s.state[1]) != step + 1:
                    bad.append(f"step {step} position {int(s.state[1])}")
                    print(f"BAD  step {step} position {int(s.state[1])}, expected {step + 1}", flush=True)
                token = got_tok
            elif kind == 0:  # QKV
                ys, _ = em._matvec("qkv", layer, em._rmsnorm(before["x"], norms[2 * layer]))
                report(step, op, f"QKV layer {layer}", _rel(ws["qkv"], torch.cat(ys)))
            elif kind == 1:  # ATTN
                em.pos = step
                want = em._attention(layer, before["qkv"])
                report(step, op, f"ATTN layer {layer}", _rel(ws["ao"], want))
                report(step, op, f"K row layer {layer}", _rel(s.kcache[layer, :, step], em.kcache[layer, :, step]))
                report(step, op, f"V row layer {layer}", _rel(s.vcache[layer, :, step], em.vcache[layer, :, step]))
            elif kind == 2:  # O
                ys, _ = em._matvec("o", layer, before["ao"])
                report(step, op, f"O layer {layer}", _rel(ws["x"], before["x"] + torch.cat(ys)))
            elif kind == 3:  # GU
                ys, r = em._matvec("gu", layer, em._rmsnorm(before["x"], norms[2 * layer + 1]))
                want = torch.cat([bf16(y[:r] / (1 + torch.exp(-y[:r])) * y[r:]) for y in ys])
                report(step, op, f"GU layer {layer}", _rel(ws["h"], want))
            else:  # DOWN
                ys, _ = em._matvec("down", layer, before["h"])
                report(step, op, f"DOWN layer {layer}", _rel(ws["x"], before["x"] + torch.cat(ys)))
            op += 1
    ok = not bad
    print(f"RESULT {'correct' if ok else 'wrong'} llama_tiny_unfused op trace over {steps} steps: worst rel "
          f"{worst:.2e} (tol {TOL:.0e}){'' if ok else '; first wrong: ' + bad[0]}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    sys.exit(trace(ap.parse_args().steps))
