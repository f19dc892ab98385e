"""Property-based fuzz of the MoE entries: moe_models.model_from_hf_config, moe_step, open_step,
MoeLayer (and .open, .from_config) and moe_convert.convert_layer, with damaged config.json
dicts and files, unknown or impossible models, T = 0 or past the maximum, tensors of the wrong
shape, dtype, device, layout or type, and damaged checkpoint tensors. Every input is accepted,
with an independent oracle agreeing it is valid, or refused with a LaunchError (R-* code and
hint) before anything is loaded or launched. CPU only: tensors are CPU tensors that report
cuda:<i> (entry_fakes), the kernel is a launch counter; seeded (helpers.entry_fuzz)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import BF16, CountingKernel, empty, gpu  # noqa: E402
from helpers.entry_fuzz import REFUSED, fuzz_settings, outcome  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_convert as mc  # noqa: E402
import moe_models as mm  # noqa: E402
import moe_step as ms  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*nested tensor")

PUBLISHED = {  # the MoE fields of each family's config.json (one served model each)
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 2048, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "num_experts": 128, "norm_topk_prob": True},
    "olmoe": {"model_type": "olmoe", "hidden_size": 2048, "num_experts_per_tok": 8, "intermediate_size": 1024,
              "num_experts": 64},
    "mixtral": {"model_type": "mixtral", "hidden_size": 4096, "num_experts_per_tok": 2, "intermediate_size": 14336,
                "num_local_experts": 8},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 7168, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "n_group": 8,
                    "topk_group": 4, "routed_scaling_factor": 2.5},
    "gpt_oss": {"model_type": "gpt_oss", "hidden_size": 2880, "experts_per_token": 4, "intermediate_size": 2880,
                "num_local_experts": 128},
}
KEYS = sorted({k for c in PUBLISHED.values() for k in c} | {f for fs in mm.FIELDS.values() for f, *_ in fs})
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2, 9), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from([0, 2**63, 2048, 768, 128, "silu", "sigmoid", "qwen3_moe", "llama", ""]),
                 st.lists(st.integers(), max_size=2))
DTYPES = {"bf16": BF16, "f32": torch.float32}


def test_fuzz_moe_config_json(tmp_path):
    """Missing fields, wrong types, out-of-range values and unknown model types: a config is
    accepted only as the served model whose every field it matches."""
    path = tmp_path / "config.json"

    @fuzz_settings(300)
    @given(st.sampled_from(sorted(PUBLISHED)), st.dictionaries(st.sampled_from(KEYS), JUNK, max_size=3),
           st.lists(st.sampled_from(KEYS), max_size=2), st.booleans())
    def run(family, muts, drops, as_file):
        cfg = {k: v for k, v in PUBLISHED[family].items() if k not in drops} | muts
        if as_file:
            path.write_text(json.dumps(cfg))
        got = outcome(mm.model_from_hf_config, path if as_file else cfg)
        if got is not REFUSED:
            mt = cfg["model_type"]
            assert got.name in mm.MODELS and mm.FAMILY[got.name] == mt
            for field, kind, default, want in mm.FIELDS[mt]:
                alias = "experts_per_token" if field == "num_experts_per_tok" and cfg.get(field) is None else field
                v = cfg.get(alias)
                assert (default if v is None else v) == want(got) and (v is None or type(v) is not bool or kind is bool)

    run()


def _meta(shape, dtype, index=0):
    return gpu(torch.empty(tuple(shape), dtype=dtype, device="meta"), index)


# Damage to one tensor argument: (name, build(the good tensor), valid)
DAMAGE = [("as is", lambda t: t, True),
          ("one column more", lambda t: _meta((*t.shape[:-1], t.shape[-1] + 1), t.dtype), False),
          ("a dim fewer", lambda t: _meta(t.shape[1:], t.dtype), False),
          ("fp16", lambda t: _meta(t.shape, torch.float16), False),
          ("cpu", lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), False),
          ("cuda:1", lambda t: _meta(t.shape, t.dtype, 1), False),
          ("transposed", lambda t: _meta((*t.shape[:-2], t.shape[-1], t.shape[-2]), t.dtype).transpose(-1, -2)
           if t.dim() > 1 else None, False),
          ("None", lambda t: None, False), ("a list", lambda t: [0.0], False),
          ("numpy", lambda t: np.zeros(2), False), ("sparse", lambda t: torch.zeros(2, 2).to_sparse(), False)]
MODEL_CHOICES = list(mm.MODELS) + ["nope", None, 3]
FIELD_CHANGES = [("top_k", 0), ("experts", 1), ("routing", "x"), ("scaling", math.nan), ("hidden", 2.0), ("name", "")]
T_VALUES = [(1, True), (3, True), (0, False), (-1, False), (ms.MAX_TOKENS + 1, False)]


@pytest.fixture
def fake_load(monkeypatch):
    """ms.load -> a MoeStep of the asked model around a CountingKernel (no kernel file read)."""
    kernels = {}

    def load(kernel_dir=None, device=0, *, control=False, name=None, model="qwen3_30b_a3b"):
        m = mm.resolve_model(model)
        step = ms.MoeStep.__new__(ms.MoeStep)
        step.model, step.kernel = m, kernels.setdefault(m.name, CountingKernel(ms.model_params(m)))
        return step

    monkeypatch.setattr(ms, "load", load)
    return SimpleNamespace(launches=lambda: sum(len(k.launches) + len(k.opened) for k in kernels.values()))


def test_fuzz_moe_step_and_layer(fake_load):
    """Unknown model names, hand-made models with impossible fields, T = 0 or past the maximum,
    and every tensor of the wrong shape, dtype, device, layout or type, through each entry."""
    @fuzz_settings(300)
    @given(st.sampled_from(mm.LINKED) | st.sampled_from(MODEL_CHOICES), st.none() | st.sampled_from(FIELD_CHANGES),
           st.sampled_from(T_VALUES[:2]) | st.sampled_from(T_VALUES), st.just({}) | st.dictionaries(st.sampled_from(
               ["x", "out", "router_w", "w13", "w2", "router_b", "b13", "b2", "score_bias", "shared_w13", "shared_w2"]),
               st.integers(0, len(DAMAGE) - 1), max_size=2),
           st.sampled_from(["moe_step", "open_step", "layer", "layer.open", "from_config"]))
    def run(choice, change, t, damage, entry):
        m = mm.MODELS.get(choice) if isinstance(choice, str) else None
        shapes = m or mm.MODELS["qwen3_30b_a3b"]
        H, (T, ok) = shapes.hidden, t
        ok = ok and m is not None and m.name in mm.LINKED and change is None
        small = 0 <= T <= 8  # else x and out are meta tensors (no memory; their overlap is refused too)
        x, out = (empty(T, H), empty(T, H)) if small else (_meta((max(T, 0), H), BF16), _meta((max(T, 0), H), BF16))
        args = {"x": x, "out": out, **{n: _meta(s, DTYPES[d]) for n, (s, d) in shapes.tensors().items()}}
        for n, i in damage.items():
            if n == "out" and DAMAGE[i][0] == "None":
                continue  # out=None is valid, but allocating it needs CUDA
            if n in args:
                args[n] = DAMAGE[i][1](args[n])
                ok = ok and DAMAGE[i][2]
            else:
                args[n], ok = _meta((1,), BF16), False  # a tensor the model does not take
        model = choice if change is None or m is None else (lambda: dataclasses.replace(m, **dict([change])))
        before = fake_load.launches()

        def call():
            mdl = model() if callable(model) else model
            x_, out = args.pop("x"), args.pop("out")
            if entry in ("moe_step", "open_step"):
                fn = ms.moe_step if entry == "moe_step" else ms.open_step
                return fn(x_, args.pop("router_w", None), args.pop("w13", None), args.pop("w2", None), out,
                          model=mdl, **args)
            if entry == "from_config":  # the config.json of the model chosen (a bad choice: of no model)
                served = mm.MODELS.get(mdl) if isinstance(mdl, str) else None
                cfg = ({"model_type": mm.FAMILY[served.name]} | {f: want(served) for f, _, _, want in
                                                                 mm.FIELDS[mm.FAMILY[served.name]]}
                       if served else {"model_type": repr(mdl)})
                layer = ms.MoeLayer.from_config(cfg, args)
            else:
                layer = ms.MoeLayer(mdl, args)
            return layer(x_, out) if entry != "layer.open" else layer.open(x_, out)

        got = outcome(call)
        assert (got is not REFUSED) == ok, (choice, change, t, damage, entry)
        assert fake_load.launches() == before + (1 if ok else 0)

    run()


def _small(name):
    extra = dict(shared_inter=8, groups=2, topk_groups=1) if name == "deepseek_v3" else {}
    return dataclasses.replace(mm.MODELS[name], hidden=32, inter=8, experts=4, top_k=2, **extra)


def _hf_state(m):
    """A converter input: our tensors as the checkpoint names them (test_moe_convert's layout)."""
    sys.path.insert(0, str(ROOT / "tests" / "kernels"))
    from test_moe_convert import P, hf_layout, ours
    return P, hf_layout(m, ours(m))


# Damage to one checkpoint tensor: (name, change, valid)
CKPT_DAMAGE = [("f32", lambda t: t.float(), True), ("f16", lambda t: t.half(), True),
               ("int32", lambda t: t.to(torch.int32), False), ("bool", lambda t: t.bool(), False),
               ("fp8 without scale", lambda t: t.to(torch.float8_e4m3fn), False),
               ("complex", lambda t: t.to(torch.complex64), False), ("a row fewer", lambda t: t[:-1], False),
               ("one row", lambda t: t.reshape(1, -1), False), ("sparse", lambda t: t.to_sparse(), False),
               ("nested", lambda t: torch.nested.nested_tensor([t]), False), ("meta", lambda t: t.to("meta"), False),
               ("NaN", lambda t: t.float().index_fill(0, torch.tensor([0]), math.nan), False),
               ("a list", lambda t: t.tolist(), False), ("dropped", lambda t: None, False)]


def test_fuzz_moe_convert():
    states = {n: _hf_state(_small(n)) for n in mm.MODELS}

    @fuzz_settings(200)
    @given(st.sampled_from(sorted(mm.MODELS)), st.data(), st.sampled_from([0, 1]) | st.integers(0, len(CKPT_DAMAGE) - 1),
           st.none() | st.sampled_from(["extra", "prefix"]))
    def run(name, data, how, also):
        m, (P, sd) = _small(name), states[name]
        moe = sorted(k for k in sd if ".mlp." in k or ".block_sparse_moe." in k)
        key = data.draw(st.sampled_from(moe))
        _, change, ok = CKPT_DAMAGE[how]
        sd = dict(sd)
        if (new := change(sd[key])) is None:
            del sd[key]
        else:
            sd[key] = new
        if also == "extra":
            sd[moe[0].rsplit(".", 2)[0] + ".unexpected.weight"], ok = torch.zeros(2), False
        prefix = "model.layers.6." if also == "prefix" else P
        ok = ok and also != "prefix"
        got = outcome(mc.convert_layer, m, sd, prefix)
        assert (got is not REFUSED) == ok, (name, key, CKPT_DAMAGE[how][0], also)
        if ok:
            assert {n: (tuple(t.shape), t.dtype) for n, t in got.items()} == {
                n: (s, DTYPES[d]) for n, (s, d) in m.tensors().items()}
            assert all(t.layout == torch.strided and bool(t.isfinite().all()) for t in got.values())

    run()
