"""kernels/moe/moe_convert.py on small synthetic checkpoints (CPU).

Round trips: our-layout tensors are written in each checkpoint's Hugging Face layout (names,
transposes, gpt-oss's interleaved gate/up, FP8 blocks, MXFP4 nibbles) by code independent of the
converter, converted back, and compared exactly; the dequantizers against hand-computed values;
missing, unexpected and mis-shaped tensors are coded errors."""

from __future__ import annotations

import dataclasses
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from helpers.entry_fakes import refused  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_convert as mc  # noqa: E402
from moe_models import MODELS  # noqa: E402

BF16 = torch.bfloat16
P = "model.layers.5."


def small(name, **kw):
    dims = dict(hidden=32, inter=8, experts=4, top_k=2) | (
        dict(shared_inter=8, groups=2, topk_groups=1) if name == "deepseek_v3" else {})  # 2 groups of 2 experts
    return dataclasses.replace(MODELS[name], **(dims | kw))


def ours(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(*s, generator=g).to(BF16 if d == "bf16" else torch.float32)
            for n, (s, d) in m.tensors().items()}


def hf_layout(m, t, *, fp8_scale=None):
    """Our tensors as the published checkpoint names them (plus unrelated attention weights)."""
    I = m.inter
    sd = {P + "self_attn.q_proj.weight": torch.zeros(2, 2), P + "input_layernorm.weight": torch.zeros(2)}
    if m.name == "gpt_oss_120b":
        rows = torch.empty(m.experts, 2 * I, m.hidden, dtype=BF16)
        rows[:, 0::2], rows[:, 1::2] = t["w13"][:, :I], t["w13"][:, I:]   # gate j -> row 2j, up j -> 2j + 1
        b = torch.empty(m.experts, 2 * I, dtype=BF16)
        b[:, 0::2], b[:, 1::2] = t["b13"][:, :I], t["b13"][:, I:]
        sd |= {P + "mlp.router.weight": t["router_w"], P + "mlp.router.bias": t["router_b"],
               P + "mlp.experts.gate_up_proj": rows.transpose(1, 2).contiguous(),
               P + "mlp.experts.gate_up_proj_bias": b, P + "mlp.experts.down_proj": t["w2"].transpose(1, 2).contiguous(),
               P + "mlp.experts.down_proj_bias": t["b2"]}
        return sd
    mix = m.name == "mixtral_8x7b"
    mod = P + ("block_sparse_moe." if mix else "mlp.")
    names = ("w1", "w3", "w2") if mix else ("gate_proj", "up_proj", "down_proj")
    sd[mod + "gate.weight"] = t["router_w"]
    for e in range(m.experts):
        for n, w in zip(names, (t["w13"][e, :I], t["w13"][e, I:], t["w2"][e])):
            sd[f"{mod}experts.{e}.{n}.weight"] = w.clone()
    if m.name == "deepseek_v3":
        Is = m.shared_inter
        sd[mod + "gate.e_score_correction_bias"] = t["score_bias"]
        for n, w in zip(names, (t["shared_w13"][:Is], t["shared_w13"][Is:], t["shared_w2"])):
            sd[f"{mod}shared_experts.{n}.weight"] = w.clone()
    return sd


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_is_exact(name):
    m = small(name)
    t = ours(m)
    got = mc.convert_layer(m, hf_layout(m, t), P)
    assert list(got) == list(m.tensors())
    for n, v in t.items():
        assert got[n].dtype == v.dtype and torch.equal(got[n], v), n
    assert mc.convert_layer(m, hf_layout(m, t), P[:-1])["w13"].equal(t["w13"])  # prefix without the dot


