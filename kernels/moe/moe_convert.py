"""Published checkpoints' per-layer MoE tensors (Hugging Face names) -> our layout (moe_models).

    from moe_convert import convert_layer
    tensors = convert_layer(MODELS["mixtral_8x7b"], state_dict, "model.layers.3.")
    MoeLayer("mixtral_8x7b", {k: v.cuda() for k, v in tensors.items()})(x)

Our layout: router_w [E, H], w13 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I], bf16; the
extras of moe_models.MoeModel.tensors(). Sources, per model_type:
- qwen3_moe, olmoe: mlp.gate.weight, mlp.experts.{e}.{gate,up,down}_proj.weight
- mixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.{e}.w1 (gate) / w3 (up) / w2 (down).weight
- deepseek_v3: as qwen, plus mlp.gate.e_score_correction_bias (f32) and mlp.shared_experts.*;
  the published checkpoint stores the projections as FP8 e4m3 with a `weight_scale_inv` (f32)
  per 128 × 128 block (w = fp8 · scale_inv): dequantized here (bf16 weights pass as they are).
- gpt_oss (transformers names): mlp.router.weight/bias, mlp.experts.gate_up_proj [E, H, 2I]
  (gate and up INTERLEAVED along the last dim: column 2j gate j, 2j+1 up j), gate_up_proj_bias
  [E, 2I] (interleaved too), down_proj [E, I, H], down_proj_bias [E, H]; or, as published,
  MXFP4 gate_up_proj_blocks [E, 2I, H/32, 16] + gate_up_proj_scales [E, 2I, H/32] and
  down_proj_blocks [E, H, I/32, 16] + down_proj_scales [E, H, I/32] (uint8): each byte holds two
  e2m1 values, the low nibble first; each scale is an e8m0 exponent (2^(s - 127)) for 32 values.
Missing or unexpected tensors under the layer's MoE module are R-CONFIG, a wrong shape R-SHAPE
(both name the tensor and what is expected), NaN or inf in a converted tensor R-CONFIG; tensors
outside the MoE module are ignored.
"""

from __future__ import annotations

from typing import Mapping

import torch

from moe_models import FAMILY, MoeModel, resolve_model
from pipelink.runtime import LaunchError  # importable once moe_models has put tools/ on sys.path
from pipelink.runtime.entry import expect_dense, expect_finite, integer

BF16 = torch.bfloat16
FP8_BLOCK = 128  # DeepSeek-V3 quantization_config.weight_block_size = [128, 128]
MXFP4_BLOCK = 32
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)  # nibble -> value


