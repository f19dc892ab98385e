"""The fp32 (or f64) torch reference of a LlamaConfig model with a KV cache (issue 43).

    logits, cache = prefill(weights, cfg, ids)          # ids [B, T] -> logits [B, T, vocab]
    logits = decode_step(weights, cfg, tokens, cache)   # tokens [B] -> logits [B, vocab]; cache grows by 1

It is what the decode megakernel (not written yet: issue 43) will be measured against (logits
within 2e-2 relative over 128 steps). Per layer, as transformers' LlamaForCausalLM /
Qwen3ForCausalLM: x += o_proj(attn(RoPE(norm_q(q)), RoPE(norm_k(k)), v)) on input_layernorm(x),
then x += down(silu(gate(h)) * up(h)) on h = post_attention_layernorm(x); logits =
lm_head(norm(x)). RoPE rotates element i with i + head_dim/2 of each head; its frequencies are
transformers' `_compute_llama3_parameters` where the config has llama3 scaling (rope_inv_freq).
Weights: llama_weights' layout (HF names, [out, in]); each is cast to the compute dtype where
it is used, so pass weights already in it (Llama does) to avoid copies.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError

from llama_models import LlamaConfig, expect_config

COMPUTE_DTYPES = (torch.float32, torch.float64)


def rope_inv_freq(cfg: LlamaConfig, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """[head_dim / 2] inverse frequencies theta^(-2i/d), with Llama 3's scaling where cfg has it:
    wavelengths 2π/f above original/low_freq_factor are divided by factor, those below
    original/high_freq_factor kept, and between them f = (1 - s)·f/factor + s·f with
    s = (original/wavelength - low) / (high - low). The operations and their order are
    transformers' (float32 by default, as it computes them)."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).to(dtype) / d))
    sc = cfg.rope_scaling
    if sc is None:
        return inv_freq
    low_wavelen = sc.original_max_positions / sc.low_freq_factor
    high_wavelen = sc.original_max_positions / sc.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / sc.factor, inv_freq)
    smooth = (sc.original_max_positions / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
    smoothed = (1 - smooth) * scaled / sc.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(cfg: LlamaConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [len(positions), head_dim] (each frequency twice: halves of the head)."""
    angles = positions.to(dtype)[:, None] * rope_inv_freq(cfg, torch.float32, positions.device).to(dtype)[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, head_dim] rotated by (cos, sin) [T, head_dim]: pairs (i, i + head_dim/2)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight.to(x.dtype) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def lm_head(weights: dict, cfg: LlamaConfig) -> torch.Tensor:
    """The output projection [vocab, hidden]: the embedding where the config ties them."""
    return weights["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]


@dataclass
class KVCache:
    """Keys (after RoPE) and values of every layer, [B, kv_heads, length, head_dim] each; one
    length for all B sequences (they are prefilled together, without padding)."""
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0


def _w(weights: dict, name: str, dtype: torch.dtype) -> torch.Tensor:
    return weights[name].to(dtype)


def _layer(weights, cfg: LlamaConfig, i: int, x, cos, sin, cache: KVCache, dtype):
    """One decoder layer on x [B, T, hidden] at the positions after cache's; appends to cache."""
    p = f"model.layers.{i}."
    B, T, _ = x.shape
    h = rms_norm(x, weights[p + "input_layernorm.weight"], cfg.rms_eps)
    q = (h @ _w(weights, p + "self_attn.q_proj.weight", dtype).T).view(B, T, cfg.heads, cfg.head_dim)
    k = (h @ _w(weights, p + "self_attn.k_proj.weight", dtype).T).view(B, T, cfg.kv_heads, cfg.head_dim)
    v = (h @ _w(weights, p + "self_attn.v_proj.weight", dtype).T).view(B, T, cfg.kv_heads, cfg.head_dim)
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head's head_dim, before RoPE
        q = rms_norm(q, weights[p + "self_attn.q_norm.weight"], cfg.rms_eps)
        k = rms_norm(k, weights[p + "self_attn.k_norm.weight"], cfg.rms_eps)
    q, k, v = (apply_rope(q.transpose(1, 2), cos, sin), apply_rope(k.transpose(1, 2), cos, sin), v.transpose(1, 2))
    if len(cache.keys) > i:
        cache.keys[i] = torch.cat([cache.keys[i], k], dim=2)
        cache.values[i] = torch.cat([cache.values[i], v], dim=2)
    else:
        cache.keys.append(k)
        cache.values.append(v)
    keys = cache.keys[i].repeat_interleave(cfg.group, dim=1)  # query head j reads kv head j // group
    values = cache.values[i].repeat_interleave(cfg.group, dim=1)
    S = keys.shape[2]
    scores = (q @ keys.transpose(-1, -2)) / math.sqrt(cfg.head_dim)  # [B, heads, T, S]
    # query t sits at position S - T + t and sees keys 0 .. S - T + t
    visible = torch.arange(S, device=q.device)[None, :] <= (torch.arange(T, device=q.device) + S - T)[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    attn = (scores.softmax(-1) @ values).transpose(1, 2).reshape(B, T, cfg.heads * cfg.head_dim)
    x = x + attn @ _w(weights, p + "self_attn.o_proj.weight", dtype).T
    h = rms_norm(x, weights[p + "post_attention_layernorm.weight"], cfg.rms_eps)
    gate = h @ _w(weights, p + "mlp.gate_proj.weight", dtype).T
    up = h @ _w(weights, p + "mlp.up_proj.weight", dtype).T
    return x + (torch.nn.functional.silu(gate) * up) @ _w(weights, p + "mlp.down_proj.weight", dtype).T


def _forward(weights, cfg: LlamaConfig, ids: torch.Tensor, cache: KVCache, dtype) -> torch.Tensor:
    B, T = ids.shape
    start = cache.length
    if start + T > cfg.max_positions:
        raise LaunchError("R-PARAM", f"positions {start} .. {start + T - 1} pass max_positions = {cfg.max_positions} "
                          f"of {cfg.name}", hint="shorten the prompt or generate fewer tokens")
    cos, sin = rope_cos_sin(cfg, torch.arange(start, start + T, device=ids.device), dtype)
    x = _w(weights, "model.embed_tokens.weight", dtype)[ids]
    for i in range(cfg.layers):
        x = _layer(weights, cfg, i, x, cos, sin, cache, dtype)
    return rms_norm(x, weights["model.norm.weight"], cfg.rms_eps) @ lm_head(weights, cfg).to(dtype).T


def _check(cfg, ids, dtype, what: str, ndim: int) -> None:
    expect_config(cfg)
    if dtype not in COMPUTE_DTYPES:
        raise LaunchError("R-PARAM", f"dtype = {dtype!r}: the reference computes in float32 or float64",
                          hint="pass dtype=torch.float32 (the default) or torch.float64")
    shape = "[B, T]" if ndim == 2 else "[B]"
    if not isinstance(ids, torch.Tensor) or ids.dim() != ndim or ids.dtype not in (torch.int64, torch.int32):
        raise LaunchError("R-PARAM", f"{what} must be an int64/int32 tensor {shape}, got "
                          f"{type(ids).__name__}{list(ids.shape) if isinstance(ids, torch.Tensor) else ''}",
                          hint=f"pass torch.tensor(..., dtype=torch.long) of shape {shape} (llama.Llama.generate takes lists)")
    if ids.numel() == 0:
        raise LaunchError("R-PARAM", f"{what} has shape {list(ids.shape)}: nothing to run", hint="pass at least one token")
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab:
        raise LaunchError("R-PARAM", f"{what} holds ids in [{int(ids.min())}, {int(ids.max())}], outside the "
                          f"vocabulary [0, {cfg.vocab - 1}] of {cfg.name}", hint="tokenize with the model's own tokenizer")


@torch.no_grad()
def prefill(weights: dict, cfg: LlamaConfig, ids: torch.Tensor, *, dtype: torch.dtype = torch.float32
            ) -> tuple[torch.Tensor, KVCache]:
    """(logits [B, T, vocab] of every prompt position, the cache of the T positions)."""
    _check(cfg, ids, dtype, "ids", 2)
    cache = KVCache()
    return _forward(weights, cfg, ids.long(), cache, dtype), cache


@torch.no_grad()
def decode_step(weights: dict, cfg: LlamaConfig, token_ids: torch.Tensor, cache: KVCache, *,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Logits [B, vocab] of one new token per sequence at position cache.length; the cache grows by one."""
    _check(cfg, token_ids, dtype, "token_ids", 1)
    if not isinstance(cache, KVCache) or len(cache.keys) != cfg.layers:
        raise LaunchError("R-PARAM", "cache is not a KVCache that prefill made for this config",
                          hint="start with `logits, cache = prefill(weights, cfg, ids)`")
    if token_ids.shape[0] != cache.batch:
        raise LaunchError("R-SHAPE", f"token_ids has {token_ids.shape[0]} sequences, the cache {cache.batch}",
                          hint="pass one token per sequence the cache was prefilled with")
    if cache.keys[0].dtype != dtype:
        raise LaunchError("R-DTYPE", f"the cache holds {cache.keys[0].dtype}, the step computes in {dtype}",
                          hint="pass the dtype prefill was given")
    return _forward(weights, cfg, token_ids.long()[:, None], cache, dtype)[:, 0]


def agreement(logits: torch.Tensor, ref_logits: torch.Tensor, *, rtol: float = 2e-2) -> dict:
    """Issue 43's correctness criterion for a backend's logits against this reference's, both
    [N, vocab] or [B, N, vocab] over the same token stream (teacher-forced: llama.forced_logits).
    "Within rtol relative" is read per step as max |logits - ref| <= rtol * max |ref| (the step's
    largest reference logit: elementwise relative error is meaningless near 0); greedy tokens
    must be equal wherever the reference's top-2 margin exceeds that same bound.
    Returns {"ok", "worst_rel" (the largest max|diff| / max|ref| of a step), "worst_step" ((b, n)),
    "token_mismatches" ([(b, n), ...] where the margin was decisive and the argmaxes differ)}."""
    if not (isinstance(logits, torch.Tensor) and isinstance(ref_logits, torch.Tensor)) or \
            logits.shape != ref_logits.shape or logits.dim() not in (2, 3) or logits.shape[-1] < 2:
        got = [list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (logits, ref_logits)]
        raise LaunchError("R-SHAPE", f"logits and ref_logits must be tensors of one shape [N, vocab] or [B, N, vocab], "
                          f"got {got[0]} and {got[1]}", hint="compare the same steps of the same batch")
    a, r = logits.double(), ref_logits.double()
    if a.dim() == 2:  # one sequence
        a, r = a[None], r[None]
    bound = rtol * r.abs().amax(-1)                      # [B, N]
    rel = (a - r).abs().amax(-1) / r.abs().amax(-1).clamp_min(torch.finfo(torch.float64).tiny)
    top2 = r.topk(2, dim=-1).values
    decisive = (top2[..., 0] - top2[..., 1]) > bound
    mismatch = decisive & (a.argmax(-1) != r.argmax(-1))
    worst = divmod(int(rel.argmax()), rel.shape[1])
    return {"ok": bool((rel <= rtol).all()) and not bool(mismatch.any()), "worst_rel": float(rel.max()),
            "worst_step": worst, "token_mismatches": [tuple(x) for x in mismatch.nonzero().tolist()]}
