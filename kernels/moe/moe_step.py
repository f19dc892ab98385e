"""Python entry point of the linked MoE megakernel (`//kernels:moe_step` and its sibling targets).

    out = moe_step(x, router_w, w13, w2)            # one Qwen3-30B-A3B MoE layer, bf16
    s = open_step(x, router_w, w13, w2, out)        # plan once; s.launch() is graph-capturable
    out = moe_step(x, router_w, w13, w2, model="gpt_oss_120b", router_b=rb, b13=b13, b2=b2)
    layer = MoeLayer("deepseek_v3", tensors)         # or MoeLayer.from_config("<ckpt>/config.json", tensors)
    out = layer(x)

Shapes (qwen3_30b_a3b, the default model): x [T, 2048], router_w [128, 2048], w13 [128, 1536, 2048]
(rows 0..767 gate, 768..1535 up), w2 [128, 2048, 768], out [T, 2048]; all bf16, contiguous, on
one CUDA device; 1 <= T <= 65536. Math: p = softmax(x·router_wᵀ) in f32, top-8 experts, weights
renormalized; out[t] = Σ_k w_k · (silu(x·gateᵀ) * (x·upᵀ)) · w2[e_k]ᵀ with f32 accumulation (h in
bf16). The other models (moe_models.MODELS: their shapes, extra tensors and routing) take the
same three weights in their own sizes plus their extras by keyword; moe_reference.reference is
each one's f64 reference. The kernel of model m is read from bazel-bin (or `kernel_dir` /
$PIPELINK_MOE_STEP_DIR): <target>.cubin (or with control=True <target>.control.cubin) and
<target>.manifest.json, target = moe_step for qwen3_30b_a3b, else the model's name.

Bad input is a pipelink.runtime.LaunchError with a code and a hint, raised by `check_inputs`
before the kernel is loaded or anything launched: R-PARAM (an unknown model, a missing or
unexpected tensor, a non-tensor, a tensor that requires grad while autograd records, control
not a bool, a name that is no file stem, a kernel_dir that is no path, a stream that is no
stream), R-SHAPE (wrong shapes, T outside 1 .. 65536), R-DTYPE (not bf16; score_bias not f32),
R-DEVICE (CPU tensors, tensors on different GPUs, a bad device), R-LAYOUT (non-contiguous, not
16-byte aligned, sparse, lazy negated views, an `out` that shares memory with an input),
R-MANIFEST (no kernel at kernel_dir, or a manifest that is not the model's kernel: other
parameters, or facts hidden/inter/experts/top_k that are not the model's).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Mapping

if str(Path(__file__).resolve().parent) not in sys.path:  # moe_models, moe_reference beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from pipelink.runtime import Kernel, LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError
from pipelink.runtime.entry import (device_index, expect_cubin, expect_disjoint, expect_manifest, expect_stream,
                            expect_tensor, flag, kernel_file, optional_dir, tensor_device)
from pipelink.runtime.launch_values import stream_handle

from moe_models import MODELS, MoeModel, linked_model, model_from_hf_config, resolve_model

DEFAULT_MODEL = MODELS["qwen3_30b_a3b"]
HIDDEN, INTER, EXPERTS, TOP_K = DEFAULT_MODEL.hidden, DEFAULT_MODEL.inter, DEFAULT_MODEL.experts, DEFAULT_MODEL.top_k
MAX_TOKENS = 65536
ROOT = Path(__file__).resolve().parents[2]
LAUNCH_VALUES = ("out", "t", "rank", "world", "peers")  # lent beside the model's tensors
# Every kernel takes the bias tensors; the owners read them only where the model's `biases` fact
# is true (gpt-oss), so other models lend null pointers.
BIAS_PARAMS = ("router_b", "b13", "b2")


def bias_params(model: MoeModel) -> tuple[str, ...]:
    """The bias tensors its kernel takes: the router's router_b (not the grouped router's), the
    expert's b13 and the combine's b2."""
    return tuple(n for n in BIAS_PARAMS if n != "router_b" or model.router == "moe_router")


def model_params(model: MoeModel) -> set[str]:
    """The manifest's lent parameters of `model`'s kernel: x, the model's tensors, the bias
    tensors, the router's scalars, the launch values (not the shared expert's: moe_step applies it)."""
    return {"x"} | set(model.kernel_tensors()) | set(bias_params(model)) | set(model.launch_values()) | set(LAUNCH_VALUES)


PARAMS = model_params(DEFAULT_MODEL)
_cache: dict[tuple[str, int, str], "MoeStep"] = {}
_lock = threading.Lock()
_TARGET = object()  # load()'s name default: the model's target


def _shapes(model: MoeModel) -> str:
    return ", ".join(f"{n} {list(s)} {d}" for n, (s, d) in model.tensors().items())


def _expect(model: MoeModel, name: str, t, shape, dtype, device) -> None:
    """expect_tensor, with the model's shapes as the hint of a wrong shape."""
    try:
        expect_tensor(name, t, shape=shape, dtype=dtype, device=device, align=16)
    except LaunchError as e:
        if e.code != "R-SHAPE":
            raise
        raise LaunchError("R-SHAPE", e.diagnostics[0].message,
                          hint=f"{model.name} takes x [T, {model.hidden}], {_shapes(model)} (another model: "
                               f"model= one of {', '.join(MODELS)})") from None


