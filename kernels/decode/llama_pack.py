"""The decode megakernel's view of a Llama model (kernels/decode/dec.h): which linked target
serves a config, and the weights packed in the layout its weight stream walks.

    from llama_pack import kernel_target, pack
    target = kernel_target(cfg)                 # "llama3_1b" (a DECODE_MODELS entry's target)
    target = kernel_target(cfg, batch=8)        # "llama3_1b_b8" (a DECODE_BATCHES entry)
    bufs = pack(cfg, weights, device="cuda")    # weights, norms, head, embed, inv_freq

The packed layer weights (bf16, one buffer), layer after layer: W_qkv [q_dim + 2 kv_dim, hidden]
(q_proj, k_proj, v_proj rows), W_o [hidden, q_dim], W_gu [2 inter, hidden] with gate and up
rows interleaved in runs of r = tile_rows(hidden) (r gate rows, then the same r up rows: one
weight-stream tile), W_down [hidden, inter]. The norms are one f32 buffer [2 layers + 1, hidden]
(input_layernorm, post_attention_layernorm of each layer, then model.norm); the head is
lm_head.weight, or embed_tokens when the model ties them; inv_freq is the reference's RoPE
table (llama_reference.rope_inv_freq) in f32; qk_norms is Qwen3's q_norm and k_norm of each
layer, f32 [layers, 2, head_dim] (ones for a model without them: the kernel does not read it).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import torch

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError

import llama_reference as ref
from llama_models import LlamaConfig, expect_config

TILE_ELEMS = 16384  # dec_stream's fact tile_elems as built: a plain weight tile holds r rows with r k <= this
MAX_GROUP = 8       # dec_attn.h: query heads a KV head
FACTS = ("hidden", "layers", "heads", "kv_heads", "head_dim", "inter", "vocab", "qk_norm")
MAX_K = 14336       # dec_step's accept for hidden, inter, heads · head_dim: 8 rows of the widest fit shared memory
MAX_BATCH = 32      # [fact.batch] accept (dec.h MAX_BATCH)


def _table(name: str = "DECODE_MODELS") -> dict:
    """A dict literal of decode_models.bzl: DECODE_MODELS (the linked models) or DECODE_BATCHES
    (the batched links: target -> (model, batch))."""
    text = (Path(__file__).with_name("decode_models.bzl")).read_text()
    start = text.index(name + " = {")
    tree = ast.parse(text[start:text.index("\n}\n", start) + 3])
    return ast.literal_eval(tree.body[0].value)


DECODE_MODELS = _table()
DECODE_BATCHES = _table("DECODE_BATCHES")


def tile_rows(k: int, tile_elems: int = TILE_ELEMS) -> int:
    """dec.h tile_rows: the largest power of two r with r·k <= tile_elems (at least 1)."""
    r = 1
    while 2 * r * k <= tile_elems:
        r *= 2
    return r


def unsupported(cfg: LlamaConfig) -> list[str]:
    """Why the megakernel's packages cannot serve `cfg` (their contracts' accept ranges and
    dec_attn.h's group limit); empty when they can."""
    out = []
    if cfg.head_dim not in (64, 128):
        out.append(f"head_dim = {cfg.head_dim}: the attention packages accept 64 and 128")
    if cfg.group > MAX_GROUP:
        out.append(f"heads / kv_heads = {cfg.group}: the attention packages take at most {MAX_GROUP} query heads a KV head")
    for f in ("hidden", "inter"):
        v = getattr(cfg, f)
        if v % 256 or not 256 <= v <= MAX_K:
            out.append(f"{f} = {v}: the packages accept multiples of 256 in 256 .. {MAX_K} (the step's input rows)")
    q_dim = cfg.heads * cfg.head_dim
    if q_dim % 256 or q_dim > MAX_K:
        out.append(f"heads · head_dim = {q_dim}: the O projection's k must be a multiple of 256 up to {MAX_K}")
    if cfg.vocab % 64:
        out.append(f"vocab = {cfg.vocab}: the head's tiles need a multiple of 64")
    return out


def kernel_target(cfg: LlamaConfig, batch: int = 1) -> str:
    """The decode_models.bzl target whose facts are cfg's (and whose batch is `batch`); else
    R-CONFIG saying why none is."""
    expect_config(cfg)
    if batch != 1:
        model = kernel_target(cfg)
        linked = {b: t for t, (m, b) in DECODE_BATCHES.items() if DECODE_MODELS[m]["target"] == model}
        if batch not in linked:
            raise LaunchError("R-CONFIG", f"{cfg.name}: no decode megakernel of batch {batch} is linked",
                              hint=f"linked batches of {model}: 1" + "".join(f", {b}" for b in sorted(linked))
                              + f"; add ({model!r}'s model, {batch}) to DECODE_BATCHES in kernels/decode/"
                              f"decode_models.bzl (batch 1 .. {MAX_BATCH}: one more link of the same packages)")
        return linked[batch]
    facts = {f: getattr(cfg, f) for f in FACTS}
    for m in DECODE_MODELS.values():
        if all(m[f] == v for f, v in facts.items()):
            why = unsupported(cfg)
            if why:  # a table entry the packages cannot serve would have failed to link
                raise LaunchError("R-CONFIG", f"{cfg.name}: " + "; ".join(why), hint="see kernels/decode/README.md")
            return m["target"]
    why = unsupported(cfg)
    linked = "; ".join(f"{k} ({', '.join(f'{f} {m[f]}' for f in FACTS)})" for k, m in DECODE_MODELS.items())
    raise LaunchError("R-CONFIG", f"{cfg.name}: no decode megakernel is linked for its shape"
                      + (" and the packages cannot serve it: " + "; ".join(why) if why else ""),
                      hint=f"linked: {linked}" + ("" if why else "; add the model to kernels/decode/decode_models.bzl "
                                                  "(one more link of the same packages)"))


