"""Python entry point of the linked GEMM + SwiGLU kernel.

    out = gemm_swiglu(x, w)                     # x: [M, K] bf16, w: [2N, K] bf16 -> out: [M, N] bf16
    gemm_swiglu(x, w, out=buf, kernel_dir=d)    # write into buf; kernel from d/gemm_swiglu.cubin

computes out = silu(x @ Wg^T) * (x @ Wu^T), with Wg = w[:N] (gate rows) and Wu = w[N:] (up
rows), accumulating in f32. The kernel is the one `pipelink link` wrote: `gemm_swiglu.cubin`
(or `gemm_swiglu.control.cubin`) and `gemm_swiglu.manifest.json` in `kernel_dir` (default:
$PIPELINK_GEMM_SWIGLU_DIR). Supported shapes: M % block_m == 0, N % block_n == 0,
K % block_k == 0 (tile sizes from the manifest's facts); every operand contiguous,
row-major, 16-byte aligned (cp.async), on the kernel's GPU. Anything else is refused with a
pipelink.runtime.LaunchError (R-SHAPE, R-DTYPE, R-LAYOUT, R-DEVICE) before launching.
Launches go on torch's current stream, so calls can be captured in a CUDA graph.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

try:
    from pipelink.runtime import Kernel, LaunchError, expect_tensor
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError, expect_tensor
from pipelink.runtime.entry import (device_index, expect_disjoint, expect_stream, flag, kernel_file, optional_dir,
                                    tensor_device)

KERNEL = "gemm_swiglu"
_cache: dict[tuple[str, int], "GemmSwiglu"] = {}
_lock = threading.Lock()


class GemmSwiglu:
    """One loaded cubin (linked or control) on one device, with the shape checks."""

    def __init__(self, cubin: str | Path, manifest: str | Path | None = None, device: int = 0):
        self.kernel = Kernel.load(cubin, manifest, device, validate=_validate)
        f = self.kernel.manifest.facts
        missing = [n for n in ("block_m", "block_n", "block_k") if n not in f]
        if missing or set(self.kernel.manifest.lent) != {"x", "w", "out", "m", "n", "k"}:
            raise LaunchError("R-MANIFEST", f"{cubin} is not a gemm_swiglu kernel (facts {sorted(f)}, params "
                              f"{sorted(self.kernel.manifest.lent)})",
                              hint="point kernel_dir at the directory //kernels:gemm_swiglu (or a variant) was linked into")
        self.block_m, self.block_n, self.block_k = f["block_m"], f["block_n"], f["block_k"]
        # Whole tiles only, unless the kernel is of the TMA family (_takes_ragged).
        self.ragged = _takes_ragged(self.kernel)

    def __repr__(self) -> str:
        return f"GemmSwiglu(tile {self.block_m}x{self.block_n}x{self.block_k}, {self.kernel!r})"

    def __call__(self, x, w, out=None, *, stream=None):
        import torch

        dev = self.kernel.device
        expect_tensor("x", x, shape=(None, None), dtype=torch.bfloat16, device=dev, align=16)
        M, K = x.shape
        expect_tensor("w", w, shape=(None, K), dtype=torch.bfloat16, device=dev, align=16)
        if w.shape[0] % 2:
            raise LaunchError("R-SHAPE", f"w has {w.shape[0]} rows; it must stack the gate and up "
                              "projections ([2N, K]: rows 0..N-1 gate, N..2N-1 up)",
                              hint="pass w = torch.cat([w_gate, w_up]) of shape [2N, K]")
        N = w.shape[0] // 2
        if out is None:
            if self._granule(M, N, K):
                _shape_error(M, N, K, self)  # before allocating
            out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
        else:
            expect_tensor("out", out, shape=(M, N), dtype=torch.bfloat16, device=dev, align=16)
            expect_disjoint("out", out, {"x": x, "w": w})
        expect_stream(stream)
        if M == 0 or N == 0:
            return out
        self.kernel.launch_with({"x": x, "w": w, "out": out, "m": M, "n": N, "k": K}, stream=stream)
        return out


    def _granule(self, M: int, N: int, K: int) -> bool:
        if self.ragged:
            return bool(N % 8 or K % 8)
        return bool(M % self.block_m or N % self.block_n or K % self.block_k)


def _shape_error(M: int, N: int, K: int, g: "GemmSwiglu") -> None:
    if g.ragged:
        for name, v in (("N", N), ("K", K)):
            if v % 8:
                raise LaunchError("R-SHAPE", f"{name} = {v} is not a multiple of 8 (TMA needs 16-byte rows)",
                                  hint=f"pad {name} to a multiple of 8")
        return
    for name, v, b, what in (("M", M, g.block_m, "block_m"), ("N", N, g.block_n, "block_n"),
                             ("K", K, g.block_k, "block_k")):
        if v % b:
            raise LaunchError("R-SHAPE", f"{name} = {v} is not a multiple of {what} = {b} "
                              f"(x: [M, K] = [{M}, {K}], w: [2N, K] = [{2 * N}, {K}])",
                              hint=f"pad {name} to a multiple of {b}, or use a kernel linked with a smaller tile")


def _takes_ragged(kernel: Kernel) -> bool:
    """The TMA family (tma_loader + swiglu_tma_store: all three tensors through tensor maps)
    zero-fills loads and clips stores, so it takes any M and N, K multiples of 8."""
    return {"tmap_x", "tmap_w", "tmap_out"} <= kernel.manifest.provided


def _validate(kernel: Kernel | None, p: Mapping[str, Any]) -> None:
    """Runs before every launch, also for raw `kernel(x=..., ...)` calls: sizes match the tensors."""
    f = kernel.manifest.facts if kernel is not None else {}
    m, n, k = p["m"], p["n"], p["k"]
    if kernel is not None and _takes_ragged(kernel):
        for name, v in (("n", n), ("k", k)):
            if v % 8:
                raise LaunchError("R-SHAPE", f"parameter {name!r} = {v} is not a multiple of 8 (TMA rows)",
                                  hint=f"pad {name} to a multiple of 8")
    elif f:
        for name, v, b in (("m", m, f["block_m"]), ("n", n, f["block_n"]), ("k", k, f["block_k"])):
            if v % b:
                raise LaunchError("R-SHAPE", f"parameter {name!r} = {v} is not a multiple of {b} (the tile)",
                                  hint=f"pad {name} to a multiple of {b}")
    if k == 0:
        raise LaunchError("R-SHAPE", "k = 0: the kernel needs at least one k-step", hint="skip the call (out = 0)")
    x, w, out = p["x"], p["w"], p["out"]
    for name, t, shape in (("x", x, (m, k)), ("w", w, (2 * n, k)), ("out", out, (m, n))):
        if hasattr(t, "shape") and tuple(t.shape) != shape:
            raise LaunchError("R-SHAPE", f"{name} has shape {list(t.shape)}; m, n, k = {m}, {n}, {k} need "
                              f"{list(shape)}", hint="pass m, n, k of the tensors")
        if hasattr(t, "data_ptr") and t.data_ptr() % 16:
            raise LaunchError("R-LAYOUT", f"{name} is not 16-byte aligned (cp.async needs it)",
                              hint="pass a tensor that starts at an aligned address")


def load(kernel_dir: str | Path | None = None, device: int = 0, *, control: bool = False) -> GemmSwiglu:
    """The (cached) kernel of `kernel_dir` on `device`."""
    kdir, device, control = optional_dir("kernel_dir", kernel_dir), device_index(device), flag("control", control)
    d = kdir or os.environ.get("PIPELINK_GEMM_SWIGLU_DIR")
    if not d:
        raise LaunchError("R-MANIFEST", "no kernel directory given",
                          hint="pass kernel_dir= or set PIPELINK_GEMM_SWIGLU_DIR to where `pipelink link` "
                               "wrote gemm_swiglu.cubin and gemm_swiglu.manifest.json")
    cubin = Path(d) / (f"{KERNEL}.control.cubin" if control else f"{KERNEL}.cubin")
    key = (str(kernel_file(cubin, hint="pass kernel_dir= (or set PIPELINK_GEMM_SWIGLU_DIR) to where `pipelink link` "
                                      f"wrote {cubin.name}")), int(device))
    with _lock:
        g = _cache.get(key)
        if g is None:
            g = _cache[key] = GemmSwiglu(cubin, Path(d) / f"{KERNEL}.manifest.json", device)
    return g


def gemm_swiglu(x, w, out=None, *, kernel_dir: str | Path | None = None, stream=None):
    """out[M, N] = silu(x @ w[:N].T) * (x @ w[N:].T), bf16 in and out, f32 accumulation."""
    expect_tensor("x", x)
    return load(kernel_dir, tensor_device(x))(x, w, out, stream=stream)


def reference(x, w):
    """The f64 reference the tests and benchmarks compare against."""
    import torch.nn.functional as F

    N = w.shape[0] // 2
    h = x.double() @ w.double().t()
    return F.silu(h[:, :N]) * h[:, N:]
