"""kernels/moe entry points (moe_step, open_step, load, MoeStep, moe_ep.EpStep.params) refuse every
bad input before loading or launching anything, with an R-* code and a hint. CPU only: tensors
are CPU tensors that report cuda:0 (entry_fakes.OnGpu; the weights are untouched torch.empty,
so they cost no memory), the kernel is a launch counter; skipped where torch is absent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import BF16, CountingKernel, empty, gpu, misaligned, randn, refused, unprobeable_dir, write_manifest  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_ep  # noqa: E402
import moe_step as ms  # noqa: E402

T, HID, INT, E = 4, 2048, 768, 128


@pytest.fixture(scope="module")
def weights():
    return empty(E, HID), empty(E, 2 * INT, HID), empty(E, HID, INT)


@pytest.fixture
def kern(monkeypatch):
    k = CountingKernel(ms.PARAMS, facts={"top_k": 8, "block_m": 64})
    step = ms.MoeStep.__new__(ms.MoeStep)
    step.kernel = k
    loads = []
    monkeypatch.setattr(ms, "load", lambda kernel_dir=None, device=0, **kw: loads.append((device, kw)) or step)
    k.loads = loads
    return k


def test_good_call_launches_once(kern, weights):
    x, out = randn(T, HID), empty(T, HID)
    assert ms.moe_step(x, *weights, out) is out
    assert ms.open_step(x, *weights, out).launch() is None
    (p, _), (o,) = kern.launches, kern.opened
    assert p["t"] == T and p["world"] == 1 and p["out"] is out and o["x"] is x


def _cases(weights):
    rw, w13, w2 = weights
    x = torch.randn(T, HID).to(BF16)
    big = torch.empty(2 * T * HID, dtype=BF16)
    return [
        ("x list", dict(x=[[0.0] * HID]), "R-PARAM"),
        ("x None", dict(x=None), "R-PARAM"),
        ("x numpy", dict(x=np.zeros((T, HID), np.float32)), "R-PARAM"),
        ("x cpu", dict(x=x), "R-DEVICE"),
        ("x fp32", dict(x=randn(T, HID, dtype=torch.float32)), "R-DTYPE"),
        ("x hidden", dict(x=randn(T, 1024)), "R-SHAPE"),
        ("x 3-d", dict(x=randn(1, T, HID)), "R-SHAPE"),
        ("x T = 0", dict(x=randn(0, HID)), "R-SHAPE"),
        ("x T = 65537", dict(x=empty(65537, HID)), "R-SHAPE"),
        ("x non-contiguous", dict(x=gpu(torch.randn(HID, T).to(BF16).t())), "R-LAYOUT"),
        ("x misaligned", dict(x=misaligned(T, HID)), "R-LAYOUT"),
        ("x requires grad", dict(x=gpu(x.clone().requires_grad_())), "R-PARAM"),
        ("x negated view", dict(x=gpu(torch._neg_view(x))), "R-LAYOUT"),
        ("router_w shape", dict(router_w=empty(64, HID)), "R-SHAPE"),
        ("router_w cuda:1", dict(router_w=empty(E, HID, index=1)), "R-DEVICE"),
        ("w13 None", dict(w13=None), "R-PARAM"),
        ("w13 expert slice", dict(w13=gpu(torch.empty(E, 2 * INT, HID, dtype=BF16)[:64])), "R-SHAPE"),
        ("w2 fp16", dict(w2=empty(E, HID, INT, dtype=torch.float16)), "R-DTYPE"),
        ("w2 cpu", dict(w2=torch.empty(E, HID, INT, dtype=BF16)), "R-DEVICE"),
        ("out is x", dict(out="x"), "R-LAYOUT"),
        ("out overlaps x", dict(x=gpu(big[:T * HID].view(T, HID)), out=gpu(big[T * HID // 2:][:T * HID].view(T, HID))),
         "R-LAYOUT"),
        ("out inside w13", dict(out=gpu(w13.as_subclass(torch.Tensor).view(-1)[:T * HID].view(T, HID))), "R-LAYOUT"),
        ("out inside router_w", dict(out=gpu(rw.as_subclass(torch.Tensor)[:T])), "R-LAYOUT"),
        ("out shape", dict(out=empty(T + 1, HID)), "R-SHAPE"),
        ("out fp32", dict(out=empty(T, HID, dtype=torch.float32)), "R-DTYPE"),
        ("out cuda:1", dict(out=empty(T, HID, index=1)), "R-DEVICE"),
        ("out requires grad", dict(out=gpu(torch.empty(T, HID, dtype=BF16).requires_grad_())), "R-PARAM"),
        ("out misaligned", dict(out=misaligned(T, HID)), "R-LAYOUT"),
        ("stream float", dict(stream=1.5), "R-PARAM"),
        ("stream bool", dict(stream=False), "R-PARAM"),
        ("stream huge", dict(stream=2**64), "R-PARAM"),
    ]


def test_bad_input_is_refused_before_loading(kern, weights):
    rw, w13, w2 = weights
    for name, change, code in _cases(weights):
        for fn in (ms.moe_step, ms.open_step):
            args = {"x": randn(T, HID), "router_w": rw, "w13": w13, "w2": w2, "out": None, **change}
            if fn is ms.open_step and "stream" in args:
                continue
            if isinstance(args["out"], str):
                args["out"] = args[args["out"]]
            e = refused(fn, **args)
            assert e.code == code, f"{fn.__name__}: {name}: {e}"
    assert kern.loads == [] and kern.launches == [] and kern.opened == []


def test_load_refuses_bad_arguments_and_wrong_kernels(tmp_path):
    for kw, code in [(dict(device="0"), "R-DEVICE"), (dict(device=-1), "R-DEVICE"), (dict(device=1.0), "R-DEVICE"),
                     (dict(kernel_dir=3), "R-PARAM"), (dict(kernel_dir=""), "R-PARAM"), (dict(control=1), "R-PARAM"),
                     (dict(name=None), "R-PARAM"), (dict(name="../moe_step"), "R-PARAM"), (dict(name=""), "R-PARAM"),
                     (dict(), "R-MANIFEST")]:
        kw.setdefault("kernel_dir", tmp_path)
        assert refused(ms.load, **kw).code == code, kw
    (tmp_path / "moe_step.cubin").write_bytes(b"\0" * 64)  # never loaded: the manifest is read first
    assert refused(ms.load, tmp_path).code == "R-MANIFEST"
    attn = dict.fromkeys(["q", "k", "v", "o", "aux"], "ptr") | dict.fromkeys(["q_len", "kv_len", "bh"], "u32")
    write_manifest(tmp_path / "moe_step.manifest.json", attn, {"head_dim": 128})
    assert "not a manifest of moe_step" in str(refused(ms.load, tmp_path))
    moe = dict.fromkeys(["x", "router_w", "w13", "w2", "router_b", "b13", "b2", "out", "peers"], "ptr") | dict.fromkeys(["t", "rank", "world"],
                                                                                               "u32")
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 4})
    assert "top_k" in str(refused(ms.MoeStep, tmp_path / "moe_step.cubin", tmp_path / "moe_step.manifest.json"))
    assert refused(ms.MoeStep, tmp_path / "moe_step.cubin", tmp_path / "moe_step.manifest.json", "x").code == "R-DEVICE"
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 8, "block_m": 64})  # no model shape facts
    e = refused(ms.load, tmp_path)
    assert "'hidden': None" in str(e) and "tools/bazel build //kernels:moe_step" in e.hint
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 8, "block_m": 64, "hidden": 2048,
                                                             "inter": 768, "experts": 128, "renormalize": 1, "biases": 0})
    assert "not a CUDA cubin" in str(refused(ms.load, tmp_path))


@pytest.mark.parametrize("world, rank", [(1, 0), (2, 1), (8, 3)])
def test_ep_params_refuse_bad_inputs(weights, world, rank):
    ep = moe_ep.EpStep.__new__(moe_ep.EpStep)
    ep.world, ep.rank, ep.device, ep.max_tokens, ep.table = world, rank, 0, 16, SimpleNamespace(ptr=1 << 40)
    rw, w13, w2 = weights
    P = E // world
    mine13 = gpu(w13.as_subclass(torch.Tensor)[rank * P:(rank + 1) * P])
    mine2 = gpu(w2.as_subclass(torch.Tensor)[rank * P:(rank + 1) * P])
    x, out = randn(T, HID), empty(T, HID)
    for a13, a2 in ((w13, w2), (mine13, mine2)):
        p = ep.params(x, rw, a13, a2, out)
        assert p["world"] == world and p["out"] is out
    for args, code in [((randn(17, HID), rw, w13, w2, None), "R-SHAPE"), ((x, rw, [0.0], w2, out), "R-PARAM"),
                       ((x, rw, empty(P + 1, 2 * INT, HID), w2, out), "R-SHAPE"),
                       ((x, rw, w13, empty(E, HID, INT, dtype=torch.float32), out), "R-DTYPE"),
                       ((x, rw, w13, w2, x), "R-LAYOUT"),
                       ((x, rw, w13, w2, gpu(w2.as_subclass(torch.Tensor).view(-1)[:T * HID].view(T, HID))), "R-LAYOUT"),
                       ((x, rw, w13, w2, torch.empty(T, HID, dtype=BF16)), "R-DEVICE")]:
        assert refused(ep.params, *args).code == code, args
    assert refused(ep, x, rw, w13, w2, out, stream=0.0).code == "R-PARAM"


@pytest.mark.parametrize("t", [np.int64(16), np.int32(1), 65536])
def test_ep_max_tokens_takes_numpy_ints(t):
    assert moe_ep.check_max_tokens(t) == int(t)


@pytest.mark.parametrize("t", [0, 65537, True, np.bool_(True), 2.0, np.float64(2.0), "16", None, [16]])
def test_ep_max_tokens_is_r_shape(t):
    assert refused(moe_ep.check_max_tokens, t).code == "R-SHAPE"


def test_built_kernels_pass_the_manifest_checks(monkeypatch):
    bin_ = Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")
    if not (bin_ / "moe_step.manifest.json").is_file():
        pytest.skip(f"{bin_} is not built")
    monkeypatch.setattr(ms.Kernel, "load", classmethod(lambda cls, c, m, d: CountingKernel(
        ms.PARAMS, facts={"top_k": 8, "block_m": 64})))
    for name in ("moe_step", "moe_step_swiglu2"):
        for control in (False, True):
            if (bin_ / f"{name}{'.control' if control else ''}.cubin").is_file():
                assert ms.MoeStep(bin_ / f"{name}{'.control' if control else ''}.cubin",
                                  bin_ / f"{name}.manifest.json").kernel.manifest.facts["top_k"] == 8


# --- every served model (moe_models.MODELS): weights are meta tensors that say they are on cuda:0
# (huge(): no memory, data pointer 0), x and out are real; the kernel is a launch counter per model.

import moe_models  # noqa: E402  (kernels/moe is on sys.path above)
from moe_models import MODELS, NOT_LINKED, resolve_model  # noqa: E402
from helpers.entry_fakes import huge  # noqa: E402

DTYPES = {"bf16": BF16, "f32": torch.float32}


def model_weights(m, index=0):
    return {n: gpu(torch.empty(*s, dtype=DTYPES[d], device="meta"), index) for n, (s, d) in m.tensors().items()}


@pytest.fixture
def all_linked(monkeypatch):
    """Every model as if its kernel target existed: the per-model checks are the ones a model gets
    once the owners serve it (moe_models.NOT_LINKED refuses a model no target serves first)."""
    monkeypatch.setattr(moe_models, "NOT_LINKED", {})


@pytest.fixture
def model_kern(monkeypatch, all_linked):
    """ms.load returns a MoeStep of the asked model around a CountingKernel; `kernels` by model."""
    kernels, loads = {}, []

    def fake_load(kernel_dir=None, device=0, *, control=False, name=None, model="qwen3_30b_a3b"):
        m = resolve_model(model)
        loads.append(m.name)
        step = ms.MoeStep.__new__(ms.MoeStep)
        step.model = m
        step.kernel = kernels.setdefault(m.name, CountingKernel(ms.model_params(m), facts=m.facts() | {"block_m": 64}))
        return step

    monkeypatch.setattr(ms, "load", fake_load)
    return SimpleNamespace(kernels=kernels, loads=loads)


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_good_call_launches_once(name, model_kern, tmp_path, monkeypatch):
    m = MODELS[name]
    w = model_weights(m)
    x, out = randn(T, m.hidden), empty(T, m.hidden)
    extras = {n: w[n] for n in m.extras()}
    shared = []  # the shared expert (DeepSeek-V3) is applied after the kernel, not lent to it
    monkeypatch.setattr(ms, "add_shared_expert", lambda mm, xx, o, a, b, stream=None: shared.append((mm, xx, o, a, b)))
    assert ms.moe_step(x, w["router_w"], w["w13"], w["w2"], out, model=name, **extras) is out
    (p,) = model_kern.kernels[name].launches
    assert set(p) == ms.model_params(m) and p["t"] == T and p["out"] is out and p["x"] is x
    assert all(p[n] is w[n] for n in m.kernel_tensors()) and (p["rank"], p["world"], p["peers"]) == (0, 1, 0)
    assert not set(moe_models.SHARED_TENSORS) & set(p)
    layer = ms.MoeLayer(name, w, kernel_dir=tmp_path)
    assert layer(x, out) is out and layer.open(x, out).launch() is None
    assert len(model_kern.kernels[name].launches) == 3 and model_kern.loads == [name] * 3
    want = (m, x, out, w.get("shared_w13"), w.get("shared_w2"))
    assert len(shared) == (3 if m.shared_inter else 0) and all(all(a is b for a, b in zip(c, want)) for c in shared)
    if name == "qwen3_30b_a3b":  # the default model: the call as it always was
        assert ms.moe_step(x, w["router_w"], w["w13"], w["w2"], out) is out


def _model_cases(m):
    """(what, change to the call's keyword arguments, code) for model m's layer."""
    w, H = model_weights(m), m.hidden
    cases = [("model unknown", dict(model="llama"), "R-PARAM"), ("model None", dict(model=None), "R-PARAM"),
             ("x hidden", dict(x=randn(T, H + 64)), "R-SHAPE"), ("x T = 0", dict(x=randn(0, H)), "R-SHAPE"),
             ("x T = 65537", dict(x=huge(65537, H)), "R-SHAPE"), ("x fp32", dict(x=randn(T, H, dtype=torch.float32)), "R-DTYPE"),
             ("out shape", dict(out=empty(T, H - 1)), "R-SHAPE"), ("out is x", dict(out="x"), "R-LAYOUT"),
             ("a tensor named like no tensor", dict(w4=w["w2"]), "R-PARAM"),
             ("a typo'd keyword", dict(kernel_dri="/tmp"), "R-PARAM")]
    foreign = {"router_b": w["router_w"][0]} if not m.biases else {"score_bias": empty(m.experts, dtype=torch.float32)}
    cases.append((f"unexpected {next(iter(foreign))}", foreign, "R-PARAM"))
    for n, (shape, dt) in m.tensors().items():
        other = torch.float32 if dt == "bf16" else BF16
        cases += [(f"{n} shape", {n: huge(shape[0] + 1, *shape[1:], dtype=DTYPES[dt])}, "R-SHAPE"),
                  (f"{n} dtype", {n: huge(*shape, dtype=other)}, "R-DTYPE"),
                  (f"{n} cpu", {n: torch.empty(*shape, dtype=DTYPES[dt], device="meta")}, "R-DEVICE"),
                  (f"{n} cuda:1", {n: gpu(torch.empty(*shape, dtype=DTYPES[dt], device="meta"), 1)}, "R-DEVICE"),
                  (f"{n} a list", {n: [0.0]}, "R-PARAM")]
        if n in m.extras():
            cases.append((f"{n} missing", {n: "drop"}, "R-PARAM"))
    return w, cases


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_bad_input_is_refused_before_loading(name, model_kern):
    m = MODELS[name]
    w, cases = _model_cases(m)
    for what, change, code in cases:
        for fn in (ms.moe_step, ms.open_step):
            args = {"x": randn(T, m.hidden), **w, "out": empty(T, m.hidden), "model": name, **change}
            args = {k: v for k, v in args.items() if not (isinstance(v, str) and v == "drop")}
            if isinstance(args["out"], str):
                args["out"] = args[args["out"]]
            e = refused(fn, **args)
            assert e.code == code, f"{name}: {what}: {e}"
            if code == "R-SHAPE" and "tokens" not in str(e):
                assert m.name in e.hint and f"{list(m.tensors()['w13'][0])}" in e.hint, e.hint  # the model's shapes
    assert model_kern.loads == [] and model_kern.kernels == {}


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_layer_refuses_bad_weights_at_construction(name, model_kern, tmp_path):
    m = MODELS[name]
    w = model_weights(m)
    assert refused(ms.MoeLayer, name, list(w.values())).code == "R-PARAM"
    assert refused(ms.MoeLayer, name, {k: v for k, v in w.items() if k != "w13"}).code == "R-PARAM"
    assert refused(ms.MoeLayer, name, {**w, "bias": w["w2"]}).code == "R-PARAM"
    assert refused(ms.MoeLayer, "no_such_model", w).code == "R-PARAM"
    for n, (shape, dt) in m.tensors().items():
        assert refused(ms.MoeLayer, name, {**w, n: huge(*shape[:-1], shape[-1] * 2, dtype=DTYPES[dt])}).code == "R-SHAPE"
    assert refused(ms.MoeLayer, name, w, device=1).code == "R-DEVICE"  # the weights are on cuda:0
    assert refused(ms.MoeLayer, name, w, kernel_dir=3).code == "R-PARAM"
    layer = ms.MoeLayer(name, w)
    assert refused(layer, randn(T, m.hidden + 1)).code == "R-SHAPE"
    assert refused(layer, randn(T, m.hidden), stream=1.5).code == "R-PARAM"
    assert model_kern.loads == []


@pytest.mark.parametrize("x", [None, "x"], ids=["None", "a string"])
def test_a_layer_called_without_an_x_tensor_is_refused(model_kern, x):
    """layer(None, out) launched the kernel with x = None and t = 0 (and layer(None) raised
    AttributeError): None was also MoeLayer._check's "weights only" marker for construction."""
    m = MODELS["qwen3_30b_a3b"]
    layer = ms.MoeLayer(m.name, model_weights(m))
    for call in (lambda: layer(x, empty(T, m.hidden)), lambda: layer(x), lambda: layer.open(x, empty(T, m.hidden))):
        e = refused(call)
        assert e.code == "R-PARAM" and "x must be a CUDA tensor" in str(e), str(e)
    assert model_kern.loads == [] and model_kern.kernels == {}


def test_layer_from_config(model_kern, tmp_path):
    m = MODELS["mixtral_8x7b"]
    cfg = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
           "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    layer = ms.MoeLayer.from_config(tmp_path / "config.json", model_weights(m))
    assert layer.model is m and layer(randn(T, 4096), empty(T, 4096)).shape == (T, 4096)
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"num_local_experts": 16}))
    e = refused(ms.MoeLayer.from_config, tmp_path / "config.json", model_weights(m))
    assert e.code == "R-CONFIG" and "num_local_experts = 16 (it has 8)" in str(e)
    assert refused(ms.MoeLayer.from_config, tmp_path / "missing.json", model_weights(m)).code == "R-CONFIG"


