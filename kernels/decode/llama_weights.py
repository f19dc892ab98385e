"""Weights of a LlamaConfig model from a Hugging Face safetensors checkpoint (issue 43).

    from llama_weights import load_safetensors
    w = load_safetensors("/ckpt/Llama-3.2-1B", cfg)          # a .safetensors file or a directory

Layout (ours = Hugging Face's): a plain dict from the HF tensor name to a contiguous CPU tensor
of `dtype`, every projection [out, in] row-major (y = x @ W.T): q_proj [heads·head_dim, hidden],
k_proj / v_proj [kv_heads·head_dim, hidden], o_proj [hidden, heads·head_dim], gate_proj /
up_proj [inter, hidden], down_proj [hidden, inter], norms [hidden] (q_norm / k_norm [head_dim]),
embed_tokens [vocab, hidden]. With tie_word_embeddings there is no "lm_head.weight": the
output projection is embed_tokens (llama_reference.lm_head). q_proj / k_proj rows are in HF's
order, where RoPE rotates element i with element i + head_dim/2 of each head ("rotate half").
LlamaConfig.tensors() lists every name and shape.

A checkpoint is one file, a directory with model.safetensors, or a directory with a sharded
model.safetensors.index.json. Missing, unexpected, mis-shaped or non-float tensors are
R-CONFIG / R-SHAPE / R-DTYPE naming the tensor, as is a tensor holding NaN or inf (in the
dtype asked for: an fp16 load of bf16 values past 65504); a missing safetensors package is R-CONFIG.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import torch

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError

from llama_models import LlamaConfig, expect_config
from pipelink.common.files import read_regular, why_unreadable
from pipelink.runtime.entry import expect_finite

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Older Llama checkpoints carry RoPE's inv_freq buffers; they are derived, and we compute our own.
_DERIVED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INDEX_MAX_BYTES = 64 << 20  # the largest published indexes (DeepSeek-V3: ~9 MB) with room to spare


def safetensors_module():
    """safetensors' safe_open; R-CONFIG (not an ImportError) where the package is missing."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise LaunchError("R-CONFIG", "the safetensors package is not installed, so no checkpoint can be read",
                          hint="bash tools/setup.sh (installs requirements.lock, which pins safetensors)") from None
    return safe_open, SafetensorError


