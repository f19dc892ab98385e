"""The decode megakernel of issue 43 on the CPU: the linked models' table against the published
configs, which configs a target serves (coded refusals), the packed weight layout, and a CPU
emulation of the kernel's step over the packed buffers (decode_emulator: the tile walk, the GU
interleave, RoPE and the cache, split-KV merging) against the fp32 reference with issue 43's
criterion. The swap: the two attention builds differ in the attention package only (from the
manifests in bazel-bin, when built). The kernel itself runs in test_llama_megakernel_gpu.py."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from conftest import ROOT
from helpers.entry_fakes import refused

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
sys.path.insert(0, str(ROOT / "tests" / "kernels"))
import llama_models as lm  # noqa: E402
import llama_pack as lp  # noqa: E402
import llama_reference as ref  # noqa: E402
from decode_emulator import Emulator  # noqa: E402
from llama_weights import random_weights  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = lm.LLAMA_TINY
BIN = ROOT / "bazel-bin" / "kernels" / "decode"


def test_linked_models_are_the_published_shapes():
    for key, m in lp.DECODE_MODELS.items():
        cfg = TINY if key == "llama_tiny" else lm.MODELS[key]
        assert {f: getattr(cfg, f) for f in lp.FACTS} == {f: m[f] for f in lp.FACTS}, key
        assert lp.kernel_target(cfg) == m["target"] and not lp.unsupported(cfg)


def test_llama3_1_8b_links_the_llama3_8b_kernel():
    """Llama-3.1-8B differs from Llama-3-8B in RoPE scaling and context only: data, not facts."""
    assert lp.kernel_target(lm.MODELS["llama3_1_8b"]) == "llama3_8b"


@pytest.mark.parametrize("change,words", [
    ({"qk_norm": True}, "no decode megakernel is linked"),
    ({"head_dim": 96, "heads": 16}, "head_dim = 96"),
    ({"heads": 16, "kv_heads": 1}, "heads / kv_heads = 16"),
    ({"hidden": 2000}, "hidden = 2000"),
    ({"inter": 20480}, "inter = 20480"),
    ({"vocab": 1000}, "vocab = 1000"),
    ({"layers": 3}, "no decode megakernel is linked"),
])
def test_a_config_no_target_serves_is_r_config(change, words):
    import dataclasses
    cfg = dataclasses.replace(TINY, **change)
    e = refused(lp.kernel_target, cfg)
    assert e.code == "R-CONFIG" and words in str(e)


def test_qwen3_links_its_own_target():
    assert lp.kernel_target(lm.MODELS["qwen3_1_7b"]) == "qwen3_1_7b"


def test_tile_rows_as_dec_h():
    assert [lp.tile_rows(k) for k in (256, 512, 2048, 4096, 8192, 14336, 16384)] == [64, 32, 8, 4, 2, 1, 1]
    assert [lp.tile_rows(k, 8192) for k in (256, 2048, 8192)] == [32, 4, 1]


def test_packed_layout():
    w = random_weights(TINY, seed=1)
    b = lp.pack(TINY, w)
    assert b["weights"].dtype == torch.bfloat16 and b["weights"].numel() == TINY.layers * lp.layer_elems(TINY)
    assert b["norms"].shape == (2 * TINY.layers + 1, TINY.hidden) and b["norms"].dtype == torch.float32
    assert b["head"].data_ptr() == b["embed"].data_ptr()  # tied: the embedding is the head
    H, I, r = TINY.hidden, TINY.inter, lp.tile_rows(TINY.hidden)
    q, kv = TINY.heads * TINY.head_dim, TINY.kv_heads * TINY.head_dim
    layer1 = b["weights"][lp.layer_elems(TINY):]
    gu = layer1[(q + 2 * kv) * H + H * q:][:2 * I * H].reshape(2 * I, H)
    gate, up = w["model.layers.1.mlp.gate_proj.weight"], w["model.layers.1.mlp.up_proj.weight"]
    assert torch.equal(gu[r:2 * r], up[:r].to(torch.bfloat16)) and torch.equal(gu[2 * r:3 * r], gate[r:2 * r].to(torch.bfloat16))
    qkv = layer1[:(q + 2 * kv) * H].reshape(-1, H)
    assert torch.equal(qkv[q:q + kv], w["model.layers.1.self_attn.k_proj.weight"].to(torch.bfloat16))


def _run(emulator, tokens):
    return torch.stack([emulator.step(t)[0] for t in tokens])


@pytest.fixture(scope="module")
def tiny():
    w = random_weights(TINY, seed=5)
    ids = torch.randint(0, TINY.vocab, (1, 80), generator=torch.Generator().manual_seed(2))
    ref_logits, _ = ref.prefill(w, TINY, ids)
    return w, ids, ref_logits[0]


@pytest.mark.parametrize("split,grid,tile_elems,chunks", [(True, 132, 16384, 1), (True, 8, 16384, 1),
                                                          (False, 132, 16384, 1), (True, 132, 8192, 1),
                                                          (True, 132, 16384, 2), (True, 132, 8192, 4)])
def test_emulated_step_meets_issue_43s_criterion(tiny, split, grid, tile_elems, chunks):
    """80 teacher-forced steps over the packed buffers agree with the fp32 reference (rtol 2e-2
    of the largest logit, greedy tokens wherever the margin is decisive); grid 8 makes the
    split-KV attention cut each head's positions into up to 4 chunks of 64 and merge them;
    tile_elems 8192 packs and walks half-size weight tiles (the stream's other accepted value);
    chunks > 1 packs and walks the DOWN op's k in chunks (fact down_chunks, the batched builds')."""
    w, ids, ref_logits = tiny
    em = Emulator(TINY, lp.pack(TINY, w, tile_elems=tile_elems, chunks=chunks), max_seq=128, grid=grid, split=split,
                  tile_elems=tile_elems, down_chunks=chunks)
    got = _run(em, ids[0].tolist())
    a = ref.agreement(got, ref_logits)
    assert a["ok"], a
    assert a["worst_rel"] < 1e-2


@pytest.mark.parametrize("chunks", [0, 3, 8])
def test_a_down_chunk_count_the_model_cannot_take_is_refused(tiny, chunks):
    """pack's chunks come from a manifest (fact down_chunks): a count that leaves inter = 1024 not
    in whole 256-element chunks is R-MANIFEST with a hint, before anything is packed."""
    w, _, _ = tiny
    e = refused(lp.pack, TINY, w, chunks=chunks)
    assert e.code == "R-MANIFEST" and "down_chunks" in str(e)


def test_the_down_chunks_keep_the_other_ops_packed_as_before(tiny):
    """Only the DOWN op's block order changes with chunks: every other element of the packed
    buffer is where it was, and the DOWN elements are a permutation of the unsplit ones."""
    w, _, _ = tiny
    a, b = lp.pack(TINY, w)["weights"], lp.pack(TINY, w, chunks=2)["weights"]
    per = lp.layer_elems(TINY)
    down = TINY.hidden * TINY.inter
    for layer in range(TINY.layers):
        lo, hi = layer * per, (layer + 1) * per
        assert torch.equal(a[lo:hi - down], b[lo:hi - down])
        assert torch.equal(a[hi - down:hi].sort().values, b[hi - down:hi].sort().values)
        assert not torch.equal(a[hi - down:hi], b[hi - down:hi])


def test_emulated_qk_norm_step_meets_issue_43s_criterion():
    """Qwen3's per-head q/k RMSNorm (dec_rope's headnorm) on the tiny shape, against the reference."""
    cfg = dataclasses.replace(TINY, name="qwen_tiny", qk_norm=True, rope_scaling=None, rms_eps=1e-6)
    w = random_weights(cfg, seed=8)
    ids = torch.randint(0, cfg.vocab, (1, 40), generator=torch.Generator().manual_seed(6))
    ref_logits = ref.prefill(w, cfg, ids)[0][0]
    em = Emulator(cfg, lp.pack(cfg, w), max_seq=64, grid=8)
    a = ref.agreement(_run(em, ids[0].tolist()), ref_logits)
    assert a["ok"] and a["worst_rel"] < 1e-2, a
    plain = Emulator(dataclasses.replace(cfg, qk_norm=False), lp.pack(cfg, w), max_seq=64)  # without the norm
    assert not ref.agreement(_run(plain, ids[0, :8].tolist()), ref_logits[:8])["ok"]


def test_a_misplaced_gate_up_interleave_is_caught(tiny):
    """The emulator reads the packed buffer as the kernel does: packing gate and up un-interleaved
    fails the criterion (so the test above checks the layout, not just the arithmetic)."""
    w, ids, ref_logits = tiny
    b = lp.pack(TINY, w)
    H, I = TINY.hidden, TINY.inter
    q, kv = TINY.heads * TINY.head_dim, TINY.kv_heads * TINY.head_dim
    for layer in range(TINY.layers):
        off = layer * lp.layer_elems(TINY) + (q + 2 * kv) * H + H * q
        p = f"model.layers.{layer}.mlp."
        b["weights"][off:off + 2 * I * H] = torch.cat([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]]).reshape(-1)
    em = Emulator(TINY, b, max_seq=128)
    assert not ref.agreement(_run(em, ids[0, :8].tolist()), ref_logits[:8])["ok"]


def _manifest(name):
    path = BIN / f"{name}.manifest.json"
    if not path.is_file():
        pytest.skip(f"{path} not built (tools/bazel build //kernels/decode/...)")
    return json.loads(path.read_text())


@pytest.mark.parametrize("model", ["llama3_1b", "llama3_8b", "qwen3_1_7b", "llama_tiny"])
def test_the_swap_changes_the_attention_package_only(model):
    split, simple = (_manifest(n) for n in (model, model + "_simple"))
    a = {i["name"]: i["package_digest"] for i in split["instances"]}
    b = {i["name"]: i["package_digest"] for i in simple["instances"]}
    assert a.keys() == b.keys() and len(a) == 9
    assert [n for n in a if a[n] != b[n]] == ["attn"]


@pytest.mark.parametrize("model", ["llama3_1b", "llama3_8b", "llama_tiny"])
def test_the_tile_size_is_the_weight_streams_fact(model):
    facts = _manifest(model)["facts"]
    assert facts["tile_elems"] == lp.TILE_ELEMS


@pytest.mark.parametrize("model", ["llama3_1b", "llama3_8b", "llama_tiny"])
def test_the_unfused_baseline_links_the_same_packages(model):
    """The baseline differs from the megakernel in the kernel file's `unfused` fact only."""
    fused, unfused = (_manifest(n) for n in (model, model + "_unfused"))
    assert [i["package_digest"] for i in fused["instances"]] == [i["package_digest"] for i in unfused["instances"]]
    assert (fused["facts"]["unfused"], unfused["facts"]["unfused"]) == (0, 1)


