"""The MoE models the linked moe_step kernels serve, and the mapping from a model's own
Hugging Face `config.json` to one of them.

    from moe_models import MODELS, model_from_hf_config
    m = MODELS["mixtral_8x7b"]            # or model_from_hf_config("/ckpt/Mixtral-8x7B/config.json")
    m.tensors()                            # {"router_w": ((8, 4096), "bf16"), "w13": ..., "w2": ...}

Every model's layer takes router_w [E, H], w13 [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up) and
w2 [E, H, I], all bf16, plus its extras: gpt-oss router_b [E], b13 [E, 2I] (gate biases, then
up biases), b2 [E, H] (bf16); DeepSeek-V3 score_bias [E] (f32), shared_w13 [2Is, H] and
shared_w2 [H, Is] (bf16). A config that no model serves, or a file that is no config, is a
LaunchError R-CONFIG naming the field, its value and what the nearest served model has.
Values checked against the published configs: kernels/moe/README.md ("Models").
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError
from pipelink.runtime.entry import I32_MAX, hf_field, integer, read_hf_config

# Routing kinds (what the router computes from the logits x·router_wᵀ):
SOFTMAX_RENORM = "softmax_renorm"  # softmax over all experts, top-k, weights renormalised to sum 1
SOFTMAX = "softmax"                # softmax over all experts, top-k, weights as they are
TOPK_SOFTMAX = "topk_softmax"      # top-k logits, softmax over those k
SIGMOID_GROUPED = "sigmoid_grouped"  # DeepSeek-V3: sigmoid + score_bias, group-limited top-k, × scaling
ROUTINGS = (SOFTMAX_RENORM, SOFTMAX, TOPK_SOFTMAX, SIGMOID_GROUPED)
# Activation kinds between the projections:
SILU = "silu"                      # h = silu(gate) * up
CLAMPED_SWIGLU = "clamped_swiglu"  # gpt-oss: gate ≤ limit, |up| ≤ limit, h = gate·σ(alpha·gate)·(up + 1)


@dataclass(frozen=True)
class MoeModel:
    name: str
    hidden: int
    inter: int
    experts: int
    top_k: int
    routing: str
    groups: int = 1          # expert groups (DeepSeek-V3 n_group); 1: no group limit
    topk_groups: int = 1     # groups a token may use (topk_group)
    scaling: float = 1.0     # routed_scaling_factor applied to the final weights
    shared_inter: int = 0    # shared expert's intermediate size (0: none)
    biases: bool = False     # router and expert biases (gpt-oss)
    activation: str = SILU
    limit: float = 0.0       # clamped SwiGLU's clamp
    alpha: float = 0.0       # clamped SwiGLU's sigmoid gain
    target: str = ""         # the Bazel target / file stem of its kernel ("" -> the name)

    def __post_init__(self):
        """R-CONFIG for a field no layer has: shapes, routing and activation are checked here, so a
        hand-made model (dataclasses.replace) is refused before any tensor is sized from it."""
        if not isinstance(self.name, str) or not self.name:
            _bad(self, "name", "a non-empty string")
        if not isinstance(self.target, str) or (self.target and (Path(self.target).name != self.target
                                                                 or self.target in (".", ".."))):
            _bad(self, "target", "'' or a file stem (the kernel's <target>.cubin)")
        for f in ("hidden", "inter", "experts", "top_k", "groups", "topk_groups"):
            _int_field(self, f, 1)
        _int_field(self, "shared_inter", 0)
        if self.top_k > self.experts:
            _bad(self, "top_k", f"at most experts = {self.experts}")
        if self.routing not in ROUTINGS:
            _bad(self, "routing", f"one of {', '.join(ROUTINGS)}")
        if self.activation not in (SILU, CLAMPED_SWIGLU):
            _bad(self, "activation", f"{SILU!r} or {CLAMPED_SWIGLU!r}")
        if not isinstance(self.biases, bool):
            _bad(self, "biases", "True or False")
        for f, least in (("scaling", 0.0), ("limit", 0.0), ("alpha", 0.0)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < least \
                    or (f == "scaling" and v == 0):
                _bad(self, f, "a finite number " + ("> 0" if f == "scaling" else ">= 0"))
        if self.routing == SIGMOID_GROUPED:  # groups of >= 2 experts (a group scores its best two)
            if self.experts % self.groups or self.experts // self.groups < 2:
                _bad(self, "groups", f"a divisor of experts = {self.experts} leaving >= 2 experts a group")
            if self.topk_groups > self.groups or self.top_k > self.topk_groups * (self.experts // self.groups):
                _bad(self, "topk_groups", f"at most groups = {self.groups}, with top_k = {self.top_k} experts in "
                                          "the kept groups")
        elif self.groups != 1 or self.topk_groups != 1:
            _bad(self, "groups", f"1 (only {SIGMOID_GROUPED!r} routing groups experts)")

    @property
    def kernel(self) -> str:
        return self.target or self.name

    def tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """name -> (shape, dtype) of every weight the layer takes, in launch order."""
        E, H, I, Is = self.experts, self.hidden, self.inter, self.shared_inter
        t = {"router_w": ((E, H), "bf16"), "w13": ((E, 2 * I, H), "bf16"), "w2": ((E, H, I), "bf16")}
        if self.biases:
            t |= {"router_b": ((E,), "bf16"), "b13": ((E, 2 * I), "bf16"), "b2": ((E, H), "bf16")}
        if self.routing == SIGMOID_GROUPED:
            t["score_bias"] = ((E,), "f32")  # e_score_correction_bias stays f32 in the checkpoint too
        if Is:
            t |= {"shared_w13": ((2 * Is, H), "bf16"), "shared_w2": ((H, Is), "bf16")}
        return t

    def extras(self) -> tuple[str, ...]:
        return tuple(n for n in self.tensors() if n not in ("router_w", "w13", "w2"))

    def kernel_tensors(self) -> tuple[str, ...]:
        """The tensors the linked kernel takes as parameters: all but the shared expert's, which
        the Python entry applies after the kernel (no kernel component computes it yet)."""
        return tuple(n for n in self.tensors() if n not in SHARED_TENSORS)

    def facts(self) -> dict[str, int]:
        """The linked facts a kernel for this model carries in its manifest (a bool as 0/1).
        renormalize: softmax over the top-k logits equals the renormalized top-k probabilities."""
        facts = {"hidden": self.hidden, "inter": self.inter, "experts": self.experts, "top_k": self.top_k,
                 "renormalize": int(self.routing != SOFTMAX), "biases": int(self.biases)}
        if self.routing == SIGMOID_GROUPED:  # read by the grouped router (moe_router_grouped) only
            facts |= {"groups": self.groups, "topk_groups": self.topk_groups}
        return facts

    @property
    def router(self) -> str:
        """The router package of its composition (kernels/moe_models.bzl `router`)."""
        return "moe_router_grouped" if self.routing == SIGMOID_GROUPED else "moe_router"

    def launch_values(self) -> dict[str, float]:
        """Scalars the router takes beside the tensors (the grouped router's route_scale)."""
        return {"route_scale": self.scaling} if self.routing == SIGMOID_GROUPED else {}

    def describe(self) -> str:
        s = f"{self.name}: hidden {self.hidden}, inter {self.inter}, {self.experts} experts, top-{self.top_k}"
        return s + (f", shared inter {self.shared_inter}" if self.shared_inter else "")


def _bad(m: MoeModel, field: str, want: str):
    raise LaunchError("R-CONFIG", f"MoeModel {m.name!r:.40}: {field} = {getattr(m, field)!r:.40} must be {want}",
                      hint="start from a served model, dataclasses.replace(moe_models.MODELS[...], ...), and "
                           "change only what differs")


def _int_field(m: MoeModel, field: str, least: int) -> None:
    integer(field, getattr(m, field), least, I32_MAX, code="R-CONFIG",
            hint=f"MoeModel {m.name!r:.40}: {field} is an int in [{least}, {I32_MAX}]")


def _models(*ms: MoeModel) -> dict[str, MoeModel]:
    return {m.name: m for m in ms}


MODELS: dict[str, MoeModel] = _models(
    MoeModel("qwen3_30b_a3b", 2048, 768, 128, 8, SOFTMAX_RENORM, target="moe_step"),
    MoeModel("qwen3_235b_a22b", 4096, 1536, 128, 8, SOFTMAX_RENORM),
    MoeModel("olmoe_1b_7b", 2048, 1024, 64, 8, SOFTMAX),
    MoeModel("mixtral_8x7b", 4096, 14336, 8, 2, TOPK_SOFTMAX),
    MoeModel("deepseek_v3", 7168, 2048, 256, 8, SIGMOID_GROUPED, groups=8, topk_groups=4, scaling=2.5,
             shared_inter=2048),
    MoeModel("gpt_oss_120b", 2880, 2880, 128, 4, TOPK_SOFTMAX, biases=True, activation=CLAMPED_SWIGLU,
             limit=7.0, alpha=1.702),
)
SERVED = "; ".join(m.describe() for m in MODELS.values())
# Models no kernel target serves yet: the owners' contracts do not accept their facts, so the
# linker refuses them (kernels/moe_models.bzl `served`; tests/kernels/test_moe_model_targets.py
# asserts the two tables agree). Their reference and weight converter work already.
NOT_LINKED: dict[str, str] = {}
# The shared expert's weights (DeepSeek-V3): not kernel parameters; moe_step applies the shared
# expert with torch on the launch's stream after the kernel (kernels/moe/README.md, "Models").
SHARED_TENSORS = ("shared_w13", "shared_w2")
LINKED = tuple(m for m in MODELS if m not in NOT_LINKED)
# Links of the same packages that serve no published model: another package in one slot, for
# its tests (kernels/BUILD.bazel). Not in MODELS: model_from_hf_config never picks them.
VARIANTS: dict[str, MoeModel] = _models(
    # Qwen3-30B-A3B's shape with DeepSeek-V3's routing function (8 groups, the best 4, × 2.5)
    MoeModel("qwen3_30b_a3b_grouped", 2048, 768, 128, 8, SIGMOID_GROUPED, groups=8, topk_groups=4, scaling=2.5,
             target="moe_step_router_grouped"),
)


def resolve_model(model) -> MoeModel:
    """A MoeModel, or the name of one of MODELS; else R-PARAM listing them."""
    if isinstance(model, MoeModel):
        return model
    if isinstance(model, str) and model in MODELS:
        return MODELS[model]
    if isinstance(model, str) and model in VARIANTS:
        return VARIANTS[model]
    raise LaunchError("R-PARAM", f"model = {model!r} is not a served MoE model",
                      hint=f"pass one of {', '.join(MODELS)} (or a MoeModel; from a config.json: "
                           f"moe_models.model_from_hf_config; test links: {', '.join(VARIANTS)})")


def linked_model(model) -> MoeModel:
    """resolve_model's model if a kernel target serves it; else R-CONFIG saying what limits it."""
    m = resolve_model(model)
    if m.name in NOT_LINKED:
        raise LaunchError("R-CONFIG", f"no kernel serves {m.name} yet: {NOT_LINKED[m.name]}",
                          hint=f"linked models: {', '.join(LINKED)} (moe_reference and moe_convert serve all six)")
    return m


# --- config.json -> MoeModel --------------------------------------------------------------
# Per model_type, the fields that decide the layer: (field, type, default if the config may
# omit it (None: required), the value a served model needs). Defaults are transformers'.
_NO_DEFAULT = object()
Field = tuple[str, type, Any, Callable[[MoeModel], Any]]
_COMMON: list[Field] = [("hidden_size", int, _NO_DEFAULT, lambda m: m.hidden),
                        ("num_experts_per_tok", int, _NO_DEFAULT, lambda m: m.top_k)]
_SILU: list[Field] = [("hidden_act", str, "silu", lambda m: "silu")]
FIELDS: dict[str, list[Field]] = {
    "qwen3_moe": _COMMON + _SILU + [
        ("moe_intermediate_size", int, _NO_DEFAULT, lambda m: m.inter),
        ("num_experts", int, _NO_DEFAULT, lambda m: m.experts),
        ("norm_topk_prob", bool, False, lambda m: m.routing == SOFTMAX_RENORM),
        ("shared_expert_intermediate_size", int, 0, lambda m: m.shared_inter)],
    "olmoe": _COMMON + _SILU + [
        ("intermediate_size", int, _NO_DEFAULT, lambda m: m.inter),
        ("num_experts", int, _NO_DEFAULT, lambda m: m.experts),
        ("norm_topk_prob", bool, False, lambda m: m.routing == SOFTMAX_RENORM)],
    "mixtral": _COMMON + _SILU + [
        ("intermediate_size", int, _NO_DEFAULT, lambda m: m.inter),
        ("num_local_experts", int, _NO_DEFAULT, lambda m: m.experts)],
    "deepseek_v3": _COMMON + _SILU + [
        ("moe_intermediate_size", int, _NO_DEFAULT, lambda m: m.inter),
        ("n_routed_experts", int, _NO_DEFAULT, lambda m: m.experts),
        ("n_shared_experts", int, _NO_DEFAULT, lambda m: m.shared_inter // m.inter),
        ("n_group", int, _NO_DEFAULT, lambda m: m.groups),
        ("topk_group", int, _NO_DEFAULT, lambda m: m.topk_groups),
        ("routed_scaling_factor", float, _NO_DEFAULT, lambda m: m.scaling),
        ("norm_topk_prob", bool, True, lambda m: True),
        ("scoring_func", str, "sigmoid", lambda m: "sigmoid"),
        ("topk_method", str, "noaux_tc", lambda m: "noaux_tc")],
    "gpt_oss": _COMMON + [
        ("intermediate_size", int, _NO_DEFAULT, lambda m: m.inter),
        ("num_local_experts", int, _NO_DEFAULT, lambda m: m.experts),
        ("swiglu_limit", float, 7.0, lambda m: m.limit),
        ("swiglu_alpha", float, 1.702, lambda m: m.alpha)],
}
FAMILY = {"qwen3_30b_a3b": "qwen3_moe", "qwen3_235b_a22b": "qwen3_moe", "olmoe_1b_7b": "olmoe",
          "mixtral_8x7b": "mixtral", "deepseek_v3": "deepseek_v3", "gpt_oss_120b": "gpt_oss"}
_SERVED_HINT = "served models: " + "; ".join(f"{m.describe()} (model_type {FAMILY[m.name]})" for m in MODELS.values())


def _refuse(msg: str) -> LaunchError:
    return LaunchError("R-CONFIG", msg, hint=_SERVED_HINT)


def model_from_hf_config(path_or_dict) -> MoeModel:
    """The served model a Hugging Face config.json describes (by model_type and its fields)."""
    cfg, where = read_hf_config(path_or_dict)
    mt = cfg.get("model_type")
    if mt is None:
        raise _refuse(f"{where} has no model_type field (served model types: {', '.join(FIELDS)})")
    if not isinstance(mt, str) or mt not in FIELDS:  # a list or object is no model type (nor hashable)
        raise _refuse(f"{where}: model_type = {mt!r:.60} is served by no model (served model types: {', '.join(FIELDS)})")
    got = {}
    for field, kind, default, _ in FIELDS[mt]:
        if field in cfg and cfg[field] is not None:
            got[field] = hf_field(where, field, cfg[field], kind)
        elif field == "num_experts_per_tok" and "experts_per_token" in cfg:  # gpt-oss writes both names
            got[field] = hf_field(where, "experts_per_token", cfg["experts_per_token"], int)
        elif default is _NO_DEFAULT:
            raise _refuse(f"{where} (model_type {mt!r}) has no {field} field")
        else:
            got[field] = default
    candidates = [m for m in MODELS.values() if FAMILY[m.name] == mt]
    diffs = {m.name: [(f, got[f], want(m)) for f, _, _, want in FIELDS[mt] if got[f] != want(m)] for m in candidates}
    nearest = min(candidates, key=lambda m: len(diffs[m.name]))  # ties: the first in MODELS
    if not diffs[nearest.name]:
        return nearest
    what = ", ".join(f"{f} = {g!r} (it has {w!r})" for f, g, w in diffs[nearest.name])
    raise _refuse(f"{where} (model_type {mt!r}) is served by no model: the nearest served model, "
                  f"{nearest.name}, differs in {what}")
