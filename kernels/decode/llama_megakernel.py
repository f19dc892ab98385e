"""The decode megakernel (kernels/decode/dec.h) as a decode-step backend of llama.Llama.generate.

    from llama import Llama
    from llama_megakernel import MegakernelStep
    m = Llama.from_config("llama3_2_1b", weights="/ckpt/Llama-3.2-1B")
    step = MegakernelStep(m.cfg, m.weights, max_seq=4096)           # //kernels/decode:llama3_1b
    new = m.generate(prompt, 64, step=step)
    g = step.graph()          # one decode step as a CUDA graph: step.set_token(t); g.replay()

Batch 1. The kernel is the one decode_models.bzl links for the config's shape (llama_pack.kernel_target),
read from bazel-bin/kernels/decode (or `kernel_dir`); `attention="simple"` takes the build with
the simple attention package, `control=True` the single-unit control cubin, `unfused=True` the
baseline build launched once per op (2 + 5 layers launches a step). A prompt's positions
but its last run in one pass through the serving attention's causal kernel (llama_prefill,
read from bazel-bin/kernels/attention or `attention_dir`), its last token through the
megakernel; `prefill="megakernel"` runs every prompt position through the decode kernel instead.

State on the device: the packed weights (llama_pack.pack), the KV cache [layers, kv_heads,
max_seq, head_dim] bf16 (dec_attn.h), logits f32 [vocab] and `state` int32 [4] (token,
position, error flag): the kernel reads the token and position, writes the argmax token and
position + 1, so CUDA-graph replays chain greedy steps with no host work. Every bad argument is
a coded error with a hint, raised before anything is launched.
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
ST_TOKEN, ST_POS, ST_ERROR = 0, 1, 2


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
    """prefill(ids [1, T]) -> (logits [1, vocab], state); decode(token [1], state) -> logits [1, vocab]."""

    def __init__(self, cfg: LlamaConfig, weights: dict, *, max_seq: int | None = None, attention: str = "split",
                 control: bool = False, unfused: bool = False, kernel_dir=None, device: int = 0,
                 kernel_files=None, prefill: str = "attention", attention_dir=None, state_words: int = 4):
        expect_config(cfg)
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
        kdir = optional_dir("kernel_dir", kernel_dir)
        adir = optional_dir("attention_dir", attention_dir)
        max_seq = cfg.max_positions if max_seq is None else max_seq
        self.max_seq = integer("max_seq", max_seq, 1, min(cfg.max_positions, 2**31 - 1),
                               hint=f"the KV cache's capacity in positions: 1 .. {cfg.max_positions} (max_positions)")
        state_words = integer("state_words", state_words, 4, 2**28, hint="4, or the words a timeline build's stamps need")
        target = llama_pack.kernel_target(cfg) + ("_unfused" if unfused else "" if attention == "split" else "_simple")
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
                                   facts={**{f: getattr(cfg, f) for f in llama_pack.FACTS}, "unfused": int(unfused)},
                                   hint=build)
        tile_elems = manifest.facts.get("tile_elems")
        if not isinstance(tile_elems, int) or max(cfg.hidden, cfg.inter, cfg.heads * cfg.head_dim) > tile_elems:
            raise LaunchError("R-MANIFEST", f"{target}: tile_elems = {tile_elems!r} cannot hold a row of this model",
                              hint=build)
        expect_cubin(cubin, hint=build)
        self.cfg, self.target, self.device = cfg, target, device
        dev = torch.device("cuda", device)
        self.bufs = llama_pack.pack(cfg, weights, device=dev, tile_elems=tile_elems)
        shape = (cfg.layers, cfg.kv_heads, self.max_seq, cfg.head_dim)
        self.kcache = torch.zeros(shape, dtype=torch.bfloat16, device=dev)
        self.vcache = torch.zeros(shape, dtype=torch.bfloat16, device=dev)
        self.logits = torch.full((cfg.vocab,), float("nan"), dtype=torch.float32, device=dev)
        # state: token, position, error flag (4 words); a timeline build (dec_step.cu DEC_TRACE)
        # stamps its ops past them, in a buffer of state_words
        self.state = torch.zeros(state_words, dtype=torch.int32, device=dev)
        self.manifest_path, self.unfused = manifest_path, unfused
        self.kernel = Kernel.load(cubin, manifest_path, device)
        self.sessions = self._open(self.kernel)
        self.pos = 0
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
        """The next step's input token (for a graph replay; decode() sets it itself)."""
        self.state[ST_TOKEN] = self._token(token)

    def _step(self, token: int) -> torch.Tensor:
        if self.pos >= self.max_seq:
            raise LaunchError("R-PARAM", f"position {self.pos} is past the KV cache's {self.max_seq} positions",
                              hint="pass a larger max_seq (up to max_positions), or start a new sequence")
        self.state[ST_TOKEN] = token
        self.launch()
        self.pos += 1
        return self.logits

    def prefill(self, ids: torch.Tensor):
        if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise LaunchError("R-PARAM", f"ids is {type(ids).__name__ if not isinstance(ids, torch.Tensor) else ids.dtype}, "
                              "not an integer tensor", hint="pass a LongTensor [1, T] of token ids")
        if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
            raise LaunchError("R-SHAPE", f"ids {list(ids.shape)}: the decode megakernel runs batch 1",
                              hint="pass one non-empty prompt [1, T]")
        tokens = [self._token(t) for t in ids[0].tolist()]
        if len(tokens) > self.max_seq:
            raise LaunchError("R-PARAM", f"the prompt's {len(tokens)} tokens do not fit the {self.max_seq}-position "
                              "KV cache", hint="pass a larger max_seq")
        batched = self.prefill_pass is not None and len(tokens) > 1
        if batched:
            self.prefill_pass.ready()
        self.state.zero_()
        self.pos = 0
        if batched:
            self.prefill_pass(ids[0, :-1], self.kcache, self.vcache)
            self.pos = len(tokens) - 1
            self.state[ST_POS] = self.pos
            tokens = tokens[-1:]
        for t in tokens:
            out = self._step(t)
        return out[None].clone(), self

    def decode(self, token_ids: torch.Tensor, state) -> torch.Tensor:
        if state is not self:
            raise LaunchError("R-PARAM", "state is not this step's", hint="pass the state prefill returned")
        if not isinstance(token_ids, torch.Tensor) or token_ids.numel() != 1:
            raise LaunchError("R-SHAPE", f"token_ids {getattr(token_ids, 'shape', type(token_ids).__name__)}: batch 1",
                              hint="pass one token id as a tensor [1]")
        return self._step(self._token(token_ids.reshape(-1)[0]))[None].clone()

    def graph(self) -> "torch.cuda.CUDAGraph":
        """One decode step captured in a CUDA graph: each replay reads state's token and
        position and leaves the argmax token and the next position there (greedy chaining)."""
        s = torch.cuda.Stream(self.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                self.launch()
        return g
