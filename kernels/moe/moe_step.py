"""Python entry point of the linked MoE megakernel (`//kernels:moe_step`).

    out = moe_step(x, router_w, w13, w2)            # one Qwen3-30B-A3B MoE layer, bf16
    s = open_step(x, router_w, w13, w2, out)        # plan once; s.launch() is graph-capturable

Shapes: x [T, 2048], router_w [128, 2048], w13 [128, 1536, 2048] (rows 0..767 gate, 768..1535
up), w2 [128, 2048, 768], out [T, 2048]; all bf16, contiguous, on one CUDA device;
1 <= T <= 65536. Math: p = softmax(x·router_wᵀ) in f32, top-8 experts, weights renormalized;
out[t] = Σ_k w_k · (silu(x·gateᵀ) * (x·upᵀ)) · w2[e_k]ᵀ with f32 accumulation (h in bf16).
The kernel is read from bazel-bin (or `kernel_dir` / $PIPELINK_MOE_STEP_DIR): moe_step.cubin
(or with control=True moe_step.control.cubin) and moe_step.manifest.json.

Bad input is a pipelink.runtime.LaunchError with a code and a hint, raised by `check_inputs`
before the kernel is loaded or anything launched: R-PARAM (a non-tensor, a tensor that
requires grad while autograd records, control not a bool, a name that is no file stem, a
kernel_dir that is no path, a stream that is no stream), R-SHAPE (wrong shapes, T outside
1 .. 65536), R-DTYPE (not bf16), R-DEVICE (CPU tensors, tensors on different GPUs, a bad
device), R-LAYOUT (non-contiguous, not 16-byte aligned, sparse, lazy negated views, an `out`
that shares memory with x, router_w, w13 or w2), R-MANIFEST (no kernel at kernel_dir, or a
manifest that is not a moe_step's).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

try:
    from pipelink.runtime import Kernel, LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError
from pipelink.runtime.entry import (device_index, expect_cubin, expect_disjoint, expect_manifest, expect_stream,
                            expect_tensor, flag, optional_dir, tensor_device)

HIDDEN, INTER, EXPERTS, TOP_K, MAX_TOKENS = 2048, 768, 128, 8, 65536
ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"x", "router_w", "w13", "w2", "out", "t", "rank", "world", "peers"}  # the manifest's lent parameters
_cache: dict[tuple[str, int], "MoeStep"] = {}
_lock = threading.Lock()


def check_inputs(x, router_w, w13, w2, out=None, device: int | None = None) -> int:
    """Every check of one call (no CUDA call; `device` None: x's GPU) -> T."""
    import torch

    bf16 = torch.bfloat16
    expect_tensor("x", x, shape=(None, HIDDEN), dtype=bf16, device=device, align=16)
    dev = tensor_device(x) if device is None else device
    T = x.shape[0]
    if not 1 <= T <= MAX_TOKENS:
        raise LaunchError("R-SHAPE", f"x has {T} tokens; moe_step takes 1 .. {MAX_TOKENS}",
                          hint="split the batch into chunks of at most 65536 tokens (skip empty ones)")
    expect_tensor("router_w", router_w, shape=(EXPERTS, HIDDEN), dtype=bf16, device=dev, align=16)
    for name, w, shape in (("w13", w13, (EXPERTS, 2 * INTER, HIDDEN)), ("w2", w2, (EXPERTS, HIDDEN, INTER))):
        expect_tensor(name, w, shape=shape, dtype=bf16, device=dev, align=16)
    if out is not None:
        expect_tensor("out", out, shape=(T, HIDDEN), dtype=bf16, device=dev, align=16)
        expect_disjoint("out", out, {"x": x, "router_w": router_w, "w13": w13, "w2": w2})
    return T


class MoeStep:
    """One loaded moe_step cubin (linked or control) on one device, with the input checks."""

    def __init__(self, cubin: str | Path, manifest: str | Path, device: int = 0):
        device = device_index(device)
        expect_manifest(manifest, "moe_step", params=PARAMS, facts={"top_k": TOP_K},
                        hint="point kernel_dir at bazel-bin/kernels (tools/bazel build //kernels:moe_step)")
        expect_cubin(cubin, hint="relink: tools/bazel build //kernels:moe_step --output_groups=+control")
        self.kernel = Kernel.load(cubin, manifest, device)
        if not isinstance(self.kernel.manifest.facts.get("block_m"), int):
            raise LaunchError("R-MANIFEST", f"{manifest} has no block_m fact", hint="relink //kernels:moe_step")

    def params(self, x, router_w, w13, w2, out=None, *, tokens: int | None = None) -> dict:
        """The launch's parameters; `tokens` is check_inputs' T when the caller has already
        checked these tensors (on this kernel's device), so they are not checked twice."""
        import torch

        T = check_inputs(x, router_w, w13, w2, out, self.kernel.device) if tokens is None else tokens
        if out is None:
            out = torch.empty((T, HIDDEN), dtype=torch.bfloat16, device=x.device)
        return {"x": x, "router_w": router_w, "w13": w13, "w2": w2, "out": out, "t": T,
                "rank": 0, "world": 1, "peers": 0}

    def __call__(self, x, router_w, w13, w2, out=None, *, stream=None, tokens: int | None = None):
        expect_stream(stream)
        p = self.params(x, router_w, w13, w2, out, tokens=tokens)
        self.kernel.launch_with(p, stream=stream)
        return p["out"]

    def open(self, x, router_w, w13, w2, out=None, *, tokens: int | None = None, workspaces=None):
        """A planned session: `s.launch()` replays with no host work (CUDA-graph capturable);
        `s.out` is the output tensor. The tensors must outlive the session. `workspaces`: lent
        buffers (Kernel.plan), e.g. another MoeStep's `kernel.workspace_buffers()`."""
        p = self.params(x, router_w, w13, w2, out, tokens=tokens)
        s = self.kernel.open(workspaces=workspaces, **p)
        s.out = p["out"]
        return s


def load(kernel_dir: str | Path | None = None, device: int = 0, *, control: bool = False,
         name: str = "moe_step") -> MoeStep:
    """The (cached) kernel `name` from `kernel_dir` (default $PIPELINK_MOE_STEP_DIR, else
    bazel-bin/kernels of this checkout) on `device`."""
    kdir, device, control = optional_dir("kernel_dir", kernel_dir), device_index(device), flag("control", control)
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise LaunchError("R-PARAM", f"name = {name!r} is not a kernel name", hint="name='moe_step' (a file stem "
                          "in kernel_dir: <name>.cubin, <name>.manifest.json)")
    d = kdir or Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")
    cubin = d / (f"{name}.control.cubin" if control else f"{name}.cubin")
    if not cubin.is_file():
        raise LaunchError("R-MANIFEST", f"no kernel at {cubin}",
                          hint=f"tools/bazel build //kernels:{name} --output_groups=+control")
    key = (str(cubin.resolve()), int(device))
    with _lock:
        k = _cache.get(key)
        if k is None:
            k = _cache[key] = MoeStep(cubin, d / f"{name}.manifest.json", device)
    return k


def moe_step(x, router_w, w13, w2, out=None, *, control: bool = False, kernel_dir=None, name="moe_step",
             stream=None):
    """One MoE layer forward: bf16 out [T, 2048]."""
    T = check_inputs(x, router_w, w13, w2, out)  # before the kernel is loaded; not again in the call
    expect_stream(stream)
    return load(kernel_dir, tensor_device(x), control=control, name=name)(x, router_w, w13, w2, out, stream=stream,
                                                                            tokens=T)


def open_step(x, router_w, w13, w2, out=None, *, control: bool = False, kernel_dir=None, name="moe_step"):
    """Plan once; the session's launch() is capturable in a CUDA graph."""
    T = check_inputs(x, router_w, w13, w2, out)
    return load(kernel_dir, tensor_device(x), control=control, name=name).open(x, router_w, w13, w2, out, tokens=T)


def reference(x, router_w, w13, w2, dtype=None):
    """Reference in f64 (or `dtype`): routing, per-expert FFN, combine. Also returns the
    per-token gap between the 8th and 9th probability (routing near-ties).
    (moe_reference.reference of qwen3_30b_a3b; the other models: moe_reference.reference.)"""
    import torch
    from moe_reference import reference as model_reference

    return model_reference("qwen3_30b_a3b", x, {"router_w": router_w, "w13": w13, "w2": w2}, dtype or torch.float64)
