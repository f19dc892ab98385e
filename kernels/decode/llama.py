"""Llama: a LlamaConfig model, its weights, and generation over a pluggable decode step (issue 43).

    from llama import Llama
    m = Llama.from_config("/ckpt/Llama-3.2-1B", weights="/ckpt/Llama-3.2-1B")
    new = m.generate([128000, 791, 6864], max_new_tokens=32)               # greedy, [32]
    new, logits = m.generate(ids, 32, greedy=False, temperature=0.7, top_k=50, seed=0, return_logits=True)

The default decode step is ReferenceStep: the fp32 torch reference on the CPU (or wherever
its weights are). The decode megakernel of issue 43 plugs in as `step=`
(llama_megakernel.MegakernelStep); a backend is any object with

    prefill(ids: LongTensor [B, T]) -> (logits [B, vocab] of the last position, state)
    decode(token_ids: LongTensor [B], state) -> logits [B, vocab]       (state advances one position)

generate checks every argument (R-PARAM with a hint) before any step runs, and checks each
logits tensor a step returns (R-SHAPE), so a backend that misbehaves is named, not trusted.
"""

from __future__ import annotations

import math
import operator
import os
import sys
from pathlib import Path

import torch

try:
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import LaunchError
from pipelink.runtime.entry import expect_dense, expect_finite

import llama_reference as ref
from llama_models import MODELS, LlamaConfig, config_from_hf
from llama_weights import FLOAT_DTYPES, load_safetensors, random_weights

SEED_MAX = 2**63 - 1


class ReferenceStep:
    """The decode step backend of the fp32 (or f64) reference: llama_reference.prefill / decode_step."""

    def __init__(self, cfg: LlamaConfig, weights: dict, dtype: torch.dtype = torch.float32):
        self.cfg, self.weights, self.dtype = cfg, weights, dtype

    def prefill(self, ids: torch.Tensor):
        logits, cache = ref.prefill(self.weights, self.cfg, ids, dtype=self.dtype)
        return logits[:, -1], cache

    def decode(self, token_ids: torch.Tensor, cache) -> torch.Tensor:
        return ref.decode_step(self.weights, self.cfg, token_ids, cache, dtype=self.dtype)


def _config(cfg_or_path) -> LlamaConfig:
    if isinstance(cfg_or_path, LlamaConfig):
        return cfg_or_path
    if isinstance(cfg_or_path, str) and cfg_or_path in MODELS:
        return MODELS[cfg_or_path]
    if isinstance(cfg_or_path, (str, os.PathLike, dict)):
        return config_from_hf(cfg_or_path)
    raise LaunchError("R-PARAM", f"cfg_or_path = {type(cfg_or_path).__name__} is not a config",
                      hint=f"pass a LlamaConfig, one of {', '.join(MODELS)}, or a config.json path / directory")


