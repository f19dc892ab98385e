"""kernels/decode/llama_weights.py: reading HF safetensors checkpoints (one file, a directory, a
sharded index) of tiny configs; every missing, unexpected, mis-shaped or unreadable tensor is a
coded error naming it."""

from __future__ import annotations

import builtins
import json
import sys

import pytest
import torch

from conftest import ROOT
from helpers.entry_fakes import refused

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_models as lm  # noqa: E402
import llama_weights as lw  # noqa: E402

safetensors_torch = pytest.importorskip("safetensors.torch")

TINY = lm.LlamaConfig("tiny", 64, 32, 2, 4, 2, 8, 48, 1e-5, 10000.0, None, False, 128)
TINY_QWEN = lm.LlamaConfig("tiny_qwen", 64, 32, 2, 4, 2, 16, 48, 1e-6, 1e6, None, True, 128, qk_norm=True)


def _save(path, tensors):
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


@pytest.mark.parametrize("cfg", [TINY, TINY_QWEN], ids=lambda c: c.name)
def test_single_file_roundtrip(cfg, tmp_path):
    w = lw.random_weights(cfg, seed=1, dtype=torch.bfloat16)
    _save(tmp_path / "model.safetensors", w)
    for where in (tmp_path, tmp_path / "model.safetensors", str(tmp_path)):
        got = lw.load_safetensors(where, cfg)
        assert got.keys() == w.keys() and all(torch.equal(got[k], w[k]) and got[k].dtype == torch.bfloat16 for k in w)
    f32 = lw.load_safetensors(tmp_path, cfg, dtype=torch.float32)
    assert f32["model.norm.weight"].dtype == torch.float32 and ("lm_head.weight" in f32) == (not cfg.tie_word_embeddings)


def _shard(tmp_path, w, n=3):
    names = sorted(w)
    wmap = {}
    for s in range(n):
        part = names[s::n]
        fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        _save(tmp_path / fname, {k: w[k] for k in part})
        wmap |= {k: fname for k in part}
    (tmp_path / lw.INDEX).write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": wmap}))
    return wmap


def test_sharded_index(tmp_path):
    w = lw.random_weights(TINY_QWEN, seed=2, dtype=torch.float16)
    _shard(tmp_path, w)
    got = lw.load_safetensors(tmp_path, TINY_QWEN, dtype=torch.float32)
    assert got.keys() == w.keys() and all(torch.equal(got[k], w[k].float()) for k in w)


def test_sharded_index_faults(tmp_path):
    w = lw.random_weights(TINY, seed=3)
    wmap = _shard(tmp_path, w)
    index = tmp_path / lw.INDEX
    # the index names a tensor its shard lacks
    bad = dict(wmap)
    bad["model.layers.0.mlp.up_proj.weight"] = next(v for k, v in wmap.items() if v != wmap["model.layers.0.mlp.up_proj.weight"])
    index.write_text(json.dumps({"weight_map": bad}))
    e = refused(lw.load_safetensors, tmp_path, TINY)
    assert e.code == "R-CONFIG" and "model.layers.0.mlp.up_proj.weight" in str(e)
    # a shard file outside the directory, a missing shard, a damaged index
    index.write_text(json.dumps({"weight_map": {**wmap, "model.norm.weight": "../x.safetensors"}}))
    assert "not a file name in that directory" in str(refused(lw.load_safetensors, tmp_path, TINY))
    index.write_text(json.dumps({"weight_map": {**wmap, "model.norm.weight": "gone.safetensors"}}))
    e = refused(lw.load_safetensors, tmp_path, TINY)
    assert e.code == "R-CONFIG" and "gone.safetensors" in str(e)
    for text in ("{", "[]", json.dumps({"weight_map": {"a": 1}}), json.dumps({"metadata": {}})):
        index.write_text(text)
        assert refused(lw.load_safetensors, tmp_path, TINY).code == "R-CONFIG"


def test_missing_unexpected_misshaped(tmp_path):
    w = lw.random_weights(TINY, seed=4)
    f = tmp_path / "m.safetensors"
    _save(f, {k: v for k, v in w.items() if k != "model.layers.1.self_attn.v_proj.weight"})
    e = refused(lw.load_safetensors, f, TINY)
    assert e.code == "R-CONFIG" and "model.layers.1.self_attn.v_proj.weight (shape [16, 32])" in str(e)
    _save(f, {**w, "model.layers.2.mlp.up_proj.weight": torch.zeros(48, 32)})
    e = refused(lw.load_safetensors, f, TINY)
    assert e.code == "R-CONFIG" and "model.layers.2.mlp.up_proj.weight" in str(e)
    _save(f, {**w, "model.layers.0.self_attn.q_proj.bias": torch.zeros(32)})
    assert "q_proj.bias" in str(refused(lw.load_safetensors, f, TINY))
    _save(f, {**w, "model.layers.0.mlp.down_proj.weight": torch.zeros(48, 32)})
    e = refused(lw.load_safetensors, f, TINY)
    assert e.code == "R-SHAPE" and "down_proj.weight in m.safetensors has shape [48, 32], expected [32, 48]" in str(e)
    _save(f, {**w, "model.norm.weight": torch.zeros(32, dtype=torch.int32)})
    assert refused(lw.load_safetensors, f, TINY).code == "R-DTYPE"


