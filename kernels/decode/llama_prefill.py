"""A prompt's prefill for the decode megakernel: all but its last position in one pass, with the
serving attention's causal GQA kernel (//kernels/attention:attn_causal, or attn_causal_d64 for
head_dim 64) and bf16 matrix products, writing each layer's keys and values straight into the
megakernel's cache. The prompt's last token then runs through the megakernel itself, so the
first logits, the argmax and `state` come from the same kernel as every decode step's.

Precision: projections multiply bf16 by bf16 (fp32 accumulation); the residual stream, RMSNorm,
Qwen3's head norm and RoPE run in fp32; the cache holds bf16 (as the megakernel writes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipelink.runtime import LaunchError

import llama_reference as ref
from llama_models import LlamaConfig

ROOT = Path(__file__).resolve().parents[2]


def _attention_module():
    """kernels/attention's Python entry (the serving attention), imported where it lives."""
    path = str(ROOT / "kernels" / "attention")
    if path not in sys.path:
        sys.path.insert(0, path)
    import attention
    return attention


def expect_prefill(cfg: LlamaConfig) -> None:
    head_dims = _attention_module().HEAD_DIMS
    if cfg.head_dim not in head_dims:
        raise LaunchError("R-SHAPE", f"{cfg.name}: head_dim {cfg.head_dim} has no causal attention build "
                          f"(built: {', '.join(map(str, head_dims))})",
                          hint="pass prefill='megakernel' to run the prompt through the decode kernel position by position")


class AttentionPrefill:
    """prefill(ids [T], kcache, vcache): positions 0 .. T-1 of one sequence into the caches
    [layers, kv_heads, max_seq, head_dim] bf16. The bf16 copies of the weights are made on the
    first call and kept (the packed megakernel buffers tile them for the matrix-vector products)."""

    def __init__(self, cfg: LlamaConfig, weights: dict, device: torch.device, attention_dir=None):
        expect_prefill(cfg)
        self.cfg, self.source, self.device, self.attention_dir = cfg, weights, device, attention_dir
        self.w: dict[str, torch.Tensor] | None = None

    def _weights(self) -> dict[str, torch.Tensor]:
        if self.w is None:
            self.w = {k: v.to(self.device, torch.bfloat16) for k, v in self.source.items()}
        return self.w

    def ready(self):
        """The causal attention kernel, loaded (R-MANIFEST with this module's hint if not built);
        called before the step's state is touched."""
        attn = _attention_module()
        name = "attn_causal" + ("" if self.cfg.head_dim == 128 else f"_d{self.cfg.head_dim}")
        try:
            attn.load("causal", self.device.index or 0, kernel_dir=self.attention_dir, head_dim=self.cfg.head_dim)
        except LaunchError as e:
            raise LaunchError(e.code, "the prompt's prefill needs the serving attention's causal kernel: "
                              f"{e.diagnostics[0].message}",
                              hint=f"tools/bazel build //kernels/attention:{name}, or pass attention_dir= (or "
                                   "prefill='megakernel' to run the prompt through the decode kernel)") from None
        return attn

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor, kcache: torch.Tensor, vcache: torch.Tensor) -> None:
        attn = self.ready()
        cfg, w, T = self.cfg, self._weights(), ids.shape[0]
        hd, H, Hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
        cos, sin = ref.rope_cos_sin(cfg, torch.arange(T, device=self.device), torch.float32)
        x = w["model.embed_tokens.weight"][ids.to(self.device)].float()  # [T, hidden]

        def proj(h, name):  # bf16 x bf16 -> fp32
            return (h.to(torch.bfloat16) @ w[name].T).float()

        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            h = ref.rms_norm(x, w[p + "input_layernorm.weight"].float(), cfg.rms_eps)
            q = proj(h, p + "self_attn.q_proj.weight").view(T, H, hd)
            k = proj(h, p + "self_attn.k_proj.weight").view(T, Hkv, hd)
            v = proj(h, p + "self_attn.v_proj.weight").view(T, Hkv, hd)
            if cfg.qk_norm:
                q = ref.rms_norm(q, w[p + "self_attn.q_norm.weight"].float(), cfg.rms_eps)
                k = ref.rms_norm(k, w[p + "self_attn.k_norm.weight"].float(), cfg.rms_eps)
            q = ref.apply_rope(q.transpose(0, 1), cos, sin).to(torch.bfloat16)[None].contiguous()
            k = ref.apply_rope(k.transpose(0, 1), cos, sin).to(torch.bfloat16)[None].contiguous()
            v = v.transpose(0, 1).to(torch.bfloat16)[None].contiguous()
            kcache[i, :, :T].copy_(k[0])
            vcache[i, :, :T].copy_(v[0])
            o = attn.attention(q, k, v, "causal", kernel_dir=self.attention_dir)  # [1, H, T, hd]
            x = x + proj(o[0].transpose(0, 1).reshape(T, H * hd), p + "self_attn.o_proj.weight")
            h = ref.rms_norm(x, w[p + "post_attention_layernorm.weight"].float(), cfg.rms_eps)
            gate, up = proj(h, p + "mlp.gate_proj.weight"), proj(h, p + "mlp.up_proj.weight")
            x = x + proj(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj.weight")