class Llama:
    def __init__(self, cfg: LlamaConfig, weights: dict, dtype: torch.dtype = torch.float32):
        self.cfg, self.dtype = cfg, dtype
        self.weights = {k: v.to(dtype) for k, v in weights.items()}  # once, not at every step

    @classmethod
    def from_config(cls, cfg_or_path, weights=None, *, dtype: torch.dtype = torch.float32, seed: int = 0) -> "Llama":
        """cfg_or_path: a LlamaConfig, a MODELS key, or a config.json (path, directory or dict).
        weights: a safetensors file or checkpoint directory (llama_weights.load_safetensors), a
        dict in that layout, or None for seeded random weights (tests; not a trained model).
        dtype: the reference's compute dtype, float32 or float64."""
        cfg = _config(cfg_or_path)
        if dtype not in ref.COMPUTE_DTYPES:
            raise LaunchError("R-PARAM", f"dtype = {dtype!r}: the reference computes in float32 or float64",
                              hint="pass dtype=torch.float32 (the default) or torch.float64")
        if weights is None:
            seed = _seed(seed)
            try:
                return cls(cfg, random_weights(cfg, seed, dtype), dtype)
            except (RuntimeError, MemoryError) as e:  # torch's allocator refuses a size past memory
                raise LaunchError("R-CONFIG", f"random weights of {cfg.describe()} do not fit in memory "
                                  f"({type(e).__name__}: {str(e)[:100]})",
                                  hint="random weights are for tests: use a small config") from None
        if isinstance(weights, (str, os.PathLike)):
            return cls(cfg, load_safetensors(Path(weights), cfg, dtype=dtype), dtype)
        if isinstance(weights, dict):
            want = cfg.tensors()
            for name, shape in want.items():
                t = weights.get(name)
                if isinstance(t, torch.Tensor):  # sparse / nested / meta: shape and the steps would raise
                    expect_dense(f"weights[{name!r}]", t, hint="pass dense weights with data, e.g. "
                                 "llama_weights.load_safetensors(...)'s dict")
                if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype not in FLOAT_DTYPES:
                    got = f"shape {list(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                    code = ("R-CONFIG" if not isinstance(t, torch.Tensor) else
                            "R-SHAPE" if tuple(t.shape) != shape else "R-DTYPE")
                    raise LaunchError(code, f"weights[{name!r}] is {got}, expected a float tensor of shape {list(shape)}",
                                      hint="pass llama_weights.load_safetensors(...)'s dict (LlamaConfig.tensors() "
                                           "lists names and shapes; dtypes bf16, fp16, fp32, fp64)")
                expect_finite(f"weights[{name!r}]", t)
            extra = sorted(set(weights) - set(want), key=repr)
            if extra:
                raise LaunchError("R-CONFIG", f"weights holds {extra[0]}, which {cfg.name} has no use for",
                                  hint="pass the weights of this very config")
            return cls(cfg, weights, dtype)
        raise LaunchError("R-PARAM", f"weights = {type(weights).__name__} is not a path, a dict or None",
                          hint="pass a safetensors file / checkpoint directory, a weights dict, or None (random)")

    def reference_step(self) -> ReferenceStep:
        return ReferenceStep(self.cfg, self.weights, self.dtype)

    def megakernel(self, **kw):
        """The decode megakernel of this model as a `step=` backend (llama_megakernel.MegakernelStep:
        max_seq=, attention=, control=, unfused=, kernel_dir=, device=, batch=); needs an sm_90a GPU."""
        from llama_megakernel import MegakernelStep
        return MegakernelStep(self.cfg, self.weights, **kw)

    def generate(self, prompt_ids, max_new_tokens, *, greedy=True, temperature=None, top_k=None, seed=None,
                 step=None, return_logits=False):
        """New token ids after the prompt: [N] for a 1-D prompt (a list of ints or a 1-D tensor),
        [B, N] for a 2-D one (B equal-length prompts); with return_logits also the logits each
        token was chosen from, [N, vocab] / [B, N, vocab] (float32 or the step's dtype).
        greedy: argmax (the first index on ties); else sampling with temperature (default 1.0)
        from the top_k logits (default all), reproducible with `seed`. step: the decode step
        backend (default: ReferenceStep; the megakernel: llama_megakernel.MegakernelStep)."""
        ids, squeeze = self._prompt(prompt_ids)
        n = _int("max_new_tokens", max_new_tokens, 0, None, "pass the number of tokens to generate (0 or more)")
        T = ids.shape[1]
        if T + n > self.cfg.max_positions:
            raise LaunchError("R-PARAM", f"prompt ({T}) + max_new_tokens ({n}) = {T + n} passes max_positions = "
                              f"{self.cfg.max_positions} of {self.cfg.name}",
                              hint=f"generate at most {self.cfg.max_positions - T} tokens after this prompt")
        greedy = _flag("greedy", greedy)
        return_logits = _flag("return_logits", return_logits)
        if greedy:
            for name, v in (("temperature", temperature), ("top_k", top_k), ("seed", seed)):
                if v is not None:
                    raise LaunchError("R-PARAM", f"greedy decoding does not use {name}= (got {v!r}); it would be "
                                      "ignored", hint=f"drop {name}=, or pass greedy=False to sample")
        else:
            temperature = 1.0 if temperature is None else _temperature(temperature)
            top_k = self.cfg.vocab if top_k is None else _int(
                "top_k", top_k, 1, self.cfg.vocab, f"pass top_k in [1, {self.cfg.vocab}] (or None: the whole vocabulary)")
            seed = None if seed is None else _seed(seed)
        step = self.reference_step() if step is None else _step(step)
        B = ids.shape[0]
        new = torch.empty(B, n, dtype=torch.long)
        chosen_from = []
        gen = torch.Generator().manual_seed(seed) if (not greedy and seed is not None) else None
        if n:
            logits, state = _prefilled(step.prefill(ids))
            for i in range(n):
                logits = _checked_logits(logits, B, self.cfg.vocab, "prefill" if i == 0 else "decode")
                chosen_from.append(logits)
                new[:, i] = _choose(logits, greedy, temperature, top_k, gen)
                if i + 1 < n:  # the last token is returned, not fed back
                    logits = step.decode(new[:, i].clone(), state)
        out = new[0] if squeeze else new
        if not return_logits:
            return out
        stacked = torch.stack(chosen_from, 1) if chosen_from else torch.empty(B, 0, self.cfg.vocab)
        return out, (stacked[0] if squeeze else stacked)

    def _prompt(self, prompt_ids) -> tuple[torch.Tensor, bool]:
        """(ids [B, T] int64, whether the prompt was 1-D)."""
        hint = "pass a non-empty list of token ids, a list of equal-length lists, or a 1-D / 2-D integer tensor"
        if isinstance(prompt_ids, torch.Tensor):
            if prompt_ids.is_meta:
                raise LaunchError("R-PARAM", "prompt_ids is a meta tensor (no data)", hint=hint)
            expect_dense("prompt_ids", prompt_ids, hint=hint)  # sparse / nested: min() and reshape raise
            if prompt_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8) \
                    or prompt_ids.dim() not in (1, 2):
                raise LaunchError("R-PARAM", f"prompt_ids is a {prompt_ids.dim()}-D {prompt_ids.dtype} tensor, not a "
                                  "1-D or 2-D integer tensor", hint=hint)
            ids = prompt_ids.detach().to("cpu", torch.int64)
        elif isinstance(prompt_ids, (list, tuple)):
            nested = bool(prompt_ids) and all(isinstance(r, (list, tuple)) for r in prompt_ids)
            rows = [list(r) for r in prompt_ids] if nested else [list(prompt_ids)]
            if any(len(r) != len(rows[0]) for r in rows):
                raise LaunchError("R-PARAM", f"prompt_ids' rows differ in length ({sorted({len(r) for r in rows})})",
                                  hint="prompts of one call have one length (no padding is modelled): split the call")
            for r in rows:
                for v in r:
                    if isinstance(v, bool) or not hasattr(v, "__index__"):
                        raise LaunchError("R-PARAM", f"prompt_ids holds {v!r} ({type(v).__name__}), not an int", hint=hint)
            try:
                ids = torch.tensor([[operator.index(v) for v in r] for r in rows], dtype=torch.int64)
            except (OverflowError, RuntimeError, ValueError, TypeError) as e:  # TypeError: a tensor of many ids
                raise LaunchError("R-PARAM", f"prompt_ids holds an id that fits no int64 (or is no single id): {e}", hint=hint) from None
            if not nested:
                ids = ids.reshape(1, -1)
            prompt_ids = ids if nested else ids[0]
        else:
            raise LaunchError("R-PARAM", f"prompt_ids = {type(prompt_ids).__name__} is not a list or tensor", hint=hint)
        squeeze = prompt_ids.dim() == 1
        ids = ids.reshape(1, -1) if squeeze else ids
        if ids.numel() == 0:
            raise LaunchError("R-PARAM", f"prompt_ids has shape {list(ids.shape) if not squeeze else [ids.shape[1]]}: "
                              "an empty prompt", hint="start the prompt with at least one token (e.g. the BOS id)")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.cfg.vocab:
            bad = lo if lo < 0 else hi
            raise LaunchError("R-PARAM", f"prompt_ids holds {bad}, outside the vocabulary [0, {self.cfg.vocab - 1}] "
                              f"of {self.cfg.name}", hint="tokenize with the model's own tokenizer")
        return ids.contiguous(), squeeze