def _manifest_of(m, path, *, facts=None, drop=()):
    params = {n: ("u32" if n in ("t", "rank", "world") else "ptr") for n in sorted(ms.model_params(m)) if n not in drop}
    write_manifest(path, params, (m.facts() | {"block_m": 64}) if facts is None else facts)


@pytest.mark.parametrize("name", list(NOT_LINKED) or ["deepseek_v3"])
def test_model_no_kernel_serves_is_refused_before_anything(name, tmp_path, monkeypatch):
    """A model in moe_models.NOT_LINKED (none today: as if DeepSeek-V3 still were)."""
    if name not in NOT_LINKED:
        monkeypatch.setitem(moe_models.NOT_LINKED, name, "dispatch, expert and combine accept at most 128 experts")
    m = MODELS[name]
    loads = []
    monkeypatch.setattr(ms, "MoeStep", lambda *a, **k: loads.append(a))
    w = model_weights(m)
    extras = {n: w[n] for n in m.extras()}
    calls = [lambda: ms.moe_step(randn(T, m.hidden), w["router_w"], w["w13"], w["w2"], model=name, **extras),
             lambda: ms.open_step(randn(T, m.hidden), w["router_w"], w["w13"], w["w2"], model=name, **extras),
             lambda: ms.load(tmp_path, model=name),
             lambda: ms.MoeLayer(name, w)]
    for call in calls:
        e = refused(call)
        assert e.code == "R-CONFIG" and f"no kernel serves {name} yet" in str(e) and "qwen3_30b_a3b" in e.hint
    assert loads == []


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_kernel_is_checked_on_load(name, tmp_path, all_linked):
    m = MODELS[name]
    target = "moe_step" if name == "qwen3_30b_a3b" else name
    assert f"//kernels:{target}" in refused(ms.load, tmp_path, model=name).hint  # not built
    cubin, manifest = tmp_path / f"{target}.cubin", tmp_path / f"{target}.manifest.json"
    cubin.write_bytes(b"\0" * 64)  # never loaded: the manifest is read first
    _manifest_of(m, manifest)
    assert "not a CUDA cubin" in str(refused(ms.load, tmp_path, model=name))  # the manifest is this model's
    other = MODELS["gpt_oss_120b" if name != "gpt_oss_120b" else "mixtral_8x7b"]
    _manifest_of(m, manifest, facts=other.facts() | {"block_m": 64})  # another model's shape facts
    e = refused(ms.MoeStep, cubin, manifest, model=name)
    assert e.code == "R-MANIFEST" and f"tools/bazel build //kernels:{target}" in e.hint and "facts" in str(e)
    _manifest_of(m, manifest, facts={k: v for k, v in m.facts().items() if k != "inter"})  # a fact missing
    assert "'inter': None" in str(refused(ms.MoeStep, cubin, manifest, model=name))
    _manifest_of(m, manifest, drop=(m.extras() or ("w2",))[:1])  # a tensor the kernel does not take
    assert "parameters" in str(refused(ms.load, tmp_path, model=name))