def _dtypes() -> dict:
    import torch
    return {"bf16": torch.bfloat16, "f32": torch.float32}


def _weights(model: MoeModel, router_w, w13, w2, extras: Mapping) -> dict:
    """name -> tensor of every weight the model takes; R-PARAM for a missing or unexpected one."""
    want = model.extras()
    unexpected = sorted(set(extras) - set(want))
    missing = [n for n in want if n not in extras or extras[n] is None]
    if unexpected or missing:
        what = (f"takes no {', '.join(unexpected)}" if unexpected else "") + (
            "; " if unexpected and missing else "") + (f"needs {', '.join(missing)}" if missing else "")
        raise LaunchError("R-PARAM", f"the {model.name} layer {what}",
                          hint=f"{model.name} takes x [T, {model.hidden}], {_shapes(model)}" +
                               ("" if want else " (no other tensors)"))
    return {"router_w": router_w, "w13": w13, "w2": w2, **{n: extras[n] for n in want}}


def check_inputs(x, router_w, w13, w2, out=None, device: int | None = None, *, model="qwen3_30b_a3b",
                 **extras) -> int:
    """Every check of one call of `model` (no CUDA call; `device` None: x's GPU) -> T."""
    import torch

    model = linked_model(model)
    weights = _weights(model, router_w, w13, w2, extras)
    dtypes = _dtypes()
    _expect(model, "x", x, (None, model.hidden), dtypes["bf16"], device)
    dev = tensor_device(x) if device is None else device
    T = x.shape[0]
    if not 1 <= T <= MAX_TOKENS:
        raise LaunchError("R-SHAPE", f"x has {T} tokens; moe_step takes 1 .. {MAX_TOKENS}",
                          hint="split the batch into chunks of at most 65536 tokens (skip empty ones)")
    for name, (shape, dt) in model.tensors().items():
        _expect(model, name, weights[name], shape, dtypes[dt], dev)
    if out is not None:
        _expect(model, "out", out, (T, model.hidden), dtypes["bf16"], dev)
        expect_disjoint("out", out, {"x": x, **weights})
    return T


class MoeStep:
    """One loaded moe_step cubin (linked or control) of one model on one device, with the input checks."""

    model = DEFAULT_MODEL

    def __init__(self, cubin: str | Path, manifest: str | Path, device: int = 0, *, model="qwen3_30b_a3b"):
        self.model = model = linked_model(model)
        device = device_index(device)
        build = f"tools/bazel build //kernels:{model.kernel}"
        expect_manifest(manifest, model.kernel, params=model_params(model), facts=model.facts(),
                        hint=f"point kernel_dir at bazel-bin/kernels ({build}: the {model.name} build)")
        expect_cubin(cubin, hint=f"relink: {build} --output_groups=+control")
        self.kernel = Kernel.load(cubin, manifest, device)
        if not isinstance(self.kernel.manifest.facts.get("block_m"), int):
            raise LaunchError("R-MANIFEST", f"{manifest} has no block_m fact", hint=f"relink //kernels:{model.kernel}")

    def params(self, x, router_w, w13, w2, out=None, *, tokens: int | None = None, **extras) -> dict:
        """The launch's parameters; `tokens` is check_inputs' T when the caller has already
        checked these tensors (on this kernel's device), so they are not checked twice."""
        import torch

        if tokens is None:
            tokens = check_inputs(x, router_w, w13, w2, out, self.kernel.device, model=self.model, **extras)
        weights = _weights(self.model, router_w, w13, w2, extras)
        if out is None:
            out = torch.empty((tokens, self.model.hidden), dtype=torch.bfloat16, device=x.device)
        unread = dict.fromkeys((n for n in bias_params(self.model) if n not in weights), 0)
        kernel = {n: weights[n] for n in self.model.kernel_tensors()}
        return {"x": x, **kernel, **unread, **self.model.launch_values(), "out": out, "t": tokens, "rank": 0,
                "world": 1, "peers": 0}

    def __call__(self, x, router_w, w13, w2, out=None, *, stream=None, tokens: int | None = None, **extras):
        expect_stream(stream)
        p = self.params(x, router_w, w13, w2, out, tokens=tokens, **extras)
        self.kernel.launch_with(p, stream=stream)
        if self.model.shared_inter:
            add_shared_expert(self.model, x, p["out"], extras["shared_w13"], extras["shared_w2"], stream)
        return p["out"]

    def open(self, x, router_w, w13, w2, out=None, *, tokens: int | None = None, workspaces=None, **extras):
        """A planned session: `s.launch()` replays with no host work (CUDA-graph capturable);
        `s.out` is the output tensor. The tensors must outlive the session. `workspaces`: lent
        buffers (Kernel.plan), e.g. another MoeStep's `kernel.workspace_buffers()`. A model with a
        shared expert: launch() also applies it (torch, on the launch's stream; capturable too)."""
        p = self.params(x, router_w, w13, w2, out, tokens=tokens, **extras)
        s = self.kernel.open(workspaces=workspaces, **p)
        s.out = p["out"]
        if self.model.shared_inter:
            return _SharedSession(s, self.model, x, extras["shared_w13"], extras["shared_w2"])
        return s