def forced_logits(model: Llama, prompt_ids, tokens, *, step=None) -> torch.Tensor:
    """The logits a step backend gives for `tokens` [N] / [B, N] following the prompt, each
    step fed the given token rather than its own choice (teacher forcing), so that two backends
    are compared on one token stream (llama_reference.agreement): [N, vocab] / [B, N, vocab]."""
    ids, squeeze = model._prompt(prompt_ids)
    forced, squeeze_t = model._prompt(tokens)
    if forced.shape[0] != ids.shape[0] or squeeze != squeeze_t:
        raise LaunchError("R-SHAPE", f"tokens have {forced.shape[0]} rows, the prompt {ids.shape[0]}",
                          hint="pass one row of tokens per prompt (both 1-D, or both 2-D)")
    B, T, N = ids.shape[0], ids.shape[1], forced.shape[1]
    if T + N > model.cfg.max_positions:
        raise LaunchError("R-PARAM", f"prompt ({T}) + tokens ({N}) pass max_positions = {model.cfg.max_positions}",
                          hint="compare fewer steps")
    step = model.reference_step() if step is None else _step(step)
    logits, state = _prefilled(step.prefill(ids))
    out = []
    for i in range(N):
        out.append(_checked_logits(logits, B, model.cfg.vocab, "prefill" if i == 0 else "decode"))
        if i + 1 < N:
            logits = step.decode(forced[:, i].clone(), state)
    stacked = torch.stack(out, 1)
    return stacked[0] if squeeze else stacked