@pytest.mark.parametrize("via", ["kernel_dir", "env"])
@pytest.mark.parametrize("kind", ["long", "loop", "file"])
def test_load_refuses_an_unprobeable_kernel_dir(tmp_path, monkeypatch, kind, via):  # long: was Path.is_file's OSError
    d = unprobeable_dir(tmp_path, kind)
    monkeypatch.setenv("PIPELINK_MOE_STEP_DIR", str(d))
    e = refused(ms.load, **({"kernel_dir": d} if via == "kernel_dir" else {}))
    assert e.code == "R-MANIFEST" and "no kernel at" in str(e)


def test_shared_expert_matches_the_reference_ffn():
    """add_shared_expert (DeepSeek-V3's shared expert after the kernel) against moe_reference's
    f64 FFN, on the CPU at a small shape: within bf16 rounding of out."""
    import dataclasses

    import moe_reference

    m = dataclasses.replace(MODELS["deepseek_v3"], hidden=256, inter=128, shared_inter=128, experts=64, groups=8)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 256, generator=g).to(BF16)
    w13 = (torch.randn(256, 256, generator=g) * 256**-0.5).to(BF16)
    w2 = (torch.randn(256, 128, generator=g) * 128**-0.5).to(BF16)
    routed = torch.randn(5, 256, generator=g).to(BF16)
    out = routed.clone()
    ms.add_shared_expert(m, x, out, w13, w2)
    ref = routed.double() + moe_reference._ffn(m, x.double(), w13, w2)
    assert ((out.double() - ref).abs() <= 2e-2 * (ref.abs() + ref.pow(2).mean().sqrt())).all()