def test_tied_checkpoint_may_carry_an_equal_lm_head(tmp_path):
    w = lw.random_weights(TINY_QWEN, seed=5)
    f = tmp_path / "m.safetensors"
    _save(f, {**w, "lm_head.weight": w["model.embed_tokens.weight"].clone(),
              "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8)})  # derived buffers are skipped
    got = lw.load_safetensors(f, TINY_QWEN, dtype=torch.float32)
    assert "lm_head.weight" not in got and got.keys() == w.keys()
    _save(f, {**w, "lm_head.weight": torch.zeros(64, 32)})
    assert "differs from the embedding" in str(refused(lw.load_safetensors, f, TINY_QWEN))


def test_bad_files_and_arguments(tmp_path):
    assert "neither" in str(refused(lw.load_safetensors, tmp_path / "none", TINY))
    assert "neither" in str(refused(lw.load_safetensors, tmp_path, TINY))  # an empty directory
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not js")
    assert "cannot read" in str(refused(lw.load_safetensors, tmp_path / "junk.safetensors", TINY))
    (tmp_path / "short.safetensors").write_bytes(b"\x01")
    assert refused(lw.load_safetensors, tmp_path / "short.safetensors", TINY).code == "R-CONFIG"
    w = lw.random_weights(TINY, seed=6)
    _save(tmp_path / "model.safetensors", w)
    raw = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[: len(raw) // 2])  # truncated data
    assert refused(lw.load_safetensors, tmp_path / "cut.safetensors", TINY).code == "R-CONFIG"
    assert refused(lw.load_safetensors, tmp_path, "tiny").code == "R-PARAM"
    assert refused(lw.load_safetensors, tmp_path, TINY, dtype=torch.int8).code == "R-PARAM"
    assert refused(lw.load_safetensors, tmp_path, TINY, dtype="bf16").code == "R-PARAM"
    assert refused(lw.load_safetensors, 7, TINY).code == "R-PARAM"
    wrong = lm.LlamaConfig(**{**TINY.__dict__, "hidden": 48})
    assert refused(lw.load_safetensors, tmp_path, wrong).code == "R-SHAPE"


def test_missing_safetensors_package_is_a_coded_error(monkeypatch):
    real_import = builtins.__import__

    def no_safetensors(name, *a, **kw):
        if name == "safetensors" or name.startswith("safetensors."):
            raise ImportError("No module named 'safetensors'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    e = refused(lw.load_safetensors, "/nonexistent", TINY)
    assert e.code == "R-CONFIG" and "bash tools/setup.sh" in e.hint


def test_random_weights_follow_the_layout():
    w = lw.random_weights(TINY_QWEN, seed=0)
    assert {k: tuple(v.shape) for k, v in w.items()} == TINY_QWEN.tensors()
    assert torch.equal(w["model.norm.weight"], lw.random_weights(TINY_QWEN, seed=0)["model.norm.weight"])


def test_special_and_unprobeable_paths_are_coded(tmp_path):
    import os
    assert refused(lw.load_safetensors, "a" * 5000, TINY).code == "R-CONFIG"  # was an OSError from Path.is_file
    assert refused(lw.load_safetensors, "x\0y", TINY).code == "R-CONFIG"
    os.mkfifo(tmp_path / "fifo.safetensors")
    assert refused(lw.load_safetensors, tmp_path / "fifo.safetensors", TINY).code == "R-CONFIG"
    ck = tmp_path / "ck"
    ck.mkdir()
    os.mkfifo(ck / lw.INDEX)  # reading it would block forever
    assert "FIFO" in str(refused(lw.load_safetensors, ck, TINY))
    (ck / lw.INDEX).unlink()
    os.mkfifo(ck / "a.safetensors")  # a shard the index names, opened by safetensors: would block too
    (ck / lw.INDEX).write_text(json.dumps({"weight_map": {n: "a.safetensors" for n in TINY.tensors()}}))
    assert "not a regular file" in str(refused(lw.load_safetensors, ck, TINY))
    (ck / lw.INDEX).write_bytes(b"\xff\xfe")
    assert refused(lw.load_safetensors, ck, TINY).code == "R-CONFIG"


@pytest.mark.parametrize("value, dtype, words", [
    (float("nan"), torch.bfloat16, "holds NaN"),
    (float("inf"), torch.float32, "holds inf"),
    (1e5, torch.float16, "(as torch.float16) holds inf"),  # a bf16 value past fp16's 65504
])
def test_a_weight_that_is_no_finite_number_is_refused_at_load(tmp_path, value, dtype, words):
    """Loaded as it was, the first step computed NaN logits: refused only after the prefill ran
    (R-SHAPE naming the step backend, not the checkpoint)."""
    w = lw.random_weights(TINY, seed=1, dtype=torch.bfloat16)
    w["model.layers.1.mlp.down_proj.weight"][3, 5] = value
    _save(tmp_path / "model.safetensors", w)
    e = refused(lw.load_safetensors, tmp_path, TINY, dtype=dtype)
    assert e.code == "R-CONFIG" and "model.layers.1.mlp.down_proj.weight" in str(e) and words in str(e), str(e)