def expect_weights(cfg: LlamaConfig, weights) -> None:
    """R-CONFIG / R-SHAPE / R-DTYPE unless `weights` holds every tensor of cfg.tensors() (and no
    other), each a floating tensor of its shape, all on one device."""
    if not isinstance(weights, dict):
        raise LaunchError("R-CONFIG", f"weights is a {type(weights).__name__}, not a dict of tensors",
                          hint="pass Llama.weights or llama_weights.load_safetensors(...) (cfg.tensors() names)")
    want = cfg.tensors()
    missing = [n for n in want if n not in weights]
    extra = [n for n in weights if n not in want]
    if missing or extra:
        what = (f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}" if missing else "") + \
            ("; " if missing and extra else "") + (f"unexpected {', '.join(map(str, extra[:3]))}" if extra else "")
        raise LaunchError("R-CONFIG", f"weights do not match {cfg.name}: {what}",
                          hint="the names and shapes are cfg.tensors() (Hugging Face's layout)")
    devices = set()
    for n, shape in want.items():
        t = weights[n]
        if not isinstance(t, torch.Tensor):
            raise LaunchError("R-CONFIG", f"{n} is a {type(t).__name__}, not a tensor", hint="pass torch tensors")
        if tuple(t.shape) != shape:
            raise LaunchError("R-SHAPE", f"{n} is {list(t.shape)}, expected {list(shape)}",
                              hint="the names and shapes are cfg.tensors() (Hugging Face's layout, [out, in])")
        if not t.dtype.is_floating_point:
            raise LaunchError("R-DTYPE", f"{n} is {t.dtype}, not a floating-point tensor",
                              hint="pass float32, bfloat16 or float16 weights")
        devices.add(t.device)
    if len(devices) > 1:
        raise LaunchError("R-DEVICE", f"weights are on {len(devices)} devices: {sorted(map(str, devices))}",
                          hint="move every tensor to one device (or leave them on the CPU)")


def pack(cfg: LlamaConfig, weights: dict, device=None, tile_elems: int = TILE_ELEMS,
         chunks: int = 1) -> dict[str, torch.Tensor]:
    """The megakernel's buffers of `weights` (llama_weights' layout, any float dtype) on `device`,
    for a kernel whose weight stream has tiles of `tile_elems` and whose DOWN op's k is in
    `chunks` chunks (its manifest's facts tile_elems and down_chunks)."""
    expect_config(cfg)
    expect_weights(cfg, weights)
    H, L, I = cfg.hidden, cfg.layers, cfg.inter
    r = tile_rows(H, tile_elems)
    if I % r:
        raise LaunchError("R-CONFIG", f"inter = {I} is not a multiple of the gate/up tile's {r} rows",
                          hint="the packages accept inter in multiples of 256")
    if chunks < 1 or I % (256 * chunks):
        raise LaunchError("R-MANIFEST", f"down_chunks = {chunks}: inter = {I} is not {chunks} chunks of whole 256s",
                          hint="the kernel file's down_chunks comes from decode_models.bzl decode_down_chunks; rebuild it")
    rd = tile_rows(I // chunks, tile_elems)  # the DOWN tile's rows: blocks [rd, I / chunks] in tile order
    down = lambda t: t.reshape(H // rd, rd, chunks, I // chunks).transpose(1, 2).reshape(H, I)  # noqa: E731
    bf = torch.bfloat16
    parts, norms = [], []
    for i in range(L):
        p = f"model.layers.{i}."
        w = lambda n: weights[p + n]  # noqa: E731
        gate, up = w("mlp.gate_proj.weight"), w("mlp.up_proj.weight")
        gu = torch.stack([gate.reshape(I // r, r, H), up.reshape(I // r, r, H)], dim=1).reshape(2 * I, H)
        parts += [w("self_attn.q_proj.weight"), w("self_attn.k_proj.weight"), w("self_attn.v_proj.weight"),
                  w("self_attn.o_proj.weight"), gu, down(w("mlp.down_proj.weight"))]
        norms += [w("input_layernorm.weight"), w("post_attention_layernorm.weight")]
    norms.append(weights["model.norm.weight"])
    qk = [torch.stack([weights[f"model.layers.{i}.self_attn.{n}_norm.weight"].to(torch.float32) for n in "qk"])
          if cfg.qk_norm else torch.ones(2, cfg.head_dim) for i in range(L)]
    embed = weights["model.embed_tokens.weight"]
    head = embed if cfg.tie_word_embeddings else weights["lm_head.weight"]
    out = {
        "weights": torch.cat([t.to(bf).reshape(-1) for t in parts]),
        "norms": torch.stack([n.to(torch.float32) for n in norms]),
        "embed": embed.to(bf).contiguous(),
        "inv_freq": ref.rope_inv_freq(cfg, torch.float32),
        "qk_norms": torch.stack(qk).to(torch.float32),  # [layers, 2, head_dim] (ones when the model has none)
    }
    out["head"] = out["embed"] if cfg.tie_word_embeddings else head.to(bf).contiguous()
    return {k: v.to(device) for k, v in out.items()} if device is not None else out


def layer_elems(cfg: LlamaConfig) -> int:
    """dec.h Model::layer_elems: bf16 elements of one layer in the packed buffer."""
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return (q + 2 * kv) * cfg.hidden + cfg.hidden * q + 2 * cfg.inter * cfg.hidden + cfg.hidden * cfg.inter