def test_every_model_links_the_same_packages():
    digests = {m["target"]: {i["name"]: i["package_digest"] for i in _manifest(m["target"])["instances"]}
               for m in lp.DECODE_MODELS.values()}
    assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1
    for key, m in lp.DECODE_MODELS.items():
        facts = _manifest(m["target"])["facts"]
        assert {f: facts[f] for f in lp.FACTS} == {f: m[f] for f in lp.FACTS}


@pytest.mark.parametrize("kw,code,words", [
    ({"attention": "flash"}, "R-PARAM", "attention"),
    ({"unfused": True, "attention": "simple"}, "R-PARAM", "unfused"),
    ({"unfused": 1}, "R-PARAM", "unfused"),
    ({"max_seq": 0}, "R-PARAM", "max_seq"),
    ({"prefill": "flash"}, "R-PARAM", "prefill"),
    ({"prefill": ["attention"]}, "R-PARAM", "prefill"),
    ({"attention_dir": 3}, "R-PARAM", "attention_dir"),
    ({"cfg": dataclasses.replace(TINY, head_dim=96, heads=8, hidden=768)}, "R-SHAPE", "prefill='megakernel'"),
    ({"max_seq": 4097}, "R-PARAM", "max_seq"),
    ({"weights": {}}, "R-CONFIG", "missing"),
    ({"weights": [1]}, "R-CONFIG", "not a dict"),
    ({"weights": "extra"}, "R-CONFIG", "unexpected"),
    ({"weights": "shape"}, "R-SHAPE", "expected"),
    ({"weights": "dtype"}, "R-DTYPE", "floating"),
    ({"weights": "not_tensor"}, "R-CONFIG", "not a tensor"),
    ({"cfg": dataclasses.replace(lm.MODELS["qwen3_1_7b"], layers=27)}, "R-CONFIG", "no decode megakernel"),
])
def test_the_backend_refuses_bad_arguments_before_any_cuda_call(kw, code, words):
    from llama_megakernel import MegakernelStep
    cfg = kw.pop("cfg", TINY)
    weights = kw.pop("weights", None)
    if weights is None or isinstance(weights, str):
        # full shapes for the tiny model only (a refused config is refused before its weights are read)
        damage, weights = weights, {n: torch.zeros(s if cfg is TINY else 1) for n, s in cfg.tensors().items()}
        first = next(iter(weights))
        if damage == "extra":
            weights["model.layers.99.mlp.up_proj.weight"] = torch.zeros(1)
        elif damage == "shape":
            weights[first] = torch.zeros(3)
        elif damage == "dtype":
            weights[first] = weights[first].long()
        elif damage == "not_tensor":
            weights[first] = 1.0
    e = refused(MegakernelStep, cfg, weights, **kw)
    assert e.code == code and words in str(e)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_without_a_gpu_the_backend_is_r_device():
    from llama_megakernel import MegakernelStep
    e = refused(MegakernelStep, TINY, {n: torch.zeros(s) for n, s in TINY.tensors().items()})
    assert e.code == "R-DEVICE"