def _int(name, v, lo, hi, hint) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__") or isinstance(v, torch.Tensor):
        raise LaunchError("R-PARAM", f"{name} = {v!r} ({type(v).__name__}) must be an int", hint=hint)
    i = operator.index(v)
    if i < lo or (hi is not None and i > hi):
        raise LaunchError("R-PARAM", f"{name} = {i} is out of range [{lo}, {hi if hi is not None else 'inf'}]", hint=hint)
    return i


def _seed(v) -> int:
    return _int("seed", v, 0, SEED_MAX, f"pass an int in [0, {SEED_MAX}] (or None: not reproducible)")


def _flag(name, v) -> bool:
    if not isinstance(v, bool):
        raise LaunchError("R-PARAM", f"{name} = {v!r} ({type(v).__name__}) must be True or False",
                          hint=f"pass {name}=True or {name}=False")
    return v


def _temperature(v) -> float:
    try:  # float(): an int past float's range is no finite number (math.isfinite would raise)
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v)) and v > 0
    except OverflowError:
        ok = False
    if not ok:
        raise LaunchError("R-PARAM", f"temperature = {v!r:.40} must be a finite number > 0 when sampling",
                          hint="pass e.g. temperature=0.7, or greedy=True for the argmax (temperature 0)")
    return float(v)


def _step(step):
    for method in ("prefill", "decode"):
        if not callable(getattr(step, method, None)):
            raise LaunchError("R-PARAM", f"step = {type(step).__name__} has no {method}() method",
                              hint="a decode step backend has prefill(ids [B, T]) -> (logits [B, vocab], state) and "
                                   "decode(token_ids [B], state) -> logits [B, vocab] (see llama.ReferenceStep)")
    return step


def _prefilled(result):
    """(logits, state) of a step's prefill; R-SHAPE for anything else (not unpacked blindly)."""
    if not isinstance(result, tuple) or len(result) != 2:
        got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise LaunchError("R-SHAPE", f"the decode step's prefill returned {got}, expected (logits [B, vocab], state)",
                          hint="the step backend breaks the interface llama.ReferenceStep documents")
    return result


def _checked_logits(logits, B: int, vocab: int, what: str) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (B, vocab) or not logits.is_floating_point() \
            or logits.is_meta:
        got = f"shape {list(logits.shape)} {logits.dtype}" if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise LaunchError("R-SHAPE", f"the decode step's {what} returned {got}, expected float logits [{B}, {vocab}]",
                          hint="the step backend breaks the interface llama.ReferenceStep documents")
    out = logits.detach().to("cpu")
    # NaN or +inf has no argmax or probability; -inf masks a token, but not every token of a row
    if out.isnan().any() or out.isposinf().any() or out.isneginf().all(-1).any():
        raise LaunchError("R-SHAPE", f"the decode step's {what} returned logits with NaN, +inf or a row of only -inf",
                          hint="the step backend computed garbage (check its weights and its dtype's range)")
    return out


def _choose(logits: torch.Tensor, greedy: bool, temperature: float, top_k: int, gen) -> torch.Tensor:
    if greedy:
        return logits.argmax(-1)
    # shifted by the row's max first: softmax is unchanged, and a tiny temperature cannot turn the
    # logits into inf - inf = NaN (the max becomes 0, the others fall to -inf at worst)
    scaled = (logits.double() - logits.double().amax(-1, keepdim=True)) / temperature
    if top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # ties at the k-th value all stay
    return torch.multinomial(scaled.softmax(-1), 1, generator=gen)[:, 0]