def _kind(path: Path) -> str:
    """"file", "dir" or "" (missing, special, or a path that cannot be probed: too long, a NUL,
    a loop of links), without the OSError Path.is_file raises for some of them."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return ""
    return "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else ""


def _shards(path: Path) -> tuple[dict[str, Path], str]:
    """(tensor name -> file holding it, where); names are only known for an index here, else
    filled from the single file by the caller ({})."""
    kind = _kind(path)
    if kind == "file":
        return {}, str(path)
    if kind != "dir":
        raise LaunchError("R-CONFIG", f"{path} is neither a .safetensors file nor a checkpoint directory",
                          hint="pass the checkpoint directory (with model.safetensors or its index) or one file")
    index = path / INDEX
    if not os.path.lexists(index):
        if _kind(path / SINGLE) == "file":
            return {}, str(path / SINGLE)
        raise LaunchError("R-CONFIG", f"{path} holds neither {SINGLE} nor {INDEX}",
                          hint="download the checkpoint's *.safetensors files and its index")
    try:  # read_regular: an index that is a FIFO or a device is refused, not waited on
        doc = json.loads(read_regular(index, INDEX_MAX_BYTES).decode("utf-8"))
    except OSError as e:
        raise LaunchError("R-CONFIG", f"cannot read {index}: {why_unreadable(e)}",
                          hint="re-download the index file") from None
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON
        raise LaunchError("R-CONFIG", f"cannot read {index}: {e}", hint="re-download the index file") from None
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
        raise LaunchError("R-CONFIG", f"{index} has no weight_map of tensor name -> shard file name",
                          hint="re-download the index file")
    out = {}
    for name, shard in wmap.items():
        if Path(shard).name != shard or not shard:  # a shard lives beside its index, never elsewhere
            raise LaunchError("R-CONFIG", f"{index} puts {name} in {shard!r}, not a file name in that directory",
                              hint="re-download the index file")
        out[name] = path / shard
    return out, str(index)


def _open(safe_open, error, file: Path):
    if _kind(file) != "file":  # opening a FIFO shard would wait forever for a writer
        raise LaunchError("R-CONFIG", f"cannot read {file} as safetensors: it is missing or not a regular file",
                          hint="the index names a shard that is not there: download every *.safetensors file")
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (OSError, error, ValueError, RuntimeError) as e:
        raise LaunchError("R-CONFIG", f"cannot read {file} as safetensors: {e}",
                          hint="the file is missing, truncated or not a safetensors file; re-download it") from None


def load_safetensors(path, cfg: LlamaConfig, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Every tensor cfg.tensors() names, checked and converted to `dtype` (see the module doc)."""
    expect_config(cfg)
    if dtype not in FLOAT_DTYPES:
        raise LaunchError("R-PARAM", f"dtype = {dtype!r} is not a float dtype",
                          hint="pass torch.bfloat16 (the default), torch.float16, torch.float32 or torch.float64")
    if not isinstance(path, (str, Path)) or not str(path):
        raise LaunchError("R-PARAM", f"path = {path!r} is not a file or directory path",
                          hint="pass the checkpoint directory or its .safetensors file")
    safe_open, error = safetensors_module()
    where_of, where = _shards(Path(path))
    handles = {}
    if not where_of:  # one file: its own keys say what it holds
        f = Path(where)
        handles[f] = _open(safe_open, error, f)
        where_of = {k: f for k in handles[f].keys()}
    want = cfg.tensors()
    got_names = {n for n in where_of if not _DERIVED.fullmatch(n)}
    tied_head = cfg.tie_word_embeddings and "lm_head.weight" in got_names  # checked equal to the embedding below
    missing = [n for n in want if n not in got_names]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise LaunchError("R-CONFIG", f"{where} lacks {missing[0]} (shape {list(want[missing[0]])}){more} for {cfg.name}",
                          hint="the checkpoint is incomplete or of another model: compare its config.json")
    extra = sorted(got_names - set(want) - ({"lm_head.weight"} if tied_head else set()))
    if extra:
        more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
        raise LaunchError("R-CONFIG", f"{where} holds {extra[0]}{more}, which {cfg.name} has no use for",
                          hint="the checkpoint is of another model (more layers, biases, another architecture): "
                               "load it with its own config.json")
    out = {}
    for name in list(want) + (["lm_head.weight"] if tied_head else []):
        f = where_of[name]
        if f not in handles:
            handles[f] = _open(safe_open, error, f)
        try:
            t = handles[f].get_tensor(name)
        except (error, OSError, ValueError, RuntimeError, KeyError) as e:
            raise LaunchError("R-CONFIG", f"{f} does not hold {name} readably ({type(e).__name__}: {e})",
                              hint="the index and its shards disagree, or a shard is truncated: re-download them") from None
        shape = want.get(name, want["model.embed_tokens.weight"])
        if tuple(t.shape) != shape:
            raise LaunchError("R-SHAPE", f"{name} in {f.name} has shape {list(t.shape)}, expected {list(shape)} "
                              f"for {cfg.name}", hint="the checkpoint is of another model size: load it with its own config.json")
        if t.dtype not in FLOAT_DTYPES:
            raise LaunchError("R-DTYPE", f"{name} in {f.name} has dtype {t.dtype}, not a float dtype",
                              hint="quantized checkpoints are not read; use the bf16 / fp16 / fp32 release")
        out[name] = t.to(dtype).contiguous()
        expect_finite(f"{name} in {f.name}" + (f" (as {dtype})" if t.dtype != dtype else ""), out[name])
    if tied_head:
        head = out.pop("lm_head.weight")
        if not torch.equal(head, out["model.embed_tokens.weight"]):
            raise LaunchError("R-CONFIG", f"{where} holds an lm_head.weight that differs from the embedding, but "
                              f"{cfg.name} ties them (tie_word_embeddings)",
                              hint="load it with a config that has tie_word_embeddings = false")
    return out


def random_weights(cfg: LlamaConfig, seed: int = 0, dtype: torch.dtype = torch.float32,
                   scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Seeded random weights in the layout above, for tests (no trained model): projections
    N(0, scale² / fan_in), so activations stay O(1); norms near 1."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in cfg.tensors().items():
        if len(shape) == 1:
            out[name] = (1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)
        else:
            out[name] = (torch.randn(shape, generator=g, dtype=torch.float64) * scale / shape[1] ** 0.5).to(dtype)
    return out
