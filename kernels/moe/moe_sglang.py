"""SGLang's Triton fused MoE as a baseline for moe_step (issue 9), from its PyPI wheel: the column
benchmarks/moe_bench.py times beside moe_step (kept beside the kernel it is measured against).

SGLang (and vLLM, whose kernel it descends from) serve Qwen3-30B-A3B with one Triton GEMM kernel,
`fused_moe_kernel`, launched for gate/up and for down over expert-sorted, block-padded slots,
with configs tuned per GPU: the wheel ships `E=128,N=768,device_name=NVIDIA_H200.json` for
Qwen3-30B-A3B's layer and `E=8,N=14336` (Triton 3.1's folder) for Mixtral's; other layers run its
default tiles, as SGLang itself would (`find_config`). This module loads that kernel file from an unpacked sglang wheel (the rest of
sglang needs a server stack, sgl-kernel binaries built for another torch, and JIT kernels, none
of which the H200 machine has), puts stand-ins for its import-time helpers in place (CUDA,
sm90, no AITER, no batch-invariant mode, no quantisation), and runs SGLang's own sequence for
bf16 with `filter_expert`: gate/up GEMM, `act_and_mul_triton`, down GEMM with the routing
weight, `moe_sum_reduce_triton`.

What is not SGLang's: the routing (the same torch router as every other column) and the slot
alignment (`moe_align_block_size`: SGLang's is a CUDA kernel in sgl-kernel, or JIT-built; here
torch ops without a host sync, producing the same layout). So two columns:
  sglang          the whole step: router + alignment + the four SGLang kernels (graph-captured);
  sglang:kernels  the four SGLang kernels alone, on routing and alignment made beforehand: a
                  lower bound on any step built from them.

    # not into .whl: the device commands pip-install every wheel there, and this one is cp311
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \\
        --platform manylinux_2_34_x86_64 -d /tmp/whl sglang==0.5.23      # 39 MB, pure Python used
    unzip -q -o /tmp/whl/sglang-0.5.23-*.whl 'sglang/kernels/ops/moe/fused_moe_triton_kernels.py' \\
        'sglang/srt/layers/moe/moe_runner/triton_utils/configs/*' -d .xfer/sgl     # carry .xfer/sgl
    PIPELINK_SGLANG_DIR=$PWD/.xfer/sgl python3 benchmarks/moe_bench.py bench ...
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

KERNELS = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
CONFIGS = "sglang/srt/layers/moe/moe_runner/triton_utils/configs"


class Unavailable(RuntimeError):
    """The column cannot run here; the message says why."""


def _stand_ins(torch) -> dict[str, types.ModuleType]:
    """The modules fused_moe_triton_kernels.py imports at load, as it would see them on CUDA sm90."""
    def sm90() -> bool:
        return torch.cuda.get_device_capability()[0] >= 9

    def quantised(*_a, **_k):
        raise NotImplementedError("quantised paths are not part of the bf16 baseline")

    flag = types.SimpleNamespace(get=lambda: False)
    leaves = {
        "sglang.kernels.jit.utils": {"is_arch_support_pdl": sm90},
        "sglang.kernels.ops.quantization.fp8_kernel": dict.fromkeys(
            ["per_token_group_quant_fp8", "scaled_fp8_quant", "sglang_per_token_group_quant_fp8"], quantised),
        "sglang.kernels.ops.quantization.int8_kernel": dict.fromkeys(
            ["per_token_group_quant_int8", "per_token_quant_int8", "sglang_per_token_group_quant_int8"], quantised),
        "sglang.srt.batch_invariant_ops": {"is_batch_invariant_mode_enabled": lambda: False},
        "sglang.srt.environ": {"envs": types.SimpleNamespace(SGLANG_USE_AITER=flag)},
        "sglang.srt.layers.moe.utils": {"get_moe_padding_size": lambda _aiter: 0},
        "sglang.srt.utils": {"cpu_has_amx_support": lambda: False, "is_cpu": lambda: False,
                             "is_cuda": lambda: True, "is_hip": lambda: False, "is_sm90_supported": sm90},
    }
    mods: dict[str, types.ModuleType] = {}
    for name, attrs in leaves.items():
        parts = name.split(".")
        for i in range(1, len(parts)):  # the parent packages, empty
            pkg = ".".join(parts[:i])
            if pkg not in mods:
                mods[pkg] = types.ModuleType(pkg)
                mods[pkg].__path__ = []
        mods[name] = types.ModuleType(name)
        mods[name].__dict__.update(attrs)
    return mods


def config_name(experts: int, inter: int, device: str = "NVIDIA H200") -> str:
    """SGLang's file name for a bf16 layer's tuned config on `device` (torch.cuda.get_device_name(),
    spaces as underscores, as SGLang's get_device_name gives it; N is the expert's inter)."""
    return f"E={experts},N={inter},device_name={device.replace(' ', '_')}.json"


def find_config(root: Path, experts: int, inter: int, triton_version: str, device: str = "NVIDIA H200") -> Path | None:
    """SGLang 0.5.23's lookup (fused_moe_triton_config.get_moe_configs), restated: the file for this
    GPU in this Triton's folder, else in the other shipped Triton folders, newest first; None: its
    default."""
    base = root / CONFIGS
    name = config_name(experts, inter, device)
    own = base / f"triton_{triton_version.replace('.', '_')}" / name
    if own.is_file():
        return own
    versions = sorted((d.name.removeprefix("triton_") for d in base.glob("triton_*") if d.is_dir()),
                      key=lambda v: tuple(int(x) for x in v.split("_")), reverse=True)
    for v in versions:
        if (base / f"triton_{v}" / name).is_file():
            return base / f"triton_{v}" / name
    return None


def default_configs(experts: int) -> dict:
    """SGLang's get_default_config for bf16 as a {T: config} map for config_for: 16x32x64 tiles
    while T <= E, else 64x64x32, GROUP_SIZE_M 8."""
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    large = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
    return {experts: small, experts + 1: large}  # config_for's nearest key: small iff T <= E


def load(root: str | Path, experts: int = 128, inter: int = 768):
    """(the kernel module, {T: config}, where the configs came from) from an unpacked sglang wheel
    at `root`, for a layer of `experts` experts of intermediate size `inter`."""
    import torch
    try:
        import triton
    except ImportError as e:
        raise Unavailable(f"Triton is not installed here ({e})") from None
    root = Path(root)
    src = root / KERNELS
    if not src.is_file():
        raise Unavailable(f"{src} not found: unpack the sglang 0.5.23 wheel there (kernels/moe/moe_sglang.py)")
    cfg = find_config(root, experts, inter, triton.__version__, torch.cuda.get_device_name())
    stand_ins = _stand_ins(torch)
    saved = {n: sys.modules.get(n) for n in stand_ins}
    sys.modules.update(stand_ins)
    try:  # the module keeps what it imported; sys.modules is restored after
        spec = importlib.util.spec_from_file_location("sglang_fused_moe_triton_kernels", src)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    if cfg is None:
        return mod, default_configs(experts), "default"
    return mod, {int(k): v for k, v in json.loads(cfg.read_text()).items()}, str(cfg.relative_to(root / CONFIGS))


def config_for(configs: dict, tokens: int) -> dict:
    """SGLang's pick: the tuned batch size nearest the token count."""
    return configs[min(configs, key=lambda m: abs(m - tokens))]