@pytest.mark.parametrize("model,unfused", [("llama_tiny", False), ("llama_tiny_unfused", True), ("llama3_1b", False),
                                           ("qwen3_1_7b", False), ("llama_tiny_b3", False), ("llama3_1b_b8", False)])
def test_the_backends_launches_plan_against_the_built_manifest(model, unfused):
    """Every launch of a step (one fused, 2 + 5 layers unfused) packs against the manifest on the
    CPU: parameter names and types, the grid, each workspace's size."""
    from pipelink.runtime.launch_plan import plan_launch
    from pipelink.runtime.manifest import Manifest
    from llama_megakernel import PARAMS, launch_params
    m = Manifest.from_file(BIN / f"{model}.manifest.json") if (BIN / f"{model}.manifest.json").is_file() else \
        pytest.skip("bazel-bin/kernels/decode is not built")
    cfg = TINY if model.startswith("llama_tiny") else lm.MODELS["qwen3_1_7b" if model.startswith("qwen") else "llama3_2_1b"]
    assert set(m.lent) == PARAMS
    fake = {k: 0x10000 * (i + 1) for i, k in enumerate(("weights", "head", "norms", "embed", "inv_freq", "qk_norms"))}
    sizes = []
    for p in launch_params(cfg, fake, 0x900000, 0xA00000, 0xB00000, 0xC00000, 256, unfused):
        plan = plan_launch(m, p, builtins={"num_sms": 132, "resident_ctas": 132},
                           workspace=lambda w, n: sizes.append((w.name, n)) or 0x100000)
        assert plan.grid == (132, 1, 1) and plan.block == m.block and m.block[0] >= 13 * 32
    assert [n for n, _ in sizes].count("x") == (2 + 5 * cfg.layers if unfused else 1)  # x: the step's only
    got, b = dict(sizes), m.facts["batch"]
    assert b == (3 if model == "llama_tiny_b3" else 8 if model.endswith("_b8") else 1)
    assert got["sync"] == 4 * (34 + 5 * cfg.layers) and got["x"] == 4 * b * cfg.hidden and got["h"] == 2 * b * cfg.inter
    assert got["arr"] == 4 * b * cfg.kv_heads and got["ao"] == 2 * b * cfg.heads * cfg.head_dim


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_llama_megakernel_is_the_backend_with_the_models_weights():
    from llama import Llama
    m = Llama.from_config(TINY, seed=1)
    assert refused(m.megakernel, max_seq=64).code == "R-DEVICE"  # (past every argument check)
    assert refused(m.megakernel, attention="x").code == "R-PARAM"