def test_deepseek_fp8_blocks_are_dequantized():
    m = small("deepseek_v3")
    t = ours(m)
    sd = hf_layout(m, t)
    block = 4  # the published block is 128; 4 gives several blocks on these small weights
    g = torch.Generator().manual_seed(1)
    want = {}
    for k in [k for k in sd if k.endswith("proj.weight") and ".mlp." in k]:
        w = sd[k].float()
        q = (w * 4).to(torch.float8_e4m3fn)  # e4m3 values
        scale = 2.0 ** torch.randint(-6, 2, (-(-w.shape[0] // block), -(-w.shape[1] // block)), generator=g).float()
        sd[k], sd[k + "_scale_inv"] = q, scale
        want[k] = q.float() * scale.repeat_interleave(block, 0).repeat_interleave(block, 1)  # exact in bf16
    e0 = P + "mlp.experts.0.gate_proj.weight"
    sd[e0][4, 0] = torch.tensor(1.5).to(torch.float8_e4m3fn)
    sd[e0 + "_scale_inv"][1, 0] = 0.25
    want[e0] = sd[e0].float() * sd[e0 + "_scale_inv"].repeat_interleave(block, 0).repeat_interleave(block, 1)
    got = mc.convert_layer(m, sd, P, fp8_block=block)
    I = m.inter
    assert got["w13"][0, 4, 0].item() == 0.375  # by hand: 1.5 × 0.25 (row 4 lies in block row 1)
    for e in range(m.experts):
        base = f"{P}mlp.experts.{e}."
        assert torch.equal(got["w13"][e, :I].float(), want[base + "gate_proj.weight"])
        assert torch.equal(got["w13"][e, I:].float(), want[base + "up_proj.weight"])
        assert torch.equal(got["w2"][e].float(), want[base + "down_proj.weight"])
    assert torch.equal(got["shared_w2"].float(), want[P + "mlp.shared_experts.down_proj.weight"])
    assert torch.equal(got["router_w"], t["router_w"]) and torch.equal(got["score_bias"], t["score_bias"])


def test_fp8_dequantization_of_a_ragged_matrix():
    """130 × 20 with 128-blocks: the scale grid is 2 × 1 and row 128.. uses the second row."""
    w = torch.ones(130, 20).to(torch.float8_e4m3fn)
    d = mc.dequantize_fp8_blocks(w, torch.tensor([[0.5], [3.0]]))
    assert d.shape == (130, 20) and d.dtype == BF16
    assert d[127, 19].item() == 0.5 and d[128, 0].item() == 3.0 and d[129, 19].item() == 3.0


def test_mxfp4_dequantization_by_hand():
    blocks = torch.zeros(1, 1, 16, dtype=torch.uint8)  # one row of one block
    blocks[0, 0, 0], blocks[0, 0, 1] = 0x2F, 0x7A  # low nibble first: 0xF = -6, 0x2 = +1; 0xA = -1, 0x7 = +6
    v = mc.dequantize_mxfp4(blocks, torch.tensor([[128]], dtype=torch.uint8))  # e8m0 128: × 2^1
    assert v.shape == (1, 32) and v.dtype == BF16
    assert v[0, :4].tolist() == [-12.0, 2.0, -2.0, 12.0] and v[0, 4:].abs().sum() == 0
    assert mc.dequantize_mxfp4(blocks, torch.tensor([[120]], dtype=torch.uint8))[0, 0].item() == -6.0 / 128


def _pack_mxfp4(idx: torch.Tensor) -> torch.Tensor:
    """[..., 32k] nibble indices -> [..., k, 16] bytes, the even element in the low nibble."""
    lo, hi = idx[..., 0::2], idx[..., 1::2]
    return (lo | (hi << 4)).to(torch.uint8).view(*idx.shape[:-1], idx.shape[-1] // 32, 16)


def test_gpt_oss_mxfp4_checkpoint():
    m = small("gpt_oss_120b", hidden=64, inter=32)  # MXFP4 blocks run along H (gate/up) and I (down)
    E, H, I = m.experts, m.hidden, m.inter
    t = ours(m)
    sd = hf_layout(m, t)
    del sd[P + "mlp.experts.gate_up_proj"], sd[P + "mlp.experts.down_proj"]
    g = torch.Generator().manual_seed(2)
    lut = torch.tensor(mc.E2M1)
    gu_idx = torch.randint(0, 16, (E, 2 * I, H), generator=g)
    gu_scale = torch.randint(120, 131, (E, 2 * I, H // 32), generator=g)
    dn_idx = torch.randint(0, 16, (E, H, I), generator=g)
    dn_scale = torch.randint(120, 131, (E, H, I // 32), generator=g)
    sd |= {P + "mlp.experts.gate_up_proj_blocks": _pack_mxfp4(gu_idx),
           P + "mlp.experts.gate_up_proj_scales": gu_scale.to(torch.uint8),
           P + "mlp.experts.down_proj_blocks": _pack_mxfp4(dn_idx),
           P + "mlp.experts.down_proj_scales": dn_scale.to(torch.uint8)}
    gu = lut[gu_idx] * 2.0 ** (gu_scale.repeat_interleave(32, -1) - 127).float()   # [E, 2I, H], rows interleaved
    dn = lut[dn_idx] * 2.0 ** (dn_scale.repeat_interleave(32, -1) - 127).float()   # [E, H, I]
    got = mc.convert_layer(m, sd, P)
    assert torch.equal(got["w13"][:, :I].float(), gu[:, 0::2]) and torch.equal(got["w13"][:, I:].float(), gu[:, 1::2])
    assert torch.equal(got["w2"].float(), dn)
    assert torch.equal(got["b13"], t["b13"]) and torch.equal(got["b2"], t["b2"])


def test_bad_checkpoints_are_coded():
    m = small("qwen3_30b_a3b")
    t = ours(m)
    mod = P + "mlp.experts."
    cases = [
        (lambda sd: sd.pop(mod + "3.up_proj.weight"), "R-CONFIG", "no model.layers.5.mlp.experts.3.up_proj.weight"),
        (lambda sd: sd.update({mod + "4.up_proj.weight": torch.zeros(8, 32)}), "R-CONFIG", "experts.4.up_proj"),
        (lambda sd: sd.update({P + "mlp.shared_expert.up_proj.weight": torch.zeros(8, 32)}), "R-CONFIG", "shared_expert"),
        (lambda sd: sd.update({mod + "0.down_proj.weight": torch.zeros(8, 32)}), "R-SHAPE", "[32, 8]"),
        (lambda sd: sd.update({P + "mlp.gate.weight": torch.zeros(8, 32)}), "R-SHAPE", "[4, 32]"),
        (lambda sd: sd.update({mod + "0.gate_proj.weight": [[0.0]]}), "R-CONFIG", "not a tensor"),
        (lambda sd: sd.update({mod + "0.gate_proj.weight": torch.zeros(8, 32, dtype=torch.int8)}), "R-CONFIG", "int8"),
        (lambda sd: sd.update({mod + "0.gate_proj.weight": torch.zeros(8, 32).to(torch.float8_e4m3fn)}), "R-CONFIG",
         "without its weight_scale_inv"),
        (lambda sd: sd.update({mod + "0.gate_proj.weight_scale_inv": torch.ones(1, 1)}), "R-CONFIG", "weight_scale_inv"),
    ]
    for change, code, text in cases:
        sd = hf_layout(m, t)
        change(sd)
        e = refused(mc.convert_layer, m, sd, P)
        assert e.code == code and text in str(e), (code, text, str(e))
    assert refused(mc.convert_layer, m, hf_layout(m, t), "model.layers.6.").code == "R-CONFIG"  # another layer
    assert refused(mc.convert_layer, m, [1, 2], P).code == "R-CONFIG"
    assert refused(mc.convert_layer, m, hf_layout(m, t), 3).code == "R-PARAM"
    assert refused(mc.convert_layer, "llama", hf_layout(m, t), P).code == "R-PARAM"
    d = small("deepseek_v3")
    sd = hf_layout(d, ours(d))
    sd[P + "mlp.experts.1.up_proj.weight"] = sd[P + "mlp.experts.1.up_proj.weight"].to(torch.float8_e4m3fn)
    sd[P + "mlp.experts.1.up_proj.weight_scale_inv"] = torch.ones(3, 3)
    assert "expected [1, 1]" in str(refused(mc.convert_layer, d, sd, P))


@pytest.mark.parametrize("fp8_block", [0, -1, 1.5, "128", None, True, 2**70])
def test_fp8_block_is_checked_before_use(fp8_block):
    # 0 divided by zero, a str or None raised a TypeError, 2^70 overflowed in torch
    d = small("deepseek_v3")
    sd = hf_layout(d, ours(d))
    for k in [k for k in sd if k.endswith("proj.weight") and ".mlp." in k]:
        w = sd[k].float()
        sd[k], sd[k + "_scale_inv"] = w.to(torch.float8_e4m3fn), torch.ones(1, 1)
    assert refused(mc.convert_layer, d, sd, P, fp8_block=fp8_block).code == "R-PARAM"
    m = small("mixtral_8x7b")  # checked even where no weight is FP8
    assert refused(mc.convert_layer, m, hf_layout(m, ours(m)), P, fp8_block=fp8_block).code == "R-PARAM"


@pytest.mark.parametrize("name", list(MODELS))
def test_tensors_without_data_or_scale_are_coded(name):
    m = small(name)
    sd = hf_layout(m, ours(m))
    for k in [k for k in sd if k.startswith(P + "mlp.") or k.startswith(P + "block_sparse_moe.")]:
        meta = {**sd, k: sd[k].to("meta")}  # raised NotImplementedError deep in the copy
        e = refused(mc.convert_layer, m, meta, P)
        assert e.code == "R-DEVICE" and k in str(e), str(e)
        if sd[k].is_floating_point() and ".experts." not in k or "gate_up_proj" in k or "down_proj" in k:
            fp8 = {**sd, k: sd[k].to(torch.float8_e4m3fn)}  # an FP8 router or bias was cast without its scale
            assert refused(mc.convert_layer, m, fp8, P).code == "R-CONFIG", k


def test_fp8_scale_must_be_a_float():
    d = small("deepseek_v3")
    sd = hf_layout(d, ours(d))
    k = P + "mlp.experts.1.up_proj.weight"
    sd[k], sd[k + "_scale_inv"] = sd[k].to(torch.float8_e4m3fn), torch.ones(1, 1, dtype=torch.int32)
    e = refused(mc.convert_layer, d, sd, P)
    assert e.code == "R-CONFIG" and "weight_scale_inv has dtype torch.int32" in str(e), str(e)


@pytest.mark.filterwarnings("ignore:.*(nested|Sparse CSR) tensor")  # torch: prototype / beta APIs
@pytest.mark.parametrize("make", [lambda t: t.to_sparse(), lambda t: torch.nested.nested_tensor([t])],
                         ids=["sparse", "nested"])
def test_a_checkpoint_tensor_that_is_no_dense_tensor_is_r_layout(make):
    """A sparse router weight was converted into a sparse 'our layout' tensor; a nested one raised
    RuntimeError (NestedTensorImpl has no sizes)."""
    m = small("qwen3_30b_a3b")
    sd = hf_layout(m, ours(m))
    k = P + "mlp.gate.weight"
    e = refused(mc.convert_layer, m, {**sd, k: make(sd[k])}, P)
    assert e.code == "R-LAYOUT" and k in str(e), str(e)


@pytest.mark.parametrize("name", ["qwen3_30b_a3b", "mixtral_8x7b", "deepseek_v3"])
def test_expert_shapes_are_checked_before_the_outputs_are_allocated(name):
    """A model whose inter is far past the checkpoint's (the router weight still matching) made
    convert_layer allocate w13 [E, 2 * inter, H] first: a RuntimeError of ~1 TB from the CPU
    allocator, not the R-SHAPE naming the first expert tensor."""
    m = small(name)
    sd = hf_layout(m, ours(m))
    e = refused(mc.convert_layer, dataclasses.replace(m, inter=2**31 - 1), sd, P)
    assert e.code == "R-SHAPE" and "experts.0." in str(e) and "expected [2147483647, 32]" in str(e), str(e)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_converted_tensor_holding_nan_is_refused(name):
    """NaN in a checkpoint (or an FP8 NaN code) was converted and returned as it was."""
    m = small(name)
    sd = hf_layout(m, ours(m))
    k = next(k for k in sd if k.endswith(("gate.weight", "router.weight")))
    bad = sd[k].clone()
    bad[1, 2] = float("nan")
    e = refused(mc.convert_layer, m, {**sd, k: bad}, P)
    assert e.code == "R-CONFIG" and "router_w" in str(e) and "NaN" in str(e), str(e)
