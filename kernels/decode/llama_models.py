"""Dense Llama-family models for the decode path (issue 43): their shapes as one frozen
LlamaConfig, the published models in MODELS, and the mapping from a checkpoint's own Hugging
Face `config.json`.

    from llama_models import MODELS, config_from_hf, served_model
    cfg = config_from_hf("/ckpt/Llama-3.2-1B")      # or MODELS["llama3_2_1b"]
    served_model(cfg)                                # "llama3_2_1b", else R-CONFIG naming the field

Any well-formed config is accepted (the fp32 reference runs any size); `served_model` says
which of MODELS it is. The decode megakernel links these shapes as kernel-owned facts
(decode_models.bzl; llama_pack.kernel_target picks the target); nothing here builds or loads a
kernel. Values of MODELS checked
against the published config.json files: kernels/decode/README.md ("Models").
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError
from pipelink.runtime.entry import I32_MAX, hf_field, read_hf_config

_DAMAGED = "the config.json is damaged or not a transformers config; re-download it"
# Bounds past every published model: shapes are int32 facts of a kernel, and tensors() lists
# each layer's weights, so a damaged layer count must not make it loop for hours.
MAX_DIM = I32_MAX
MAX_LAYERS = 1024


@dataclass(frozen=True)
class Llama3RopeScaling:
    """transformers' rope_type "llama3" (Llama 3.1 / 3.2): long wavelengths divided by `factor`,
    short ones kept, the band between interpolated (llama_reference.rope_inv_freq)."""
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int

    def __post_init__(self):
        _positive_real("rope_scaling.factor", self.factor, at_least=1.0)
        _positive_real("rope_scaling.low_freq_factor", self.low_freq_factor)
        _positive_real("rope_scaling.high_freq_factor", self.high_freq_factor)
        _positive_int("rope_scaling.original_max_position_embeddings", self.original_max_positions)
        if not self.high_freq_factor > self.low_freq_factor:  # the interpolation divides by their difference
            raise LaunchError("R-CONFIG", f"rope_scaling.high_freq_factor = {self.high_freq_factor} must be greater "
                              f"than low_freq_factor = {self.low_freq_factor}", hint=_DAMAGED)


@dataclass(frozen=True)
class LlamaConfig:
    """One decoder-only model: pre-norm RMSNorm blocks of grouped-query attention with RoPE
    and a SwiGLU MLP, no biases. `qk_norm`: Qwen3's per-head RMSNorm of q and k before RoPE.
    `hidden` need not equal heads × head_dim (Qwen3-0.6B: 1024 vs 16 × 128)."""
    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Llama3RopeScaling | None
    tie_word_embeddings: bool
    max_positions: int
    qk_norm: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise LaunchError("R-CONFIG", f"name = {self.name!r} must be a non-empty string",
                              hint="name the model (e.g. the MODELS key)")
        for f in ("vocab", "hidden", "heads", "kv_heads", "head_dim", "inter", "max_positions"):
            _positive_int(f, getattr(self, f))
        _positive_int("layers", self.layers, MAX_LAYERS)
        for f in ("heads", "kv_heads"):  # the q / k / v projections' rows
            if getattr(self, f) * self.head_dim > MAX_DIM:
                raise LaunchError("R-CONFIG", f"{f} × head_dim = {getattr(self, f)} × {self.head_dim} passes "
                                  f"{MAX_DIM}", hint=_DAMAGED)
        if self.heads % self.kv_heads:
            raise LaunchError("R-CONFIG", f"heads = {self.heads} is not a multiple of kv_heads = {self.kv_heads}",
                              hint="grouped-query attention shares each kv head among heads / kv_heads query heads")
        if self.head_dim % 2:
            raise LaunchError("R-CONFIG", f"head_dim = {self.head_dim} is odd", hint="RoPE rotates pairs: head_dim is even")
        _positive_real("rms_eps", self.rms_eps)
        _positive_real("rope_theta", self.rope_theta)
        if not self.rope_theta > 1:  # inv_freq = theta^(-2i/d) must fall with i
            raise LaunchError("R-CONFIG", f"rope_theta = {self.rope_theta} must be > 1", hint=_DAMAGED)
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Llama3RopeScaling):
            raise LaunchError("R-CONFIG", f"rope_scaling = {self.rope_scaling!r} is not a Llama3RopeScaling or None",
                              hint="pass Llama3RopeScaling(factor, low_freq_factor, high_freq_factor, "
                                   "original_max_positions) or None (no scaling)")
        for f in ("tie_word_embeddings", "qk_norm"):
            if not isinstance(getattr(self, f), bool):
                raise LaunchError("R-CONFIG", f"{f} = {getattr(self, f)!r} must be True or False", hint=_DAMAGED)

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.heads // self.kv_heads

    def tensors(self) -> dict[str, tuple[int, ...]]:
        """HF tensor name -> shape of every weight (llama_weights' layout: HF's, [out, in])."""
        H, D, Q, KV, I = self.hidden, self.head_dim, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.inter
        t: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, H)}
        for i in range(self.layers):
            p = f"model.layers.{i}."
            t |= {p + "input_layernorm.weight": (H,), p + "self_attn.q_proj.weight": (Q, H),
                  p + "self_attn.k_proj.weight": (KV, H), p + "self_attn.v_proj.weight": (KV, H),
                  p + "self_attn.o_proj.weight": (H, Q)}
            if self.qk_norm:
                t |= {p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)}
            t |= {p + "post_attention_layernorm.weight": (H,), p + "mlp.gate_proj.weight": (I, H),
                  p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I)}
        t["model.norm.weight"] = (H,)
        if not self.tie_word_embeddings:
            t["lm_head.weight"] = (self.vocab, H)
        return t

    def facts(self) -> dict[str, int]:
        """The integer facts a linked decode kernel would carry (a bool as 0/1). rms_eps, rope_theta
        and the scaling are no facts: they reach a kernel as data (the inv_freq table)."""
        return {"vocab": self.vocab, "hidden": self.hidden, "layers": self.layers, "heads": self.heads,
                "kv_heads": self.kv_heads, "head_dim": self.head_dim, "inter": self.inter,
                "qk_norm": int(self.qk_norm), "tie_word_embeddings": int(self.tie_word_embeddings)}

    def describe(self) -> str:
        return (f"{self.name}: vocab {self.vocab}, hidden {self.hidden}, {self.layers} layers, "
                f"{self.heads}/{self.kv_heads} heads of {self.head_dim}, inter {self.inter}")


def _positive_int(field: str, v, most: int = MAX_DIM) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= most:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise LaunchError("R-CONFIG", f"{field} = {shown} ({type(v).__name__}) must be an int in [1, {most}]",
                          hint=_DAMAGED)


def _positive_real(field: str, v, at_least: float = 0.0) -> None:
    try:  # float(): an int past float's range is no finite number (math.isfinite would raise)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and v > 0 \
            and v >= at_least
    except OverflowError:
        ok = False
    if not ok:
        bound = f">= {at_least}" if at_least else "> 0"
        raise LaunchError("R-CONFIG", f"{field} = {v!r} must be a finite number {bound}", hint=_DAMAGED)


def _llama3(factor: float) -> Llama3RopeScaling:
    return Llama3RopeScaling(factor, 1.0, 4.0, 8192)


MODELS: dict[str, LlamaConfig] = {c.name: c for c in (
    LlamaConfig("llama3_2_1b", 128256, 2048, 16, 32, 8, 64, 8192, 1e-5, 500000.0, _llama3(32.0), True, 131072),
    LlamaConfig("llama3_8b", 128256, 4096, 32, 32, 8, 128, 14336, 1e-5, 500000.0, None, False, 8192),
    LlamaConfig("llama3_1_8b", 128256, 4096, 32, 32, 8, 128, 14336, 1e-5, 500000.0, _llama3(8.0), False, 131072),
    LlamaConfig("qwen3_1_7b", 151936, 2048, 28, 16, 8, 128, 6144, 1e-6, 1000000.0, None, True, 40960, qk_norm=True),
)}
# The small shape //kernels/decode:llama_tiny links for the tests and sanitizers (no published
# model, so not in MODELS: served_model() does not name it).
LLAMA_TINY = LlamaConfig("llama_tiny", 1024, 512, 2, 8, 2, 64, 1024, 1e-5, 500000.0, _llama3(32.0), True, 4096)
MODEL_TYPE = {"llama3_2_1b": "llama", "llama3_8b": "llama", "llama3_1_8b": "llama", "qwen3_1_7b": "qwen3"}
_SERVED_HINT = "served models: " + "; ".join(c.describe() for c in MODELS.values())


def expect_config(cfg) -> None:
    """R-PARAM unless `cfg` is a LlamaConfig (what the loader and the reference take)."""
    if not isinstance(cfg, LlamaConfig):
        raise LaunchError("R-PARAM", f"cfg = {type(cfg).__name__} is not a LlamaConfig",
                          hint="pass llama_models.MODELS[...] or llama_models.config_from_hf(...)")


def served_model(cfg: LlamaConfig) -> str:
    """The MODELS key whose config equals `cfg` in every field but the name; else R-CONFIG
    naming each field in which the nearest one differs."""
    if not isinstance(cfg, LlamaConfig):
        raise LaunchError("R-CONFIG", f"{type(cfg).__name__} is not a LlamaConfig",
                          hint="pass a LlamaConfig (llama_models.config_from_hf reads a config.json)")
    names = [f.name for f in fields(LlamaConfig) if f.name != "name"]
    diffs = {k: [(n, getattr(cfg, n), getattr(m, n)) for n in names if getattr(cfg, n) != getattr(m, n)]
             for k, m in MODELS.items()}
    nearest = min(diffs, key=lambda k: len(diffs[k]))  # ties: the first in MODELS
    if not diffs[nearest]:
        return nearest
    what = ", ".join(f"{n} = {g!r} (it has {w!r})" for n, g, w in diffs[nearest])
    raise LaunchError("R-CONFIG", f"{cfg.name} is no served model: the nearest, {nearest}, differs in {what}",
                      hint=_SERVED_HINT + " (the fp32 reference runs any config; a kernel will serve only these)")


# --- config.json -> LlamaConfig --------------------------------------------------------------
_REQUIRED = object()
# (config.json field, LlamaConfig field, type, default); defaults are transformers' LlamaConfig's
# and Qwen3Config's where a published config may leave the field out.
_COMMON = [("vocab_size", "vocab", int, _REQUIRED), ("hidden_size", "hidden", int, _REQUIRED),
           ("num_hidden_layers", "layers", int, _REQUIRED), ("num_attention_heads", "heads", int, _REQUIRED),
           ("intermediate_size", "inter", int, _REQUIRED), ("rms_norm_eps", "rms_eps", float, 1e-6),
           ("tie_word_embeddings", "tie_word_embeddings", bool, False)]
_FIELDS = {"llama": _COMMON + [("max_position_embeddings", "max_positions", int, 2048)],
           "qwen3": _COMMON + [("max_position_embeddings", "max_positions", int, 32768),
                               ("head_dim", "head_dim", int, 128)]}
# An absent num_key_value_heads: LlamaConfig takes num_attention_heads, Qwen3Config its default 32.
_KV_DEFAULT = {"llama": None, "qwen3": 32}
# Fields whose other values change the computation in ways the reference does not model (read
# with their transformers type first, so 0 is no attention_bias = false and true no pretraining_tp = 1).
_MUST = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "use_sliding_window": False,
         "pretraining_tp": 1, "partial_rotary_factor": 1.0}


def _rope(where: str, cfg: dict) -> tuple[float, Llama3RopeScaling | None]:
    """(rope_theta, scaling) from rope_theta + rope_scaling, or from transformers 5's rope_parameters."""
    params = cfg.get("rope_parameters")
    if params is not None and not isinstance(params, dict):  # else it would be skipped for rope_scaling
        raise LaunchError("R-CONFIG", f"{where}: rope_parameters = {params!r:.60} is not an object or null",
                          hint=_DAMAGED)
    scaling = params if params is not None else cfg.get("rope_scaling")
    theta = cfg.get("rope_theta", scaling.get("rope_theta") if isinstance(scaling, dict) else None)
    theta = 10000.0 if theta is None else hf_field(where, "rope_theta", theta, float)
    if scaling is None:
        return theta, None
    if not isinstance(scaling, dict):
        raise LaunchError("R-CONFIG", f"{where}: rope_scaling = {scaling!r} is not an object or null", hint=_DAMAGED)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise LaunchError("R-CONFIG", f"{where}: rope_scaling type {kind!r} is not modelled (only 'llama3' and none)",
                          hint="the reference implements Llama 3's RoPE scaling only; drop rope_scaling to run "
                               "without it (Qwen3's optional YaRN is not implemented)")
    got = {}
    for key, kind_ in (("factor", float), ("low_freq_factor", float), ("high_freq_factor", float),
                       ("original_max_position_embeddings", int)):
        if key not in scaling:
            raise LaunchError("R-CONFIG", f"{where}: rope_scaling (llama3) has no {key}", hint=_DAMAGED)
        got[key] = hf_field(where, f"rope_scaling.{key}", scaling[key], kind_)
    return theta, Llama3RopeScaling(got["factor"], got["low_freq_factor"], got["high_freq_factor"],
                                    got["original_max_position_embeddings"])