def _torch_stream(stream, device: int):
    """torch's stream object for a launch's `stream` (None: the current stream); the handle is read
    and checked as the runtime reads a launch's (launch_values.stream_handle)."""
    import torch

    if stream is None or isinstance(stream, torch.cuda.Stream):
        return stream
    return torch.cuda.ExternalStream(stream_handle(stream, device))


def add_shared_expert(model: MoeModel, x, out, shared_w13, shared_w2, stream=None) -> None:
    """out += the shared expert of x (DeepSeek-V3: weight 1, added to the routed sum), on `stream`
    after the kernel: gate/up and down by cuBLAS (bf16 in, f32 accumulation), h = silu(gate) * up
    in f32 rounded to bf16 as the routed experts keep it. No kernel component computes it yet
    (kernels/moe/README.md, "Models")."""
    import contextlib

    import torch

    ts = _torch_stream(stream, x.device.index)
    with torch.cuda.stream(ts) if ts is not None else contextlib.nullcontext():
        Is = model.shared_inter
        gu = torch.nn.functional.linear(x, shared_w13).float()
        h = (torch.nn.functional.silu(gu[:, :Is]) * gu[:, Is:]).to(torch.bfloat16)
        out.add_(torch.nn.functional.linear(h, shared_w2))


class _SharedSession:
    """A kernel session of a model with a shared expert: launch() runs the kernel, then the shared
    expert (add_shared_expert) on the same stream."""

    def __init__(self, session, model: MoeModel, x, shared_w13, shared_w2):
        self.session, self.model, self.x, self.w13, self.w2 = session, model, x, shared_w13, shared_w2
        self.out = session.out

    def launch(self, stream=None):
        expect_stream(stream)
        plan = self.session.launch(stream)
        add_shared_expert(self.model, self.x, self.out, self.w13, self.w2, stream)
        return plan

    def __getattr__(self, name):
        return getattr(self.session, name)


def load(kernel_dir: str | Path | None = None, device: int = 0, *, control: bool = False,
         name=_TARGET, model="qwen3_30b_a3b") -> MoeStep:
    """The (cached) kernel `name` (default: the model's target) of `model` from `kernel_dir`
    (default $PIPELINK_MOE_STEP_DIR, else bazel-bin/kernels of this checkout) on `device`."""
    model = linked_model(model)
    kdir, device, control = optional_dir("kernel_dir", kernel_dir), device_index(device), flag("control", control)
    if name is _TARGET:
        name = model.kernel
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise LaunchError("R-PARAM", f"name = {name!r} is not a kernel name", hint=f"name={model.kernel!r} (a file "
                          "stem in kernel_dir: <name>.cubin, <name>.manifest.json)")
    d = kdir or Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")
    cubin = d / (f"{name}.control.cubin" if control else f"{name}.cubin")
    key = (str(kernel_file(cubin, hint=f"tools/bazel build //kernels:{name} --output_groups=+control")), int(device),
           model.name)
    with _lock:
        k = _cache.get(key)
        if k is None:
            k = _cache[key] = MoeStep(cubin, d / f"{name}.manifest.json", device, model=model)
    return k


