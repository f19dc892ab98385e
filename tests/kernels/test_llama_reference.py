"""kernels/decode/llama_reference.py against an independent, deliberately plain implementation:
no cache, every position recomputed from the start, RoPE as complex rotation with frequencies from
a scalar formula, attention one head and one position at a time (float64). Plus RoPE's llama3
scaling against hand-computed values, and its argument checks."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from conftest import ROOT
from helpers.entry_fakes import refused

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_models as lm  # noqa: E402
import llama_reference as ref  # noqa: E402
from llama_weights import random_weights  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# theta 100, head_dim 8: wavelengths 6.3, 19.9, 62.8, 198.7: the first kept (< 64 / 4), the next two
# interpolated, the last divided by 4 (> 64 / 1): every band of the llama3 scaling
SCALED = lm.Llama3RopeScaling(4.0, 1.0, 4.0, 64)
CONFIGS = {
    "llama_gqa_scaled": lm.LlamaConfig("t1", 64, 32, 2, 4, 2, 8, 48, 1e-5, 100.0, SCALED, False, 64),
    "llama_mha_tied": lm.LlamaConfig("t2", 64, 32, 2, 4, 4, 8, 40, 1e-5, 10000.0, None, True, 64),
    "qwen_mqa_qknorm": lm.LlamaConfig("t3", 64, 24, 2, 4, 1, 12, 40, 1e-6, 1e6, None, True, 64, qk_norm=True),
}


def scalar_inv_freq(cfg: lm.LlamaConfig) -> list[float]:
    out = []
    for j in range(cfg.head_dim // 2):
        f = cfg.rope_theta ** (-2 * j / cfg.head_dim)
        sc = cfg.rope_scaling
        if sc is not None:
            wavelength = 2 * math.pi / f
            if wavelength > sc.original_max_positions / sc.low_freq_factor:
                f = f / sc.factor
            elif wavelength >= sc.original_max_positions / sc.high_freq_factor:
                s = (sc.original_max_positions / wavelength - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
                f = (1 - s) * f / sc.factor + s * f
        out.append(f)
    return out


def _norm(x, w, eps):
    return w * x / math.sqrt(float((x * x).mean()) + eps)


def _rotate(v, pos, freqs):
    half = len(v) // 2
    z = torch.complex(v[:half], v[half:]) * torch.exp(1j * pos * torch.tensor(freqs, dtype=torch.float64))
    return torch.cat([z.real, z.imag])


def naive_last_logits(w: dict, cfg: lm.LlamaConfig, seq: list[int]) -> torch.Tensor:
    """Logits of the last position of `seq`, computed from scratch (float64)."""
    W = {k: v.double() for k, v in w.items()}
    # The frequency table is the reference's float32 one, as transformers' (an ulp of it moves the
    # logits by ~1e-8); its values are checked against scalar_inv_freq and by hand below.
    freqs = ref.rope_inv_freq(cfg).double().tolist()
    D, T = cfg.head_dim, len(seq)
    xs = [W["model.embed_tokens.weight"][t].clone() for t in seq]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = _norm(x, W[p + "input_layernorm.weight"], cfg.rms_eps)
            q = (W[p + "self_attn.q_proj.weight"] @ h).reshape(cfg.heads, D)
            k = (W[p + "self_attn.k_proj.weight"] @ h).reshape(cfg.kv_heads, D)
            v = (W[p + "self_attn.v_proj.weight"] @ h).reshape(cfg.kv_heads, D)
            if cfg.qk_norm:
                q = torch.stack([_norm(r, W[p + "self_attn.q_norm.weight"], cfg.rms_eps) for r in q])
                k = torch.stack([_norm(r, W[p + "self_attn.k_norm.weight"], cfg.rms_eps) for r in k])
            qs.append([_rotate(r, pos, freqs) for r in q])
            ks.append([_rotate(r, pos, freqs) for r in k])
            vs.append(list(v))
        new = []
        for pos in range(T):
            heads = []
            for hq in range(cfg.heads):
                kv = hq * cfg.kv_heads // cfg.heads
                scores = [float(qs[pos][hq] @ ks[s][kv]) / math.sqrt(D) for s in range(pos + 1)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                heads.append(sum(e[s] / sum(e) * vs[s][kv] for s in range(pos + 1)))
            x = xs[pos] + W[p + "self_attn.o_proj.weight"] @ torch.cat(heads)
            h = _norm(x, W[p + "post_attention_layernorm.weight"], cfg.rms_eps)
            g, u = W[p + "mlp.gate_proj.weight"] @ h, W[p + "mlp.up_proj.weight"] @ h
            new.append(x + W[p + "mlp.down_proj.weight"] @ (g / (1 + torch.exp(-g)) * u))
        xs = new
    head = W["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]
    return head @ _norm(xs[-1], W["model.norm.weight"], cfg.rms_eps)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cached_decode_matches_recomputation(name):
    cfg = CONFIGS[name]
    w = random_weights(cfg, seed=7, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, cfg.vocab, (2, 5), generator=g)
    logits, cache = ref.prefill(w, cfg, prompt, dtype=torch.float64)
    assert logits.shape == (2, 5, cfg.vocab) and cache.length == 5
    seqs = prompt.tolist()
    for b in range(2):
        torch.testing.assert_close(logits[b, -1], naive_last_logits(w, cfg, seqs[b]), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(logits[b, 2], naive_last_logits(w, cfg, seqs[b][:3]), rtol=1e-10, atol=1e-10)
    for _ in range(6):
        tokens = torch.randint(0, cfg.vocab, (2,), generator=g)
        step = ref.decode_step(w, cfg, tokens, cache, dtype=torch.float64)
        for b in range(2):
            seqs[b].append(int(tokens[b]))
            torch.testing.assert_close(step[b], naive_last_logits(w, cfg, seqs[b]), rtol=1e-10, atol=1e-10)
    assert cache.length == 11


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fp32_is_close_to_f64(name):
    cfg = CONFIGS[name]
    w = random_weights(cfg, seed=8, dtype=torch.float32)
    ids = torch.randint(0, cfg.vocab, (3, 7), generator=torch.Generator().manual_seed(2))
    a, _ = ref.prefill(w, cfg, ids)
    b, _ = ref.prefill(w, cfg, ids, dtype=torch.float64)
    assert a.dtype == torch.float32
    torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_sequences_of_a_batch_are_independent():
    cfg = CONFIGS["llama_gqa_scaled"]
    w = random_weights(cfg, seed=9, dtype=torch.float64)
    ids = torch.tensor([[1, 2, 3, 4], [9, 8, 7, 6]])
    both, cache = ref.prefill(w, cfg, ids, dtype=torch.float64)
    one, cache1 = ref.prefill(w, cfg, ids[1:], dtype=torch.float64)
    torch.testing.assert_close(both[1], one[0], rtol=0, atol=1e-12)
    s2 = ref.decode_step(w, cfg, torch.tensor([5, 5]), cache, dtype=torch.float64)
    s1 = ref.decode_step(w, cfg, torch.tensor([5]), cache1, dtype=torch.float64)
    torch.testing.assert_close(s2[1], s1[0], rtol=0, atol=1e-12)


def test_llama3_rope_scaling_hand_computed():
    # head_dim 6, theta 1e9: unscaled frequencies 1, 1e-3, 1e-6 (wavelengths 2π, 2000π, 2e6π).
    # original 8192, low 1, high 4, factor 8: wavelengths < 2048 kept, > 8192 divided by 8,
    # 2000π = 6283.19 between: s = (8192 / 6283.19 - 1) / 3 = 0.1012658, f = 1e-3 (0.898734 / 8 + 0.101266).
    cfg = lm.LlamaConfig("h", 8, 8, 1, 1, 1, 6, 8, 1e-5, 1e9, lm.Llama3RopeScaling(8.0, 1.0, 4.0, 8192), False, 16)
    got = ref.rope_inv_freq(cfg, torch.float64)
    torch.testing.assert_close(got, torch.tensor([1.0, 2.1360754e-4, 1.25e-7], dtype=torch.float64), rtol=1e-6, atol=0)
    assert ref.rope_inv_freq(cfg).dtype == torch.float32  # transformers' precision by default
    unscaled = lm.LlamaConfig(**{**cfg.__dict__, "rope_scaling": None})
    torch.testing.assert_close(ref.rope_inv_freq(unscaled, torch.float64), torch.tensor([1.0, 1e-3, 1e-6], dtype=torch.float64))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rope_table_matches_the_scalar_formula(name):
    cfg = CONFIGS[name]
    torch.testing.assert_close(ref.rope_inv_freq(cfg, torch.float64),
                               torch.tensor(scalar_inv_freq(cfg), dtype=torch.float64), rtol=1e-12, atol=0)
    if cfg.rope_scaling:
        got, plain = ref.rope_inv_freq(cfg, torch.float64), 100.0 ** (-torch.arange(4, dtype=torch.float64) / 4)
        assert got[0] == plain[0] and plain[1] / 4 < got[1] < plain[1] and got[3] == plain[3] / 4


def test_llama3_2_1b_rope_bands():
    # theta 5e5, head_dim 64: f_i = 5e5^(-i/32); wavelength < 2048 for i <= 14 (kept), > 8192 for i >= 18 (/ 32)
    cfg = lm.MODELS["llama3_2_1b"]
    base = 500000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    got = ref.rope_inv_freq(cfg, torch.float64)
    torch.testing.assert_close(got[:15], base[:15])
    torch.testing.assert_close(got[18:], base[18:] / 32)
    assert torch.all(got[15:18] < base[15:18]) and torch.all(got[15:18] > base[15:18] / 32)
    torch.testing.assert_close(got, torch.tensor(scalar_inv_freq(cfg), dtype=torch.float64))
    torch.testing.assert_close(ref.rope_inv_freq(cfg), got.float())


def test_bad_arguments_are_refused():
    cfg = CONFIGS["llama_mha_tied"]
    w = random_weights(cfg, seed=0)
    assert refused(ref.prefill, w, cfg, [[1, 2]]).code == "R-PARAM"
    assert refused(ref.prefill, w, cfg, torch.tensor([1, 2])).code == "R-PARAM"  # 1-D
    assert refused(ref.prefill, w, cfg, torch.tensor([[1.0, 2.0]])).code == "R-PARAM"
    assert refused(ref.prefill, w, cfg, torch.zeros(1, 0, dtype=torch.long)).code == "R-PARAM"
    assert "outside the vocabulary" in str(refused(ref.prefill, w, cfg, torch.tensor([[1, 64]])))
    assert refused(ref.prefill, w, cfg, torch.tensor([[-1]])).code == "R-PARAM"
    assert refused(ref.prefill, w, cfg, torch.tensor([[1]]), dtype=torch.bfloat16).code == "R-PARAM"
    assert refused(ref.prefill, w, "t2", torch.tensor([[1]])).code == "R-PARAM"
    assert "max_positions" in str(refused(ref.prefill, w, cfg, torch.ones(1, 65, dtype=torch.long)))
    _, cache = ref.prefill(w, cfg, torch.tensor([[1, 2], [3, 4]]))
    assert refused(ref.decode_step, w, cfg, torch.tensor([1]), cache).code == "R-SHAPE"
    assert refused(ref.decode_step, w, cfg, torch.tensor([1, 2]), ref.KVCache()).code == "R-PARAM"
    assert refused(ref.decode_step, w, cfg, torch.tensor([1, 2]), cache, dtype=torch.float64).code == "R-DTYPE"
    assert cache.length == 2  # nothing ran
    full = ref.prefill(w, cfg, torch.ones(2, 64, dtype=torch.long))[1]
    assert "max_positions" in str(refused(ref.decode_step, w, cfg, torch.tensor([1, 2]), full))
