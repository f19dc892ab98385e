"""kernels/decode/llama_models.py: the published dense models, config.json -> LlamaConfig, served_model.

PUBLISHED carries the deciding fields of each model's published config.json (values as published;
sources in kernels/decode/README.md "Models"). Every bad file or field is R-CONFIG with a hint."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT
from helpers.entry_fakes import refused

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_models as lm  # noqa: E402

_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "hidden_act": "silu",
          "mlp_bias": False, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "vocab_size": 128256,
          "num_key_value_heads": 8, "num_attention_heads": 32, "torch_dtype": "bfloat16"}
_L3 = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
       "rope_type": "llama3"}
PUBLISHED = {
    "llama3_2_1b": {**_LLAMA, "head_dim": 64, "hidden_size": 2048, "intermediate_size": 8192,
                    "max_position_embeddings": 131072, "num_hidden_layers": 16, "rope_scaling": _L3,
                    "tie_word_embeddings": True},
    "llama3_8b": {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
                  "num_hidden_layers": 32, "rope_scaling": None},  # no head_dim field: 4096 / 32
    "llama3_1_8b": {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
                    "num_hidden_layers": 32, "rope_scaling": {**_L3, "factor": 8.0}, "tie_word_embeddings": False},
    "qwen3_1_7b": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
                   "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
                   "max_position_embeddings": 40960, "max_window_layers": 28, "num_attention_heads": 16,
                   "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
                   "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
                   "use_sliding_window": False, "vocab_size": 151936},
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_config_maps_to_its_model(name, tmp_path):
    cfg = lm.config_from_hf(PUBLISHED[name])
    assert cfg == lm.MODELS[name] and lm.served_model(cfg) == name
    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED[name]))
    assert lm.config_from_hf(tmp_path) == cfg == lm.config_from_hf(tmp_path / "config.json")


def test_models_table_values():
    c = lm.MODELS["llama3_2_1b"]
    assert (c.vocab, c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.inter) == (128256, 2048, 16, 32, 8, 64, 8192)
    assert c.rope_scaling == lm.Llama3RopeScaling(32.0, 1.0, 4.0, 8192) and c.tie_word_embeddings and not c.qk_norm
    q = lm.MODELS["qwen3_1_7b"]
    assert (q.vocab, q.hidden, q.layers, q.heads, q.kv_heads, q.head_dim, q.inter) == (151936, 2048, 28, 16, 8, 128, 6144)
    assert q.qk_norm and q.rms_eps == 1e-6 and q.rope_theta == 1e6 and q.rope_scaling is None
    assert lm.MODELS["llama3_8b"].rope_scaling is None and lm.MODELS["llama3_1_8b"].rope_scaling.factor == 8.0
    assert {n: lm.served_model(c) for n, c in lm.MODELS.items()} == {n: n for n in lm.MODELS}


def test_tensor_list_follows_config():
    c = lm.MODELS["llama3_2_1b"]
    t = c.tensors()
    assert "lm_head.weight" not in t and t["model.layers.15.self_attn.k_proj.weight"] == (512, 2048)
    assert len(t) == 2 + 16 * 9
    q = lm.MODELS["qwen3_1_7b"].tensors()
    assert q["model.layers.0.self_attn.q_norm.weight"] == (128,) and q["model.layers.0.self_attn.o_proj.weight"] == (2048, 2048)
    assert lm.MODELS["llama3_8b"].tensors()["lm_head.weight"] == (128256, 4096)
    assert lm.MODELS["qwen3_1_7b"].facts()["qk_norm"] == 1


def test_any_wellformed_config_is_accepted_but_not_served():
    tiny = {**PUBLISHED["llama3_2_1b"], "hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 64}
    cfg = lm.config_from_hf(tiny, name="tiny")
    assert cfg.name == "tiny" and cfg.hidden == 32
    e = refused(lm.served_model, cfg)
    assert e.code == "R-CONFIG" and "llama3_2_1b" in str(e) and "hidden = 32 (it has 2048)" in str(e)
    assert "layers = 2 (it has 16)" in str(e) and "vocab = 64" in str(e)
    # Qwen3-0.6B's shape: hidden 1024 while heads x head_dim = 2048 (allowed)
    q06 = {**PUBLISHED["qwen3_1_7b"], "hidden_size": 1024, "intermediate_size": 3072}
    c = lm.config_from_hf(q06)
    assert c.name == "qwen3_custom" and c.heads * c.head_dim == 2048
    assert "hidden = 1024" in str(refused(lm.served_model, c))


def test_absent_fields_take_transformers_defaults():
    c = lm.config_from_hf(_with("qwen3_1_7b", num_attention_heads=32, head_dim=..., num_key_value_heads=...,
                                max_position_embeddings=...,
                                rms_norm_eps=..., tie_word_embeddings=..., rope_theta=...))
    assert (c.head_dim, c.kv_heads, c.max_positions, c.rms_eps, c.tie_word_embeddings, c.rope_theta) == \
        (128, 32, 32768, 1e-6, False, 10000.0)
    assert "kv_heads = 32" in str(refused(lm.config_from_hf, _with("qwen3_1_7b", num_key_value_heads=...)))
    c = lm.config_from_hf(_with("llama3_8b", num_key_value_heads=..., max_position_embeddings=..., rms_norm_eps=...))
    assert (c.head_dim, c.kv_heads, c.max_positions, c.rms_eps) == (128, 32, 2048, 1e-6)


def test_rope_parameters_of_transformers_5():
    d = {k: v for k, v in PUBLISHED["llama3_2_1b"].items() if k not in ("rope_theta", "rope_scaling")}
    d["rope_parameters"] = {**_L3, "rope_theta": 500000.0}
    assert lm.config_from_hf(d) == lm.MODELS["llama3_2_1b"]
    d2 = {**PUBLISHED["llama3_8b"], "rope_scaling": {"rope_type": "default"}}
    assert lm.config_from_hf(d2) == lm.MODELS["llama3_8b"]


def _with(name, **kw):
    d = dict(PUBLISHED[name])
    for k, v in kw.items():
        if v is ...:
            d.pop(k, None)
        else:
            d[k] = v
    return d


@pytest.mark.parametrize("bad, words", [
    (_with("llama3_2_1b", model_type="mixtral"), "model_type = 'mixtral'"),
    (_with("llama3_2_1b", model_type=...), "model_type = None"),
    (_with("llama3_2_1b", hidden_size=...), "no hidden_size"),
    (_with("llama3_2_1b", hidden_size="2048"), "hidden_size = '2048'"),
    (_with("llama3_2_1b", num_hidden_layers=True), "num_hidden_layers = True"),
    (_with("llama3_2_1b", num_hidden_layers=0), "layers = 0"),
    (_with("llama3_2_1b", num_key_value_heads=5), "not a multiple of kv_heads = 5"),
    (_with("llama3_2_1b", head_dim=63), "head_dim = 63 is odd"),
    (_with("llama3_8b", num_attention_heads=30), "not a multiple of num_attention_heads 30"),
    (_with("llama3_2_1b", rms_norm_eps=0.0), "rms_eps = 0.0"),
    (_with("llama3_2_1b", rms_norm_eps=float("nan")), "rms_eps = nan"),
    (_with("llama3_2_1b", rope_theta=1.0), "rope_theta = 1.0 must be > 1"),
    (_with("llama3_2_1b", rope_theta=[1]), "rope_theta = [1]"),
    (_with("llama3_2_1b", rope_scaling={**_L3, "rope_type": "yarn"}), "'yarn' is not modelled"),
    (_with("llama3_2_1b", rope_scaling={**_L3, "factor": 0.5}), "factor = 0.5"),
    (_with("llama3_2_1b", rope_scaling={**_L3, "high_freq_factor": 1.0}), "must be greater than low_freq_factor"),
    (_with("llama3_2_1b", rope_scaling={k: v for k, v in _L3.items() if k != "low_freq_factor"}), "no low_freq_factor"),
    (_with("llama3_2_1b", rope_scaling={**_L3, "original_max_position_embeddings": 8192.5}), "8192.5"),
    (_with("llama3_2_1b", rope_scaling=[32]), "not an object"),
    (_with("llama3_2_1b", tie_word_embeddings="yes"), "tie_word_embeddings = 'yes'"),
    (_with("llama3_2_1b", hidden_act="gelu"), "hidden_act = 'gelu'"),
    (_with("llama3_2_1b", attention_bias=True), "attention_bias = True"),
    (_with("qwen3_1_7b", use_sliding_window=True), "use_sliding_window = True"),
])
def test_bad_config_fields_are_refused(bad, words):
    e = refused(lm.config_from_hf, bad)
    assert e.code == "R-CONFIG" and words in str(e), str(e)


def test_bad_files_are_refused(tmp_path):
    assert "cannot read" in str(refused(lm.config_from_hf, tmp_path / "nope.json"))
    assert "cannot read" in str(refused(lm.config_from_hf, tmp_path))  # a directory without config.json
    (tmp_path / "a.json").write_text("{not json")
    assert "is not JSON" in str(refused(lm.config_from_hf, tmp_path / "a.json"))
    (tmp_path / "b.json").write_text("[1, 2]")
    assert "JSON list" in str(refused(lm.config_from_hf, tmp_path / "b.json"))
    (tmp_path / "c.json").write_bytes(b"\xff\xfe\x00")
    assert refused(lm.config_from_hf, tmp_path / "c.json").code == "R-CONFIG"
    for v in (None, 3, b"x", ""):
        assert refused(lm.config_from_hf, v).code == "R-CONFIG"
    assert refused(lm.served_model, PUBLISHED["llama3_8b"]).code == "R-CONFIG"


def test_config_dataclass_checks_direct_construction():
    c = lm.MODELS["llama3_2_1b"]
    for field, v in (("name", ""), ("vocab", 0), ("heads", 2.0), ("rope_scaling", {"factor": 8}),
                     ("qk_norm", 1), ("max_positions", -1)):
        e = refused(lambda: lm.LlamaConfig(**{**c.__dict__, field: v}))
        assert e.code == "R-CONFIG"
    with pytest.raises(Exception):
        c.vocab = 1  # frozen


# --- damaged config.json files: every field, every wrong value, coded (never a traceback) -----
_JUNK = [None, "x", "32", 3.0, 3.5, True, False, [], [1], {}, {"a": 1}, -1, 0, 2**70, -2**70, 10**400,
         float("nan"), float("inf"), -0.0, 1e308]
_KEYS = sorted({k for d in PUBLISHED.values() for k in d} | {"head_dim", "num_key_value_heads", "rope_parameters",
                                                              "partial_rotary_factor", "use_sliding_window"})


def _accepted_or_coded(fn, *args, **kw):
    """fn(...) returns, or raises a LaunchError with a code and a hint: never another exception."""
    try:
        return fn(*args, **kw)
    except lm.LaunchError as e:
        assert e.code.startswith("R-") and e.hint.strip(), str(e)


@pytest.mark.parametrize("key", _KEYS)
@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_field_damaged_is_accepted_or_coded(name, key):
    _accepted_or_coded(lm.config_from_hf, _with(name, **{key: ...}))
    for v in _JUNK:
        _accepted_or_coded(lm.config_from_hf, _with(name, **{key: v}))
    scaling = {**_L3, "rope_theta": 5e5}
    for k in scaling:
        for v in _JUNK:
            for where in ("rope_scaling", "rope_parameters"):
                _accepted_or_coded(lm.config_from_hf, _with(name, **{where: {**scaling, k: v}}))


@pytest.mark.parametrize("bad, words", [
    (_with("llama3_2_1b", model_type=["llama"]), "model_type = ['llama']"),  # unhashable: was a TypeError
    (_with("llama3_2_1b", model_type={}), "model_type = {}"),
    (_with("llama3_2_1b", rope_theta=10**400), "rope_theta = 1000"),          # past float: was an OverflowError
    (_with("llama3_2_1b", rms_norm_eps=10**400), "does not fit a float"),
    (_with("llama3_2_1b", rope_scaling={**_L3, "factor": 10**400}), "does not fit a float"),
    (_with("llama3_2_1b", vocab_size=2**70), "must be an int in [1, 2147483647]"),  # was accepted
    (_with("llama3_2_1b", num_hidden_layers=10**6), "layers = 1000000"),   # tensors() would loop for hours
    (_with("llama3_2_1b", num_attention_heads=2**20, num_key_value_heads=2**20, head_dim=2**12), "heads × head_dim"),
    (_with("llama3_2_1b", attention_bias=0), "attention_bias = 0 (int) must be a bool"),  # 0 == False: was accepted
    (_with("llama3_2_1b", pretraining_tp=True), "pretraining_tp = True (bool) must be an int"),
    (_with("llama3_2_1b", partial_rotary_factor=True), "partial_rotary_factor = True"),
    (_with("llama3_2_1b", rope_parameters="llama3"), "rope_parameters = 'llama3' is not an object"),  # was ignored
    (_with("llama3_2_1b", rope_parameters=[1]), "rope_parameters = [1]"),
])
def test_damaged_fields_that_crashed_or_passed(bad, words):
    e = refused(lm.config_from_hf, bad)
    assert e.code == "R-CONFIG" and words in str(e), str(e)


def test_huge_numbers_in_direct_construction_are_coded():
    c = lm.MODELS["llama3_2_1b"]
    for field, v in (("rms_eps", 10**400), ("rope_theta", 10**400), ("vocab", 2**70), ("layers", 2**31)):
        assert refused(lambda: lm.LlamaConfig(**{**c.__dict__, field: v})).code == "R-CONFIG"
    assert refused(lm.Llama3RopeScaling, 10**400, 1.0, 4.0, 8192).code == "R-CONFIG"


def test_name_argument_is_checked():
    tiny = {**PUBLISHED["llama3_2_1b"], "hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 64}
    for v in (3, "", [], b"x"):
        assert refused(lm.config_from_hf, tiny, name=v).code == "R-PARAM"


def test_unreadable_paths_are_coded_not_raised_or_waited_on(tmp_path):
    import os
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # reading it would block forever
    assert "FIFO" in str(refused(lm.config_from_hf, fifo))
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "config.json")
    assert "FIFO" in str(refused(lm.config_from_hf, tmp_path / "d"))
    assert "character device" in str(refused(lm.config_from_hf, "/dev/zero"))  # never ends: was read until OOM
    assert "too long" in str(refused(lm.config_from_hf, "a" * 5000))       # was an OSError from Path.is_dir
    (tmp_path / "loop").symlink_to("loop")
    assert refused(lm.config_from_hf, tmp_path / "loop").code == "R-CONFIG"
    (tmp_path / "big.json").write_bytes(b" " * (5 << 20) + b"{}")
    assert "larger than" in str(refused(lm.config_from_hf, tmp_path / "big.json"))
    (tmp_path / "cfgdir" / "config.json").mkdir(parents=True)
    assert "directory" in str(refused(lm.config_from_hf, tmp_path / "cfgdir"))
    assert "NUL" in str(refused(lm.config_from_hf, "con\0fig.json"))