def config_from_hf(path_or_dict, name: str | None = None) -> LlamaConfig:
    """The LlamaConfig a config.json (model_type llama or qwen3) describes. Named after the
    served model it equals, else `name`, else "<model_type>_custom"."""
    if name is not None and (not isinstance(name, str) or not name):
        raise LaunchError("R-PARAM", f"name = {name!r:.60} is not a non-empty string",
                          hint="name= names a config that no served model equals (None: '<model_type>_custom')")
    cfg, where = read_hf_config(path_or_dict)
    mt = cfg.get("model_type")
    if not isinstance(mt, str) or mt not in _FIELDS:  # a list or object is no model type (nor hashable)
        raise LaunchError("R-CONFIG", f"{where}: model_type = {mt!r:.60} is not a dense Llama-family model",
                          hint=f"model types read: {', '.join(_FIELDS)}; " + _SERVED_HINT)
    got: dict[str, Any] = {}
    for key, ours, kind, default in _FIELDS[mt]:
        if cfg.get(key) is not None:
            got[ours] = hf_field(where, key, cfg[key], kind)
        elif default is _REQUIRED:
            raise LaunchError("R-CONFIG", f"{where} (model_type {mt!r}) has no {key} field", hint=_DAMAGED)
        else:
            got[ours] = default
    kv = cfg.get("num_key_value_heads")
    if kv is None:
        kv = _KV_DEFAULT[mt] or got["heads"]
    got["kv_heads"] = hf_field(where, "num_key_value_heads", kv, int)
    if "head_dim" not in got:  # llama: head_dim if given, else hidden / heads (transformers' rule)
        hd = cfg.get("head_dim")
        if hd is None and isinstance(got["heads"], int) and got["heads"] > 0:
            if got["hidden"] % got["heads"]:
                raise LaunchError("R-CONFIG", f"{where}: no head_dim, and hidden_size {got['hidden']} is not a "
                                  f"multiple of num_attention_heads {got['heads']}", hint=_DAMAGED)
            hd = got["hidden"] // got["heads"]
        got["head_dim"] = hf_field(where, "head_dim", hd, int)
    for key, want in _MUST.items():
        if cfg.get(key) is not None and hf_field(where, key, cfg[key], type(want)) != want:
            raise LaunchError("R-CONFIG", f"{where}: {key} = {cfg[key]!r} is not modelled (only {want!r})",
                              hint="the reference implements SiLU-gated MLPs without biases or sliding windows")
    got["rope_theta"], got["rope_scaling"] = _rope(where, cfg)
    got["qk_norm"] = mt == "qwen3"
    out = LlamaConfig(name="_", **got)
    try:
        found = served_model(out)
    except LaunchError:
        found = name or f"{mt}_custom"
    return LlamaConfig(**{**out.__dict__, "name": found})
