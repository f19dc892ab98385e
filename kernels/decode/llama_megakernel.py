"""The decode megakernel (kernels/decode/dec.h) as a decode-step backend of llama.Llama.generate.

    from llama import Llama
    from llama_megakernel import MegakernelStep
    m = Llama.from_config("llama3_2_1b", weights="/ckpt/Llama-3.2-1B")
    step = MegakernelStep(m.cfg, m.weights, max_seq=4096)           # //kernels/decode:llama3_1b
    new = m.generate(prompt, 64, step=step)
    g = step.graph()          # one decode step as a CUDA graph: step.set_token(t); g.replay()

    step8 = MegakernelStep(m.cfg, m.weights, max_seq=4096, batch=8)  # //kernels/decode:llama3_1b_b8
    new = m.generate(prompts, 64, step=step8)                          # prompts [8, T]

Batch 1, or `batch` sequences a step where decode_models.bzl links that batch (DECODE_BATCHES;
the split-KV attention, fused). The kernel is the one decode_models.bzl links for the config's shape (llama_pack.kernel_target),
read from bazel-bin/kernels/decode (or `kernel_dir`); `attention="simple"` takes the build with
the simple attention package, `control=True` the single-unit control cubin, `unfused=True` the
baseline build launched once per op (2 + 5 layers launches a step). A prompt's positions
but its last run in one pass through the serving attention's causal kernel (llama_prefill,
read from bazel-bin/kernels/attention or `attention_dir`), its last token through the
megakernel; `prefill="megakernel"` runs every prompt position through the decode kernel instead.

State on the device: the packed weights (llama_pack.pack), the KV cache [layers, kv_heads,
max_seq, head_dim] bf16 (dec_attn.h; [batch, layers, ...] at batch > 1), logits f32 [vocab]
([batch, vocab]) and `state` int32 [4 batch] (each sequence's token and position, and the error
flag): the kernel reads the tokens and positions, writes the argmax tokens and positions + 1, so
CUDA-graph replays chain greedy steps with no host work. A batch's sequences may stand at
different positions: prefill takes equal-length prompts [B, T] or a list of B 1-D prompts.
Every bad argument is a coded error with a hint, raised before anything is launched.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch

try:
    from pipelink.runtime import Kernel, LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime import Kernel, LaunchError

from pipelink.runtime.entry import device_index, expect_cubin, expect_manifest, flag, integer, kernel_file, optional_dir

import llama_pack
import llama_prefill
from llama_models import LlamaConfig, expect_config

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"weights", "head", "norms", "embed", "logits", "state", "eps", "kcache", "vcache", "max_seq", "inv_freq",
          "op_begin", "op_end", "qk_norms"}
ATTENTION = ("split", "simple")
PREFILL = ("attention", "megakernel")
ST_TOKEN, ST_POS, ST_ERROR, ST_WORDS = 0, 1, 2, 4


def launch_params(cfg: LlamaConfig, bufs: dict, logits, state, kcache, vcache, max_seq: int,
                  unfused: bool = False) -> list[dict]:
    """The parameters of each launch of one step: fused, one launch of every op; unfused (the
    baseline), one launch per op in order, each with its op range."""
    ops = 2 + 5 * cfg.layers
    common = dict(weights=bufs["weights"], head=bufs["head"], norms=bufs["norms"], embed=bufs["embed"],
                  inv_freq=bufs["inv_freq"], qk_norms=bufs["qk_norms"], logits=logits, state=state,
                  eps=float(cfg.rms_eps),
                  kcache=kcache, vcache=vcache, max_seq=max_seq)
    ranges = [(k, k + 1) for k in range(ops)] if unfused else [(0, ops)]
    return [dict(common, op_begin=b, op_end=e) for b, e in ranges]


def default_kernel_dir() -> Path:
    """Where the decode builds are read from without kernel_dir: $PIPELINK_DECODE_DIR, else
    bazel-bin/kernels/decode of this checkout."""
    return Path(os.environ.get("PIPELINK_DECODE_DIR") or ROOT / "bazel-bin" / "kernels" / "decode")


class MegakernelStep:
    """prefill(ids [B, T] or B 1-D prompts) -> (logits [B, vocab], state); decode(tokens [B], state)
    -> logits [B, vocab] (B = batch)."""

    def __init__(self, cfg: LlamaConfig, weights: dict, *, max_seq: int | None = None, attention: str = "split",
                 control: bool = False, unfused: bool = False, kernel_dir=None, device: int = 0,
                 kernel_files=None, prefill: str = "attention", attention_dir=None, state_words: int = 4,
                 batch: int = 1):
        expect_config(cfg)
        batch = integer("batch", batch, 1, llama_pack.MAX_BATCH,
                        hint=f"sequences a step: 1 .. {llama_pack.MAX_BATCH} (a linked batch of decode_models.bzl)")
        if prefill not in PREFILL:
            raise LaunchError("R-PARAM", f"prefill = {prefill!r} is not a prefill path",
                              hint=f"pass one of {', '.join(map(repr, PREFILL))}")
        if prefill == "attention":
            llama_prefill.expect_prefill(cfg)
        if attention not in ATTENTION:
            raise LaunchError("R-PARAM", f"attention = {attention!r} is not a linked attention package",
                              hint=f"pass one of {', '.join(map(repr, ATTENTION))}")
        control, unfused, device = flag("control", control), flag("unfused", unfused), device_index(device)
        if unfused and attention != "split":
            raise LaunchError("R-PARAM", "unfused=True is built with the split-KV attention only",
                              hint="pass attention='split' with unfused=True")
        if batch > 1 and (unfused or attention != "split"):
            raise LaunchError("R-PARAM", f"batch = {batch} is linked with the split-KV attention, fused, only",
                              hint="pass attention='split' and unfused=False with batch > 1 (the simple package "
                                   "accepts batch 1)")
        kdir = optional_dir("kernel_dir", kernel_dir)
        adir = optional_dir("attention_dir", attention_dir)
        max_seq = cfg.max_positions if max_seq is None else max_seq
        self.max_seq = integer("max_seq", max_seq, 1, min(cfg.max_positions, 2**31 - 1),
                               hint=f"the KV cache's capacity in positions: 1 .. {cfg.max_positions} (max_positions)")
        state_words = integer("state_words", state_words, 4, 2**28, hint="4, or the words a timeline build's stamps need")
        target = llama_pack.kernel_target(cfg, batch) + ("_unfused" if unfused else "" if attention == "split" else "_simple")
        llama_pack.expect_weights(cfg, weights)
        if not torch.cuda.is_available():
            raise LaunchError("R-DEVICE", "no CUDA device: the decode megakernel runs on an sm_90a GPU",
                              hint="run on the GPU machine (the reference step runs anywhere)")
        d = kdir or default_kernel_dir()
        cubin = d / (f"{target}.control.cubin" if control else f"{target}.cubin")
        manifest_path = d / f"{target}.manifest.json"
        build = f"tools/bazel build //kernels/decode:{target} --output_groups=+control"
        if kernel_files is not None:  # another link of the same composition (the counterexample's)
            if not (isinstance(kernel_files, tuple) and len(kernel_files) == 2 and
                    all(isinstance(f, (str, os.PathLike)) for f in kernel_files)):
                raise LaunchError("R-PARAM", f"kernel_files = {kernel_files!r} is not (cubin, manifest)",
                                  hint="pass two paths, or leave kernel_files out")
            cubin, manifest_path = (Path(f) for f in kernel_files)
        kernel_file(cubin, hint=build)
        manifest = expect_manifest(manifest_path, f"//kernels/decode:{target}", params=PARAMS,
                                   facts={**{f: getattr(cfg, f) for f in llama_pack.FACTS}, "unfused": int(unfused),
                                          "batch": batch},
                                   hint=build)
        tile_elems = manifest.facts.get("tile_elems")
        if not isinstance(tile_elems, int) or max(cfg.hidden, cfg.inter, cfg.heads * cfg.head_dim) > tile_elems:
            raise LaunchError("R-MANIFEST", f"{target}: tile_elems = {tile_elems!r} cannot hold a row of this model",
                              hint=build)
        # (a build from before the fact has its DOWN op's k whole; llama_pack refuses a count inter cannot take)
        chunks = manifest.facts.get("down_chunks", 1)
        if not isinstance(chunks, int):
            raise LaunchError("R-MANIFEST", f"{target}: down_chunks = {chunks!r} is not a chunk count", hint=build)
        expect_cubin(cubin, hint=build)
        self.cfg, self.target, self.device, self.batch = cfg, target, device, batch
        dev = torch.device("cuda", device)
        self.bufs = llama_pack.pack(cfg, weights, device=dev, tile_elems=tile_elems, chunks=chunks)
        lead = (batch,) if batch > 1 else ()
        shape = (*lead, cfg.layers, cfg.kv_heads, self.max_seq, cfg.head_dim)
        self.kcache = torch.zeros(shape, dtype=torch.bfloat16, device=dev)
        self.vcache = torch.zeros(shape, dtype=torch.bfloat16, device=dev)
        self.logits = torch.full((*lead, cfg.vocab), float("nan"), dtype=torch.float32, device=dev)
        # state: each sequence's token, position (and word 2: the error flag), 4 words a sequence;
        # a timeline build (dec_step.cu DEC_TRACE, batch 1) stamps its ops past them, in a buffer
        # of state_words
        self.state = torch.zeros(max(state_words, ST_WORDS * batch), dtype=torch.int32, device=dev)
        self.manifest_path, self.unfused = manifest_path, unfused
        self.kernel = Kernel.load(cubin, manifest_path, device)
        self.sessions = self._open(self.kernel)
        self.positions = [0] * batch
        self.prefill_pass = (llama_prefill.AttentionPrefill(cfg, weights, dev, adir)
                             if prefill == "attention" else None)

    def _open(self, kernel, workspaces=None) -> list:
        return [kernel.open(workspaces=workspaces, **p)
                for p in launch_params(self.cfg, self.bufs, self.logits, self.state, self.kcache, self.vcache,
                                       self.max_seq, self.unfused)]

    def sharing_buffers(self, cubin, workspaces=None) -> "MegakernelStep":
        """This step with another cubin of the same link (its single-unit control) launched on the
        same weights, cache, logits and state: a comparison of the two differs in code alone, not
        in where the 2.5 GB of weights landed in memory. `workspaces` (another kernel's
        `workspace_buffers()`) lends that kernel's workspaces too, else the new one has its own."""
        cubin = Path(cubin)
        expect_cubin(cubin, hint=f"tools/bazel build //kernels/decode:{self.target} --output_groups=+control")
        other = copy.copy(self)
        other.kernel = Kernel.load(cubin, self.manifest_path, self.device)
        other.sessions = other._open(other.kernel, workspaces)
        return other

    def launch(self, stream=None) -> None:
        """One decode step (unfused: its launches in order) on `stream` (torch's current by default)."""
        for s in self.sessions:
            s.launch(stream)

    def _token(self, token) -> int:
        if isinstance(token, torch.Tensor) and token.numel() == 1 and not token.dtype.is_floating_point \
                and token.dtype != torch.bool:
            token = int(token)
        if isinstance(token, bool) or not isinstance(token, int):
            raise LaunchError("R-PARAM", f"token {token!r} is not an int", hint="pass token ids (ints) of this model")
        t = token
        if not 0 <= t < self.cfg.vocab:
            raise LaunchError("R-PARAM", f"token {t} is outside the vocabulary 0 .. {self.cfg.vocab - 1}",
                              hint="pass token ids of this model")
        return t

    def set_token(self, token) -> None:
        """The next step's input token (batch 1; for a graph replay: decode() sets it itself)."""
        self.set_tokens([token])

    def set_tokens(self, tokens) -> None:
        """The next step's input token of each sequence (B ints or a tensor [B]; for a graph replay)."""
        for b, t in enumerate(self._tokens(tokens)):
            self.state[ST_WORDS * b + ST_TOKEN] = t

    def _tokens(self, tokens) -> list[int]:
        if isinstance(tokens, torch.Tensor):
            if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
                raise LaunchError("R-DTYPE", f"tokens are {tokens.dtype}, not token ids",
                                  hint="pass an integer tensor [batch] (or a list of ints)")
            tokens = tokens.reshape(-1).tolist()
        if not isinstance(tokens, (list, tuple)) or len(tokens) != self.batch:
            n = len(tokens) if isinstance(tokens, (list, tuple)) else type(tokens).__name__
            raise LaunchError("R-SHAPE", f"{n} tokens for a step of batch {self.batch}",
                              hint=f"pass one token id for each of the {self.batch} sequences")
        return [self._token(t) for t in tokens]

    def _step(self, tokens: list[int]) -> torch.Tensor:
        full = [b for b, p in enumerate(self.positions) if p >= self.max_seq]
        if full:
            b = full[0]
            raise LaunchError("R-PARAM", f"sequence {b}'s position {self.positions[b]} is past the KV cache's "
                              f"{self.max_seq} positions",
                              hint="pass a larger max_seq (up to max_positions), or start a new sequence")
        for b, t in enumerate(tokens):
            self.state[ST_WORDS * b + ST_TOKEN] = t
        self.launch()
        self.positions = [p + 1 for p in self.positions]
        return self.logits

    def _prompts(self, ids) -> list[list[int]]:
        """The batch's prompts as lists of token ids: ids [B, T] (an integer tensor) or B 1-D ones."""
        what = "a LongTensor [B, T] of token ids, or a list of B non-empty 1-D ones"
        if isinstance(ids, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in ids) and ids:
            rows = list(ids)
            if any(x.dim() != 1 or x.numel() == 0 for x in rows):
                raise LaunchError("R-SHAPE", f"prompts {[list(x.shape) for x in rows]}: each must be 1-D and "
                                  "non-empty", hint=f"pass {what}")
        elif isinstance(ids, torch.Tensor):
            if ids.dim() != 2 or ids.shape[1] == 0:
                raise LaunchError("R-SHAPE", f"ids {list(ids.shape)}: not [B, T] with T >= 1", hint=f"pass {what}")
            rows = list(ids)
        else:
            raise LaunchError("R-PARAM", f"ids is {type(ids).__name__}, not a tensor of token ids", hint=f"pass {what}")
        for x in rows:
            if x.dtype.is_floating_point or x.dtype == torch.bool:
                raise LaunchError("R-PARAM", f"ids are {x.dtype}, not an integer tensor", hint=f"pass {what}")
        if len(rows) != self.batch:
            raise LaunchError("R-SHAPE", f"{len(rows)} prompts for a step of batch {self.batch}",
                              hint=f"pass {self.batch} prompt(s), or a MegakernelStep of batch {len(rows)}")
        out = [[self._token(t) for t in x.tolist()] for x in rows]
        longest = max(len(x) for x in out)
        if longest > self.max_seq:
            raise LaunchError("R-PARAM", f"a prompt's {longest} tokens do not fit the {self.max_seq}-position "
                              "KV cache", hint="pass a larger max_seq")
        return out

    def prefill(self, ids):
        prompts = self._prompts(ids)
        batched = self.prefill_pass is not None and any(len(x) > 1 for x in prompts)
        if batched:
            self.prefill_pass.ready()
        self.state.zero_()
        self.positions = [0] * self.batch
        if batched:  # each prompt but its last token through the attention prefill, into its own cache
            for b, x in enumerate(prompts):
                if len(x) > 1:
                    kc, vc = (self.kcache[b], self.vcache[b]) if self.batch > 1 else (self.kcache, self.vcache)
                    self.prefill_pass(torch.tensor(x[:-1], device=kc.device), kc, vc)
                    self.positions[b] = len(x) - 1
                    self.state[ST_WORDS * b + ST_POS] = len(x) - 1
            prompts = [x[-1:] for x in prompts]
        elif len({len(x) for x in prompts}) > 1:
            raise LaunchError("R-SHAPE", f"prompts of lengths {[len(x) for x in prompts]} through prefill='megakernel'",
                              hint="pass equal-length prompts, or prefill='attention' (any lengths)")
        for i in range(len(prompts[0])):
            out = self._step([x[i] for x in prompts])
        return (out[None] if self.batch == 1 else out).clone(), self

    def decode(self, token_ids: torch.Tensor, state) -> torch.Tensor:
        if state is not self:
            raise LaunchError("R-PARAM", "state is not this step's", hint="pass the state prefill returned")
        if not isinstance(token_ids, torch.Tensor) or token_ids.numel() != self.batch:
            raise LaunchError("R-SHAPE", f"token_ids {getattr(token_ids, 'shape', type(token_ids).__name__)}: "
                              f"batch {self.batch}", hint=f"pass one token id a sequence as a tensor [{self.batch}]")
        out = self._step(self._tokens(token_ids))
        return (out[None] if self.batch == 1 else out).clone()

    def graph(self) -> "torch.cuda.CUDAGraph":
        """One decode step captured in a CUDA graph: each replay reads state's token and
        position and leaves the argmax token and the next position there (greedy chaining)."""
        s = torch.cuda.Stream(self.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                self.launch()
        return g