def dequantize_fp8_blocks(w: torch.Tensor, scale_inv: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    """[R, C] FP8 weights × their per-(block × block) scale_inv [ceil(R/b), ceil(C/b)] -> bf16."""
    R, C = w.shape
    s = scale_inv.to(torch.float32).repeat_interleave(block, 0)[:R].repeat_interleave(block, 1)[:, :C]
    return (w.to(torch.float32) * s).to(BF16)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[..., G, 16] uint8 blocks (two e2m1 a byte, low nibble first) and [..., G] e8m0 scales ->
    [..., G·32] bf16 (every value is exact in bf16)."""
    lut = torch.tensor(E2M1, dtype=torch.float32)
    b = blocks.to(torch.uint8)
    vals = torch.stack((lut[(b & 0x0F).long()], lut[(b >> 4).long()]), dim=-1).flatten(-2)  # [..., G, 32]
    vals = torch.ldexp(vals, (scales.to(torch.int32) - 127).unsqueeze(-1).to(torch.float32))
    return vals.flatten(-2).to(BF16)


class _Layer:
    """The layer's tensors under one MoE module prefix, taken one by one; leftovers are reported."""

    def __init__(self, model: MoeModel, state_dict: Mapping, prefix: str):
        self.model, self.prefix = model, prefix
        self.sd = {k[len(prefix):]: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(prefix)}
        self.taken: set[str] = set()

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        t = self.get(name)
        if t is None:
            raise LaunchError("R-CONFIG", f"the {self.model.name} checkpoint layer has no {self.prefix}{name}",
                              hint=f"expected {self.prefix}{name} of shape {list(shape)}; convert_layer's "
                                   "layer_prefix must be the layer's own (e.g. 'model.layers.3.')")
        if tuple(t.shape) != tuple(shape):
            raise LaunchError("R-SHAPE", f"{self.prefix}{name} has shape {list(t.shape)}, expected {list(shape)} "
                              f"for {self.model.name}", hint=f"{self.model.describe()}: is this the checkpoint of "
                                                             "that model?")
        return t

    def get(self, name: str):
        t = self.sd.get(name)
        if t is not None:
            if not isinstance(t, torch.Tensor):
                raise LaunchError("R-CONFIG", f"{self.prefix}{name} is a {type(t).__name__}, not a tensor",
                                  hint="pass the checkpoint's tensors (e.g. safetensors.torch.load_file)")
            expect_dense(self.prefix + name, t, hint="pass the checkpoint's tensors as they load (dense, on the CPU)")
            if t.device.type != "cpu":  # meta: no data; a GPU tensor mixed with CPU ones fails in torch.cat
                raise LaunchError("R-DEVICE", f"{self.prefix}{name} is on {t.device}, not on the CPU",
                                  hint="pass CPU tensors (safetensors.torch.load_file(shard) loads to the CPU); "
                                       "move the converted tensors to the GPU afterwards")
            self.taken.add(name)
        return t

    def done(self) -> None:
        extra = sorted(set(self.sd) - self.taken)
        if extra:
            shown = ", ".join(self.prefix + n for n in extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
            raise LaunchError("R-CONFIG", f"unexpected tensors in the {self.model.name} layer: {shown}",
                              hint=f"{self.model.describe()}: a checkpoint of another model (or another layer "
                                   "kind, e.g. a dense layer) has other tensors")


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _float(t: torch.Tensor, name: str) -> torch.Tensor:
    """A tensor read as it is: a float that is no FP8 (FP8 is dequantized by _weight only, with its scale)."""
    if not t.is_floating_point() or t.dtype in FP8:
        raise LaunchError("R-CONFIG", f"{name} has dtype {t.dtype}, not a floating-point weight" +
                          (" that is read without a scale" if t.is_floating_point() else ""),
                          hint="a quantized checkpoint needs its own scales (FP8: weight_scale_inv, on the "
                               "projections only)")
    return t


def _weight(layer: _Layer, name: str, shape: tuple[int, int], fp8_block: int) -> torch.Tensor:
    """A [out, in] projection as bf16: FP8 with its block scale_inv dequantized, else cast."""
    w = layer.take(name, shape)
    scale_name = name[:-len("weight")] + "weight_scale_inv"
    fp8 = w.dtype in FP8
    scale = layer.get(scale_name)
    if fp8 != (scale is not None):
        raise LaunchError("R-CONFIG", f"{layer.prefix}{name} is {w.dtype} " +
                          ("without its weight_scale_inv" if fp8 else f"but has a {scale_name}"),
                          hint="FP8 weights come with a weight_scale_inv [ceil(out/128), ceil(in/128)] (f32)")
    if not fp8:
        return _float(w, layer.prefix + name).to(BF16)
    blocks = tuple(-(-d // fp8_block) for d in shape)
    _float(scale, layer.prefix + scale_name)
    if tuple(scale.shape) != blocks:
        raise LaunchError("R-SHAPE", f"{layer.prefix}{scale_name} has shape {list(scale.shape)}, expected "
                          f"{list(blocks)} ({fp8_block} × {fp8_block} blocks of {list(shape)})",
                          hint="the checkpoint's quantization_config.weight_block_size must be the fp8_block passed")
    return dequantize_fp8_blocks(w, scale, fp8_block)


def _experts(layer: _Layer, base: str, names: tuple[str, str, str], fp8_block: int):
    """w13 [E, 2I, H], w2 [E, H, I] from per-expert gate/up/down projections."""
    m = layer.model
    E, H, I = m.experts, m.hidden, m.inter
    g, u, d = names
    for e in range(E):  # every shape is checked before the outputs are sized from the model
        for n, shape in ((g, (I, H)), (u, (I, H)), (d, (H, I))):
            layer.take(f"{base}{e}.{n}.weight", shape)
    w13 = torch.empty(E, 2 * I, H, dtype=BF16)
    w2 = torch.empty(E, H, I, dtype=BF16)
    for e in range(E):
        w13[e, :I] = _weight(layer, f"{base}{e}.{g}.weight", (I, H), fp8_block)
        w13[e, I:] = _weight(layer, f"{base}{e}.{u}.weight", (I, H), fp8_block)
        w2[e] = _weight(layer, f"{base}{e}.{d}.weight", (H, I), fp8_block)
    return w13, w2


def _gpt_oss(layer: _Layer) -> dict:
    m = layer.model
    E, H, I = m.experts, m.hidden, m.inter
    out = {"router_w": _float(layer.take("router.weight", (E, H)), "router weight").to(BF16),
           "router_b": _float(layer.take("router.bias", (E,)), "router bias").to(BF16)}
    x = "experts."
    if x + "gate_up_proj_blocks" in layer.sd or x + "gate_up_proj" not in layer.sd:  # as published: MXFP4
        if H % MXFP4_BLOCK or I % MXFP4_BLOCK:
            raise LaunchError("R-SHAPE", f"{m.name}: hidden {H} and inter {I} must be multiples of 32 for MXFP4",
                              hint="an MXFP4 checkpoint quantizes blocks of 32 values along the input dim")
        gu = dequantize_mxfp4(layer.take(x + "gate_up_proj_blocks", (E, 2 * I, H // 32, 16)),
                              layer.take(x + "gate_up_proj_scales", (E, 2 * I, H // 32)))      # [E, 2I, H]
        w2 = dequantize_mxfp4(layer.take(x + "down_proj_blocks", (E, H, I // 32, 16)),
                              layer.take(x + "down_proj_scales", (E, H, I // 32)))             # [E, H, I]
    else:
        gu = _float(layer.take(x + "gate_up_proj", (E, H, 2 * I)), "gate_up_proj").transpose(1, 2)  # [E, 2I, H]
        w2 = _float(layer.take(x + "down_proj", (E, I, H)), "down_proj").transpose(1, 2)            # [E, H, I]
    b13 = _float(layer.take(x + "gate_up_proj_bias", (E, 2 * I)), "gate_up_proj_bias")
    out["w13"] = torch.cat((gu[:, 0::2], gu[:, 1::2]), dim=1).to(BF16).contiguous()  # de-interleave: gate, then up
    out["w2"] = w2.to(BF16).contiguous()
    out["b13"] = torch.cat((b13[:, 0::2], b13[:, 1::2]), dim=1).to(BF16).contiguous()
    out["b2"] = _float(layer.take(x + "down_proj_bias", (E, H)), "down_proj_bias").to(BF16)
    return out


def convert_layer(model, state_dict: Mapping, layer_prefix: str, *, fp8_block: int = FP8_BLOCK) -> dict:
    """Our tensors (name -> CPU tensor, MoeModel.tensors() shapes and dtypes) of one MoE layer
    from a checkpoint's state dict (any mapping of HF name -> tensor: e.g. the merged
    safetensors shards). `layer_prefix`: the layer's, e.g. "model.layers.3." (the dot is added)."""
    m = resolve_model(model)
    fp8_block = integer("fp8_block", fp8_block, 1, 2**16, hint="the checkpoint's quantization_config."
                        "weight_block_size (128 for DeepSeek-V3)")
    if not isinstance(state_dict, Mapping):
        raise LaunchError("R-CONFIG", f"state_dict is a {type(state_dict).__name__}, not a mapping of name -> tensor",
                          hint="pass e.g. safetensors.torch.load_file(shard) (merged over the layer's shards)")
    if not isinstance(layer_prefix, str) or not layer_prefix:
        raise LaunchError("R-PARAM", f"layer_prefix = {layer_prefix!r} is not a layer's name prefix",
                          hint="pass e.g. 'model.layers.3.'")
    prefix = layer_prefix if layer_prefix.endswith(".") else layer_prefix + "."
    family = FAMILY.get(m.name, "")
    E, H, I = m.experts, m.hidden, m.inter
    if family == "mixtral":
        layer = _Layer(m, state_dict, prefix + "block_sparse_moe.")
        out = {"router_w": _float(layer.take("gate.weight", (E, H)), "gate.weight").to(BF16)}
        out["w13"], out["w2"] = _experts(layer, "experts.", ("w1", "w3", "w2"), fp8_block)
    elif family == "gpt_oss":
        layer = _Layer(m, state_dict, prefix + "mlp.")
        out = _gpt_oss(layer)
    elif family in ("qwen3_moe", "olmoe", "deepseek_v3"):
        layer = _Layer(m, state_dict, prefix + "mlp.")
        out = {"router_w": _float(layer.take("gate.weight", (E, H)), "gate.weight").to(BF16)}
        out["w13"], out["w2"] = _experts(layer, "experts.", ("gate_proj", "up_proj", "down_proj"), fp8_block)
        if family == "deepseek_v3":
            out["score_bias"] = _float(layer.take("gate.e_score_correction_bias", (E,)), "score bias").to(torch.float32)
            Is = m.shared_inter
            out["shared_w13"] = torch.cat((_weight(layer, "shared_experts.gate_proj.weight", (Is, H), fp8_block),
                                           _weight(layer, "shared_experts.up_proj.weight", (Is, H), fp8_block)))
            out["shared_w2"] = _weight(layer, "shared_experts.down_proj.weight", (H, Is), fp8_block)
    else:
        raise LaunchError("R-CONFIG", f"no checkpoint layout is known for {m.name}",
                          hint="convert_layer knows: " + ", ".join(sorted(FAMILY)))
    layer.done()
    for n in m.tensors():  # NaN in the checkpoint (or an FP8 NaN code), or past bf16's range
        expect_finite(f"the converted {n} of layer {prefix!r}", out[n])
    return {n: out[n] for n in m.tensors()}