class _TorchCausal:
    """Stands in for kernels/attention's entry on the CPU: causal GQA attention in fp32."""

    HEAD_DIMS = (128, 64)

    @staticmethod
    def load(*a, **kw):
        return None

    @staticmethod
    def attention(q, k, v, variant, kernel_dir=None):
        assert variant == "causal" and q.dtype == k.dtype == v.dtype == torch.bfloat16
        g = q.shape[1] // k.shape[1]
        o = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1), is_causal=True)
        return o.to(torch.bfloat16)


@pytest.mark.parametrize("cfg", [TINY, dataclasses.replace(TINY, qk_norm=True, name="tiny_qk")], ids=["llama", "qk_norm"])
def test_the_attention_prefill_fills_the_cache_as_the_reference(cfg, monkeypatch):
    """llama_prefill's pass (the causal kernel replaced by torch on the CPU): every layer's
    keys (after RoPE, and qk-norm for Qwen3) and values at positions 0 .. T-1 equal the fp32
    reference's cache within bf16 rounding; positions past T stay untouched."""
    import llama_prefill
    monkeypatch.setattr(llama_prefill, "_attention_module", lambda: _TorchCausal)
    w = random_weights(cfg, seed=4)
    ids = torch.randint(0, cfg.vocab, (1, 37), generator=torch.Generator().manual_seed(2))
    _, cache = ref.prefill(w, cfg, ids)
    shape = (cfg.layers, cfg.kv_heads, 48, cfg.head_dim)
    kc, vc = torch.full(shape, 7.0, dtype=torch.bfloat16), torch.full(shape, 7.0, dtype=torch.bfloat16)
    llama_prefill.AttentionPrefill(cfg, w, torch.device("cpu"))(ids[0], kc, vc)
    for i in range(cfg.layers):
        for got, want in ((kc[i, :, :37], cache.keys[i][0]), (vc[i, :, :37], cache.values[i][0])):
            err = (got.float() - want).abs().max() / want.abs().max()
            assert err < 2e-2, (i, float(err))
    assert bool((kc[:, :, 37:] == 7).all() and (vc[:, :, 37:] == 7).all())


