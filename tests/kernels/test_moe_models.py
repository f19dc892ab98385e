"""kernels/moe/moe_models.py: the six served models, their tensors, and config.json -> model.

The configs below carry the MoE fields of each model's published config.json (values as
published; fields that do not decide the MoE layer are partly left out). Every config no model
serves, and every file that is no config, is R-CONFIG naming the field, its value and what the
nearest served model has, with the served models as the hint."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT
from helpers.entry_fakes import refused

sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_models as mm  # noqa: E402

PUBLISHED = {
    "qwen3_30b_a3b": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu",
                      "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
                      "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
                      "mlp_only_layers": [], "num_hidden_layers": 48, "torch_dtype": "bfloat16"},
    "qwen3_235b_a22b": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu",
                        "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
                        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "num_hidden_layers": 94},
    "olmoe_1b_7b": {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_act": "silu",
                    "hidden_size": 2048, "intermediate_size": 1024, "num_experts": 64, "num_experts_per_tok": 8,
                    "norm_topk_prob": False, "num_hidden_layers": 16},
    "mixtral_8x7b": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
                     "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "router_jitter_noise": 0.0, "num_hidden_layers": 32},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_act": "silu",
                    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8,
                    "topk_group": 4, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                    "norm_topk_prob": True, "first_k_dense_replace": 3, "moe_layer_freq": 1,
                    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                            "weight_block_size": [128, 128]}},
    "gpt_oss_120b": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_act": "silu",
                     "hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 128,
                     "num_experts_per_tok": 4, "experts_per_token": 4, "swiglu_limit": 7.0, "num_hidden_layers": 36,
                     "quantization_config": {"quant_method": "mxfp4"}},
}


def test_the_six_models():
    assert list(mm.MODELS) == list(PUBLISHED)
    shapes = {n: (m.hidden, m.inter, m.experts, m.top_k, m.kernel) for n, m in mm.MODELS.items()}
    assert shapes == {"qwen3_30b_a3b": (2048, 768, 128, 8, "moe_step"),
                      "qwen3_235b_a22b": (4096, 1536, 128, 8, "qwen3_235b_a22b"),
                      "olmoe_1b_7b": (2048, 1024, 64, 8, "olmoe_1b_7b"),
                      "mixtral_8x7b": (4096, 14336, 8, 2, "mixtral_8x7b"),
                      "deepseek_v3": (7168, 2048, 256, 8, "deepseek_v3"),
                      "gpt_oss_120b": (2880, 2880, 128, 4, "gpt_oss_120b")}
    ds, go = mm.MODELS["deepseek_v3"], mm.MODELS["gpt_oss_120b"]
    assert (ds.groups, ds.topk_groups, ds.scaling, ds.shared_inter) == (8, 4, 2.5, 2048)
    assert (go.activation, go.limit, go.alpha, go.biases) == ("clamped_swiglu", 7.0, 1.702, True)
    assert mm.MODELS["olmoe_1b_7b"].routing == "softmax" and mm.MODELS["mixtral_8x7b"].routing == "topk_softmax"


def test_tensors_of_each_model():
    q = mm.MODELS["qwen3_30b_a3b"].tensors()
    assert q == {"router_w": ((128, 2048), "bf16"), "w13": ((128, 1536, 2048), "bf16"), "w2": ((128, 2048, 768), "bf16")}
    assert mm.MODELS["gpt_oss_120b"].tensors() == {
        "router_w": ((128, 2880), "bf16"), "w13": ((128, 5760, 2880), "bf16"), "w2": ((128, 2880, 2880), "bf16"),
        "router_b": ((128,), "bf16"), "b13": ((128, 5760), "bf16"), "b2": ((128, 2880), "bf16")}
    ds = mm.MODELS["deepseek_v3"]
    assert ds.tensors() == {
        "router_w": ((256, 7168), "bf16"), "w13": ((256, 4096, 7168), "bf16"), "w2": ((256, 7168, 2048), "bf16"),
        "score_bias": ((256,), "f32"), "shared_w13": ((4096, 7168), "bf16"), "shared_w2": ((7168, 2048), "bf16")}
    assert ds.extras() == ("score_bias", "shared_w13", "shared_w2") and mm.MODELS["mixtral_8x7b"].extras() == ()
    assert ds.facts() == {"hidden": 7168, "inter": 2048, "experts": 256, "top_k": 8, "renormalize": 1, "biases": 0,
                          "groups": 8, "topk_groups": 4}
    assert ds.router == "moe_router_grouped" and ds.launch_values() == {"route_scale": 2.5}
    assert mm.MODELS["mixtral_8x7b"].router == "moe_router" and mm.MODELS["mixtral_8x7b"].launch_values() == {}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_configs_map_to_their_model(name, tmp_path):
    p = tmp_path / name / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(PUBLISHED[name], indent=2))
    assert mm.model_from_hf_config(p) is mm.MODELS[name]
    assert mm.model_from_hf_config(str(p.parent)) is mm.MODELS[name]  # a checkpoint directory
    assert mm.model_from_hf_config(PUBLISHED[name]) is mm.MODELS[name]


def test_transformers_defaults_fill_omitted_fields():
    cfg = {k: v for k, v in PUBLISHED["gpt_oss_120b"].items() if k not in ("swiglu_limit", "num_experts_per_tok")}
    assert mm.model_from_hf_config(cfg).name == "gpt_oss_120b"  # limit 7.0 by default; experts_per_token read
    no_norm = {k: v for k, v in PUBLISHED["qwen3_30b_a3b"].items() if k != "norm_topk_prob"}
    e = refused(mm.model_from_hf_config, no_norm)  # Qwen3MoeConfig's default is False: not the served routing
    assert e.code == "R-CONFIG" and "norm_topk_prob = False (it has True)" in str(e)


def _changed(name, **kw):
    return {**PUBLISHED[name], **kw}


@pytest.mark.parametrize("cfg, text", [
    (_changed("mixtral_8x7b", num_local_experts=16), "nearest served model, mixtral_8x7b, differs in num_local_experts = 16 (it has 8)"),
    (_changed("qwen3_30b_a3b", moe_intermediate_size=1024), "qwen3_30b_a3b, differs in moe_intermediate_size = 1024 (it has 768)"),
    (_changed("qwen3_235b_a22b", num_experts_per_tok=4), "qwen3_235b_a22b, differs in num_experts_per_tok = 4 (it has 8)"),
    (_changed("olmoe_1b_7b", norm_topk_prob=True), "norm_topk_prob = True (it has False)"),
    (_changed("olmoe_1b_7b", hidden_act="gelu"), "hidden_act = 'gelu' (it has 'silu')"),
    (_changed("deepseek_v3", topk_method="greedy"), "topk_method = 'greedy' (it has 'noaux_tc')"),
    (_changed("deepseek_v3", scoring_func="softmax"), "scoring_func = 'softmax' (it has 'sigmoid')"),
    (_changed("deepseek_v3", n_routed_experts=160, n_group=1, topk_group=1, routed_scaling_factor=1.0),
     "n_routed_experts = 160 (it has 256), n_group = 1 (it has 8)"),
    (_changed("deepseek_v3", n_shared_experts=2), "n_shared_experts = 2 (it has 1)"),
    (_changed("gpt_oss_120b", num_local_experts=32, num_experts_per_tok=4), "num_local_experts = 32 (it has 128)"),
    (_changed("gpt_oss_120b", swiglu_limit=10.0), "swiglu_limit = 10.0 (it has 7.0)"),
    (_changed("qwen3_30b_a3b", shared_expert_intermediate_size=768), "shared_expert_intermediate_size = 768 (it has 0)"),
    ({"model_type": "llama", "hidden_size": 4096}, "model_type = 'llama' is served by no model"),
    ({"hidden_size": 4096}, "has no model_type field"),
    ({k: v for k, v in PUBLISHED["mixtral_8x7b"].items() if k != "intermediate_size"}, "has no intermediate_size field"),
    (_changed("mixtral_8x7b", hidden_size="4096"), "hidden_size = '4096' (str) must be an int"),
    (_changed("mixtral_8x7b", num_local_experts=8.0), "num_local_experts = 8.0 (float) must be an int"),
    (_changed("mixtral_8x7b", num_experts_per_tok=True), "num_experts_per_tok = True (bool) must be an int"),
    (_changed("olmoe_1b_7b", norm_topk_prob="false"), "norm_topk_prob = 'false' (str) must be a bool (true/false)"),
    (_changed("deepseek_v3", routed_scaling_factor=[2.5]), "routed_scaling_factor = [2.5] (list) must be a number"),
])
def test_unserved_configs_are_refused(cfg, text):
    e = refused(mm.model_from_hf_config, cfg)
    assert e.code == "R-CONFIG" and text in str(e), str(e)
    if "must be a" not in text:
        assert "served models: qwen3_30b_a3b: hidden 2048, inter 768, 128 experts, top-8" in e.hint
        assert all(n in e.hint for n in mm.MODELS)


def test_a_float_field_may_be_written_as_an_int():
    assert mm.model_from_hf_config(_changed("gpt_oss_120b", swiglu_limit=7)).name == "gpt_oss_120b"


def test_bad_files_are_refused(tmp_path):
    cases = {"missing": None, "not json": "{hidden_size: 1", "a list": "[1, 2]", "a string": '"qwen3_moe"',
             "binary": b"\xff\xfe\x00", "empty": ""}
    for what, content in cases.items():
        p = tmp_path / f"{what.replace(' ', '_')}.json"
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif content is not None:
            p.write_text(content)
        e = refused(mm.model_from_hf_config, p)
        assert e.code == "R-CONFIG" and str(p) in str(e), (what, str(e))
    (tmp_path / "ckpt").mkdir()
    assert "config.json" in str(refused(mm.model_from_hf_config, tmp_path / "ckpt"))  # a directory without one
    for bad in (None, 3, "", ["config.json"], b"config.json"):
        assert refused(mm.model_from_hf_config, bad).code == "R-CONFIG", bad


def test_resolve_model():
    assert mm.resolve_model("mixtral_8x7b") is mm.MODELS["mixtral_8x7b"]
    assert mm.resolve_model(mm.MODELS["deepseek_v3"]) is mm.MODELS["deepseek_v3"]
    for bad in ("Mixtral-8x7B", None, 3, "moe_step"):
        e = refused(mm.resolve_model, bad)
        assert e.code == "R-PARAM" and "qwen3_30b_a3b, qwen3_235b_a22b" in e.hint


_JUNK = [None, "x", "32", 3.0, 3.5, True, False, [], [1], {}, {"a": 1}, -1, 0, 2**70, 10**400, float("nan"),
         float("inf"), 1e308]


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_field_damaged_is_served_or_coded(name):
    """Every field of each published config, dropped or set to each wrong value: the served model,
    or a coded refusal (unhashable model types and ints past float's range raised before)."""
    keys = set(PUBLISHED[name]) | {f for f, *_ in mm.FIELDS[PUBLISHED[name]["model_type"]]} | {"experts_per_token"}
    for key in sorted(keys):
        for v in [...] + _JUNK:
            cfg = {k: w for k, w in PUBLISHED[name].items() if k != key} if v is ... else _changed(name, **{key: v})
            try:
                mm.model_from_hf_config(cfg)
            except mm.LaunchError as e:
                assert e.code == "R-CONFIG" and e.hint.strip(), str(e)


@pytest.mark.parametrize("cfg, text", [
    (_changed("mixtral_8x7b", model_type=["mixtral"]), "model_type = ['mixtral'] is served by no model"),
    (_changed("mixtral_8x7b", model_type={}), "model_type = {}"),
    (_changed("deepseek_v3", routed_scaling_factor=10**400), "does not fit a float"),
    (_changed("gpt_oss_120b", swiglu_alpha=10**400), "does not fit a float"),
])
def test_fields_that_raised_are_coded(cfg, text):
    e = refused(mm.model_from_hf_config, cfg)
    assert e.code == "R-CONFIG" and text in str(e), str(e)


def test_unreadable_paths_are_coded_not_raised_or_waited_on(tmp_path):
    import os
    assert "too long" in str(refused(mm.model_from_hf_config, "a" * 5000))  # was an OSError from Path.is_dir
    os.mkfifo(tmp_path / "config.json")  # reading it would block forever
    assert "FIFO" in str(refused(mm.model_from_hf_config, tmp_path))
    assert "character device" in str(refused(mm.model_from_hf_config, "/dev/zero"))


@pytest.mark.parametrize("field, value, words", [
    ("hidden", 2.0, "must be an int"),            # convert_layer raised TypeError in torch.empty
    ("hidden", True, "must be an int"),
    ("inter", None, "must be an int"),            # tensors() raised TypeError (int * None)
    ("experts", 0, "out of range"),               # zero-size weights passed expect_tensor
    ("top_k", 0, "out of range"),                 # launched: no fact of the model checked it
    ("top_k", 129, "at most experts = 128"),
    ("hidden", 2**40, "out of range"),
    ("shared_inter", -1, "out of range"),
    ("routing", "bogus", "one of softmax_renorm"),
    ("activation", "relu", "'silu' or 'clamped_swiglu'"),
    ("scaling", float("nan"), "finite number > 0"),
    ("limit", float("inf"), "finite number >= 0"),
    ("biases", 1, "True or False"),
    ("groups", 3, "only 'sigmoid_grouped' routing groups experts"),
    ("name", "", "non-empty string"),
    ("target", "../moe_step", "file stem"),
])
def test_a_hand_made_model_with_an_impossible_field_is_r_config(field, value, words):
    import dataclasses
    e = refused(dataclasses.replace, mm.MODELS["qwen3_30b_a3b"], **{field: value})
    assert e.code == "R-CONFIG" and field in str(e) + e.hint and words in str(e), str(e)


@pytest.mark.parametrize("change, words", [
    (dict(groups=3), "a divisor of experts = 256"),
    (dict(groups=256), "leaving >= 2 experts a group"),
    (dict(topk_groups=9), "at most groups = 8"),
    (dict(topk_groups=1, top_k=40), "top_k = 40 experts in the kept groups"),
])
def test_grouped_routing_needs_groups_it_can_route(change, words):
    import dataclasses
    e = refused(dataclasses.replace, mm.MODELS["deepseek_v3"], **change)
    assert e.code == "R-CONFIG" and words in str(e), str(e)


def test_every_served_model_passes_its_own_checks():
    import dataclasses
    for m in mm.MODELS.values():
        assert dataclasses.replace(m) == m