def moe_step(x, router_w, w13, w2, out=None, *, control: bool = False, kernel_dir=None, name=_TARGET,
             stream=None, model="qwen3_30b_a3b", **extras):
    """One MoE layer forward of `model` (extras: its tensors beyond the three): bf16 out [T, hidden]."""
    T = check_inputs(x, router_w, w13, w2, out, model=model, **extras)  # before the kernel is loaded
    expect_stream(stream)
    step = load(kernel_dir, tensor_device(x), control=control, name=name, model=model)
    return step(x, router_w, w13, w2, out, stream=stream, tokens=T, **extras)


def open_step(x, router_w, w13, w2, out=None, *, control: bool = False, kernel_dir=None, name=_TARGET,
              model="qwen3_30b_a3b", **extras):
    """Plan once; the session's launch() is capturable in a CUDA graph."""
    T = check_inputs(x, router_w, w13, w2, out, model=model, **extras)
    step = load(kernel_dir, tensor_device(x), control=control, name=name, model=model)
    return step.open(x, router_w, w13, w2, out, tokens=T, **extras)


class MoeLayer:
    """One MoE layer of a served model with its weights bound: `layer(x, out=None)`.

        layer = MoeLayer("mixtral_8x7b", {"router_w": rw, "w13": w13, "w2": w2})
        layer = MoeLayer.from_config("/ckpt/config.json", moe_convert.convert_layer(...))

    `tensors` holds exactly the model's tensors (MoeModel.tensors()); they are checked here, the
    kernel is loaded at the first call (after that call's checks)."""

    def __init__(self, model_or_name, tensors: Mapping, kernel_dir=None, device: int = 0, *, control: bool = False):
        self.model = linked_model(model_or_name)
        if not isinstance(tensors, Mapping) or not all(isinstance(k, str) for k in tensors):
            raise LaunchError("R-PARAM", f"tensors = {type(tensors).__name__} is not a dict of name -> tensor",
                              hint=f"{self.model.name} takes {_shapes(self.model)}")
        self.tensors = dict(tensors)
        self.kernel_dir, self.device = optional_dir("kernel_dir", kernel_dir), device_index(device)
        self.control = flag("control", control)
        w = {k: v for k, v in self.tensors.items() if k not in ("router_w", "w13", "w2")}
        for n in ("router_w", "w13", "w2"):
            if n not in self.tensors:
                raise LaunchError("R-PARAM", f"the {self.model.name} layer needs {n}",
                                  hint=f"{self.model.name} takes {_shapes(self.model)}")
        self._weights = (self.tensors["router_w"], self.tensors["w13"], self.tensors["w2"])
        self._extras = w
        _weights(self.model, *self._weights, w)
        dtypes = _dtypes()  # the weights alone here; each call checks them again with its x
        for name, (shape, dt) in self.model.tensors().items():
            _expect(self.model, name, self.tensors[name], shape, dtypes[dt], self.device)

    @classmethod
    def from_config(cls, config_json_path, tensors: Mapping, kernel_dir=None, device: int = 0, **kw) -> "MoeLayer":
        """The layer of the served model that the checkpoint's config.json describes (R-CONFIG if none)."""
        return cls(model_from_hf_config(config_json_path), tensors, kernel_dir, device, **kw)

    def _check(self, x, out) -> int:
        return check_inputs(x, *self._weights, out, self.device, model=self.model, **self._extras)

    def __call__(self, x, out=None, *, stream=None):
        T = self._check(x, out)
        expect_stream(stream)
        step = load(self.kernel_dir, self.device, control=self.control, model=self.model)
        return step(x, *self._weights, out, stream=stream, tokens=T, **self._extras)

    def open(self, x, out=None):
        """A planned, graph-capturable session of this layer (see MoeStep.open)."""
        T = self._check(x, out)
        step = load(self.kernel_dir, self.device, control=self.control, model=self.model)
        return step.open(x, *self._weights, out, tokens=T, **self._extras)


def reference(x, router_w, w13, w2, dtype=None):
    """Reference in f64 (or `dtype`): routing, per-expert FFN, combine. Also returns the
    per-token gap between the 8th and 9th probability (routing near-ties).
    (moe_reference.reference of qwen3_30b_a3b; the other models: moe_reference.reference.)"""
    import torch
    from moe_reference import reference as model_reference

    return model_reference("qwen3_30b_a3b", x, {"router_w": router_w, "w13": w13, "w2": w2}, dtype or torch.float64)