def test_a_missing_causal_kernel_is_r_manifest_with_the_prefills_hint(monkeypatch):
    """Before the prefill touches the cache: the attention entry's refusal, re-hinted."""
    import llama_prefill
    from pipelink.runtime import LaunchError

    class Unbuilt(_TorchCausal):
        @staticmethod
        def load(*a, **kw):
            raise LaunchError("R-MANIFEST", "no kernel at bazel-bin/kernels/attention/attn_causal_d64.cubin", hint="x")

    monkeypatch.setattr(llama_prefill, "_attention_module", lambda: Unbuilt)
    shape = (TINY.layers, TINY.kv_heads, 8, TINY.head_dim)
    kc = torch.full(shape, 7.0, dtype=torch.bfloat16)
    p = llama_prefill.AttentionPrefill(TINY, random_weights(TINY, seed=1), torch.device("cpu"))
    e = refused(p, torch.arange(5), kc, kc.clone())
    assert e.code == "R-MANIFEST" and "attn_causal_d64" in e.hint and "prefill='megakernel'" in e.hint
    assert bool((kc == 7).all())


def test_host_code_makes_its_tensors_on_the_inputs_device(monkeypatch):
    """The reference and the attention prefill run beside the kernel with their inputs on the GPU:
    a tensor they create without `device=` would land on the CPU there (the first device run's
    smoke failed so). Here the default device is `meta` while the inputs are on the CPU, so any
    such tensor meets a CPU one and raises."""
    import llama_prefill
    monkeypatch.setattr(llama_prefill, "_attention_module", lambda: _TorchCausal)
    w = random_weights(TINY, seed=4)
    ids = torch.randint(0, TINY.vocab, (1, 9), generator=torch.Generator().manual_seed(2))
    shape = (TINY.layers, TINY.kv_heads, 16, TINY.head_dim)
    kc, vc = torch.zeros(shape, dtype=torch.bfloat16), torch.zeros(shape, dtype=torch.bfloat16)
    with torch.device("meta"):
        logits, cache = ref.prefill(w, TINY, ids)
        step = ref.decode_step(w, TINY, ids[:, 0], cache)
        llama_prefill.AttentionPrefill(TINY, w, torch.device("cpu"))(ids[0], kc, vc)
    assert logits.device.type == step.device.type == "cpu" and bool(torch.isfinite(step).all())


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_a_batch_no_link_serves_is_refused_before_anything_runs():
    """batch: an integer in 1 .. 32 that decode_models.bzl links for the model (DECODE_BATCHES), with
    the split-KV attention, fused; each refusal names what is linked."""
    from llama import Llama
    m = Llama.from_config(TINY, seed=1)
    for bad in (0, 33, 2.0, True, "3"):
        assert refused(m.megakernel, batch=bad).code == "R-PARAM"
    e = refused(m.megakernel, batch=5)
    assert e.code == "R-CONFIG" and "1, 3" in e.hint and "DECODE_BATCHES" in e.hint
    assert refused(m.megakernel, batch=3, attention="simple").code == "R-PARAM"
    assert refused(m.megakernel, batch=3, unfused=True).code == "R-PARAM"
    assert refused(m.megakernel, batch=3, max_seq=64).code == "R-DEVICE"  # (past every argument check)


def test_the_batched_links_are_the_tables():
    import llama_pack as lp
    assert lp.DECODE_BATCHES["llama3_1b_b8"] == ("llama3_2_1b", 8)
    assert lp.kernel_target(lm.MODELS["llama3_2_1b"], 8) == "llama3_1b_b8"
    assert lp.kernel_target(lm.MODELS["llama3_2_1b"], 32) == "llama3_1b_b32"
    assert lp.kernel_target(TINY, 3) == "llama_tiny_b3" and lp.kernel_target(TINY) == "llama_tiny"
    assert all(1 <= b <= lp.MAX_BATCH and m in lp.DECODE_MODELS for m, b in lp.DECODE_BATCHES.values())