def align(ei, experts: int, block_m: int):
    """SGLang's moe_align_block_size layout in torch (no host sync): the T*k slots sorted by
    expert (stably), each expert's run padded to block_m with the sentinel T*k; the expert of
    each block (-1 past the last); the padded total. Sized as SGLang sizes it."""
    import torch
    flat = ei.flatten().to(torch.int64)
    n = flat.numel()
    size = n * block_m if n < experts + 1 else n + (experts + 1) * (block_m - 1)
    size = (size + 3) // 4 * 4
    counts = torch.zeros(experts, dtype=torch.int64, device=ei.device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    end = padded.cumsum(0)
    start, first = end - padded, counts.cumsum(0) - counts
    order = torch.argsort(flat, stable=True)
    e = flat[order]
    dest = start[e] + torch.arange(n, device=ei.device) - first[e]
    sorted_ids = torch.full((size,), n, dtype=torch.int32, device=ei.device)
    sorted_ids[dest] = order.to(torch.int32)
    blocks = (size + block_m - 1) // block_m
    b0 = torch.arange(blocks, device=ei.device) * block_m
    expert_ids = torch.searchsorted(end, b0, right=True)
    expert_ids = torch.where(b0 < end[-1], expert_ids, -1).to(torch.int32)
    return sorted_ids, expert_ids, end[-1:].to(torch.int32)


def step_factory(root: str | Path, route, experts: int, top_k: int, inter: int = 768, *, biases=None,
                 activation=None):
    """(step(x, router_w, w13, w2) -> out, kernels(x, w13, w2, routed) -> out, prepare(x, router_w, w13) -> routed).
    `routed` holds the routing, the alignment, the config and SGLang's intermediate buffers.
    step.configs says which config file SGLang would pick for this layer ("default": none).
    biases: {"b13": [E, 2I], "b2": [E, H]} (gpt-oss), added by SGLang's GEMM kernel (its `bias`
    operand, before the routing weight); activation(gate, up) -> h: a model's other activation
    (gpt-oss's clamped SwiGLU) as torch ops between the GEMMs, since act_and_mul_triton only has
    silu/gelu (with a clamp but without gpt-oss's alpha and +1); None: act_and_mul_triton's silu."""
    import torch
    import triton.language as tl
    mod, configs, source = load(root, experts, inter)

    def prepare(x, router_w, w13):
        wv, ei = route(x, router_w)
        cfg = config_for(configs, x.shape[0])
        sorted_ids, expert_ids, total = align(ei, experts, cfg["BLOCK_SIZE_M"])
        T, n = x.shape[0], w13.shape[1]
        slots = T * top_k
        return dict(wv=wv.float().contiguous(), ei=ei.to(torch.int32).contiguous(), cfg=cfg, sorted_ids=sorted_ids,
                    expert_ids=expert_ids, total=total,
                    gu=torch.empty(slots, n, dtype=x.dtype, device=x.device),
                    h=torch.empty(slots, n // 2, dtype=x.dtype, device=x.device))

    b13, b2 = (biases or {}).get("b13"), (biases or {}).get("b2")

    def gemm(a, w, bias, c, r, mul_weight, k):
        mod.invoke_fused_moe_kernel(a, w, bias, c, None, None, None, r["wv"], r["ei"], r["sorted_ids"],
                                    r["expert_ids"], r["total"], mul_weight, k, r["cfg"], compute_type=tl.bfloat16,
                                    use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
                                    use_int4_w4a16=False, per_channel_quant=False, filter_expert=True)

    def kernels(x, w13, w2, r):
        T = x.shape[0]
        y = torch.empty(T, top_k, w2.shape[1], dtype=x.dtype, device=x.device)
        out = torch.empty(T, w2.shape[1], dtype=x.dtype, device=x.device)
        gemm(x, w13, b13, r["gu"], r, False, top_k)
        if activation is None:
            mod.act_and_mul_triton(r["gu"], r["h"], r["cfg"], r["ei"], r["expert_ids"], False, "silu")
        else:  # (slots of experts no rank owns do not occur here: one rank)
            n = r["gu"].shape[1] // 2
            r["h"].copy_(activation(r["gu"][:, :n].float(), r["gu"][:, n:].float()))
        gemm(r["h"], w2, b2, y, r, True, 1)
        mod.moe_sum_reduce_triton(y, out, 1.0)
        return out

    def step(x, router_w, w13, w2):
        return kernels(x, w13, w2, prepare(x, router_w, w13))

    step.configs = source
    return step, kernels, prepare

