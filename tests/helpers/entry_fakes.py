"""CPU stand-ins for the entry-point tests (test_entry_*.py): tensors that say they are on a GPU,
a kernel that counts launches, crafted manifests. No CUDA call anywhere; needs torch (the tests
importorskip it first)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from pipelink.runtime import LaunchError

BF16 = torch.bfloat16


class OnGpu(torch.Tensor):
    """A CPU tensor that reports is_cuda and device cuda:<index>: what the entries' checks read
    (the memory is real, so data_ptr, strides and overlaps are real). Torch ops on it give
    plain CPU tensors, so anything an entry builds from it after its checks is visible."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", getattr(self, "_pl_index", 0))


def gpu(t, index: int = 0) -> OnGpu:
    g = t.as_subclass(OnGpu)
    g._pl_index = index
    return g


def randn(*shape, dtype=BF16, index=0):
    return gpu(torch.randn(*shape).to(dtype), index)


def empty(*shape, dtype=BF16, index=0):
    return gpu(torch.empty(*shape, dtype=dtype), index)


def huge(*shape, dtype=BF16):
    """A contiguous 'GPU' tensor of any size with no memory (a meta tensor: data_ptr 0)."""
    return gpu(torch.empty(*shape, dtype=dtype, device="meta"))


def misaligned(*shape, dtype=BF16):
    """Contiguous, but starting one element past an aligned address."""
    n = 1
    for d in shape:
        n *= d
    return gpu(torch.empty(n + 8, dtype=dtype)[1:n + 1].view(*shape))


class CountingKernel:
    """Kernel stand-in: launch_with/open record their parameters."""

    def __init__(self, params=(), facts=None, num_sms=132, device=0):
        self.launches, self.opened = [], []
        self.num_sms, self.device = num_sms, device
        self.manifest = SimpleNamespace(lent=dict.fromkeys(params, "ptr"), facts=dict(facts or {}))

    def launch_with(self, params, *, grid=None, stream=None, workspaces=None):
        self.launches.append(dict(params))

    def open(self, grid=None, workspaces=None, **params):
        self.opened.append(dict(params))
        return SimpleNamespace(launch=lambda stream=None: self.launches.append(dict(params)))


def refused(fn, *args, **kw) -> LaunchError:
    """fn(...) raises a LaunchError (not another exception) with a code and a hint."""
    try:
        fn(*args, **kw)
    except LaunchError as e:
        assert e.code.startswith("R-") and e.hint.strip(), f"{e.code} without a hint: {e}"
        return e
    raise AssertionError(f"accepted: {fn.__name__}(...)")


def write_manifest(path, params: dict[str, str], facts: dict[str, int], kernel="k") -> None:
    """A loadable manifest with these parameters (name -> ptr/u32/f32) laid out in order."""
    fields, off = [], 0
    for n, t in params.items():
        size = 8 if t == "ptr" else 4
        off = (off + size - 1) // size * size
        fields.append({"instance": "i", "name": n, "type": t, "offset": off})
        off += size
    size = (off + 7) // 8 * 8
    path.write_text(json.dumps({"format": 1, "kernel": kernel, "arch": "sm_90a", "block": [128, 1, 1],
                                "grid": ["1", "1", "1"], "facts": facts,
                                "params": {"size": size, "by_name": params, "fields": fields}}))


def unprobeable_dir(tmp_path, kind: str):
    """A kernel_dir whose probe raises in pathlib: "long" (a name too long: OSError), "loop" (a
    link to itself: resolve's RuntimeError), "file" (a regular file), "nul" (a str with a NUL)."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_bytes(b"x")
    return {"long": tmp_path / ("a" * 300), "loop": tmp_path / "loop", "file": tmp_path / "file",
            "nul": str(tmp_path) + "/a\0b"}[kind]
