"""kernels/moe entry points (moe_step, open_step, load, MoeStep, moe_ep.EpStep.params) refuse every
bad input before loading or launching anything, with an R-* code and a hint. CPU only: tensors
are CPU tensors that report cuda:0 (entry_fakes.OnGpu; the weights are untouched torch.empty,
so they cost no memory), the kernel is a launch counter; skipped where torch is absent."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import BF16, CountingKernel, empty, gpu, misaligned, randn, refused, write_manifest  # noqa: E402

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
    moe = dict.fromkeys(["x", "router_w", "w13", "w2", "out", "peers"], "ptr") | dict.fromkeys(["t", "rank", "world"],
                                                                                               "u32")
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 4})
    assert "top_k" in str(refused(ms.MoeStep, tmp_path / "moe_step.cubin", tmp_path / "moe_step.manifest.json"))
    assert refused(ms.MoeStep, tmp_path / "moe_step.cubin", tmp_path / "moe_step.manifest.json", "x").code == "R-DEVICE"
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 8, "block_m": 64})  # no model shape facts
    e = refused(ms.load, tmp_path)
    assert "'hidden': None" in str(e) and "tools/bazel build //kernels:moe_step" in e.hint
    write_manifest(tmp_path / "moe_step.manifest.json", moe, {"top_k": 8, "block_m": 64, "hidden": 2048,
                                                             "inter": 768, "experts": 128})
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
