"""Issue 8, components from more than one library: the CuTe consumer (kernels/gemm/cute_consumer.cu)
and what packing it needed. Runs on the CPU.

* pack's P-REBUILD check compares trial-linked PTX up to nvcc's per-compilation module ids:
  CuTe and libcu++ define internal-linkage objects whose names carry that id, which Bazel fixes
  with -frandom-seed and the rebuild does not (before: every CuTe component was P-REBUILD).
* the CuTe consumer packs with its carried sources and the CUTLASS include, and links with the
  Hopper family's scheduler, TMA loader and TMA-store epilogue (both scheduler builds: it does
  the stream-K fixup too); the linked SASS equals the control's and runs on HGMMA.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import COMPONENTS, INCLUDE, ROOT, rejected, require_cutlass  # noqa: F401
from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import link
from pipelink.linker.package import pack
from pipelink.linker.sass import compare, disassemble
from pipelink.linker.toolkit import find_toolkit

GEMM = ROOT / "kernels" / "gemm"
GSW = ROOT / "kernels" / "gemm_swiglu"
MODULE_ID_CONTRACT = """
[component]
name = "module_id"
kind = "role"
entry = "run"
arch = "sm_90a"
[role]
warps = 4
regs = [24, 128]
[smem.buf]
bytes = 512
"""


def _nvcc(src: Path, out: Path, *opts: str) -> Path:
    subprocess.run(find_toolkit().nvcc_base() + ["-dc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=lto_90a",
                                                 f"-I{INCLUDE}", *opts, str(src), "-o", str(out)], check=True)
    return out


def test_rebuild_ignores_module_ids(tmp_path, packer):
    """Compiled with Bazel's -frandom-seed, rebuilt without it: the same code."""
    obj = _nvcc(COMPONENTS / "module_id.cu", tmp_path / "module_id.o", "-frandom-seed=bazel-out/x/module_id.o")
    pkg = packer.pack(MODULE_ID_CONTRACT, [obj], sources=[COMPONENTS / "module_id.cu"])
    assert pkg.name == "module_id"
    # A real difference in the code is still one.
    other = _nvcc(COMPONENTS / "module_id.cu", tmp_path / "other.o", "-frandom-seed=y", "-Dhits=renamed")
    e = rejected(packer.pack, MODULE_ID_CONTRACT, [other], sources=[COMPONENTS / "module_id.cu"])
    assert e.codes == ["P-REBUILD"]


@pytest.fixture(scope="module")
def hopper_packages(tmp_path_factory):
    cutlass = require_cutlass()
    tmp = tmp_path_factory.mktemp("cute")
    out = {}
    for name, src, contract, opts, host in [
        ("tile_scheduler", GEMM / "tile_scheduler.cu", GEMM / "tile_scheduler.contract.toml", [], None),
        ("tile_scheduler_dp", GEMM / "tile_scheduler.cu", GEMM / "tile_scheduler.contract.toml",
         ["-DTILE_SCHEDULER_STREAM_K=0"], None),
        ("tma_loader", GEMM / "tma_loader.cu", GEMM / "tma_loader.contract.toml", [], GEMM / "tma_loader_host.py"),
        ("cute_consumer", GEMM / "cute_consumer.cu", GEMM / "cute_consumer.contract.toml",
         [f"-I{cutlass}", "-DCONSUMER_BLOCK_N=128", "-DCONSUMER_B_PARTS=2", "-frandom-seed=cute"], None),
        ("swiglu", GSW / "swiglu_tma_store.cu", GSW / "swiglu_tma_store.contract.toml", [],
         GSW / "swiglu_tma_store_host.py"),
    ]:
        obj = _nvcc(src, tmp / f"{name}.o", *opts)
        if "-DTILE_SCHEDULER_STREAM_K=0" in opts:  # what Bazel's facts = {"stream_k": ...} does
            contract = tmp / "tile_scheduler_dp.contract.toml"
            text = (GEMM / "tile_scheduler.contract.toml").read_text()
            assert text.count("own = 1\n") == 1  # [fact.stream_k]'s, the only fact it owns
            contract.write_text(text.replace("own = 1\n", "own = 0\n"))
        sources = [str(src)] + ([str(GEMM / "ring_consumer.h"), str(GEMM / "tma_gemm.h")] if "gemm" in str(src.parent) else [])
        out[name] = pack(str(contract), [str(obj)], sources=sources,
                         copts=[o for o in opts if not o.startswith("-frandom")],
                         host_provider=str(host) if host else None)
    return out


@pytest.mark.parametrize("scheduler", ["tile_scheduler", "tile_scheduler_dp"])
def test_cute_consumer_links_with_the_hopper_packages(hopper_packages, scheduler):
    pkgs = [hopper_packages[n] for n in (scheduler, "tma_loader", "cute_consumer", "swiglu")]
    res = link(parse_kernel(str(GSW / "gemm_swiglu_tma_cute.kernel.toml"), pkgs), control=True)
    assert res.manifest["facts"]["block_n"] == 128 and res.manifest["block"] == [384, 1, 1]
    assert res.report["resource_usage"]["LOCAL"] == 0
    cmp = compare(res.cubin, res.control_cubin, "gemm_swiglu_tma_cute")
    assert cmp["identical"], "\n".join(cmp["functions"]["gemm_swiglu_tma_cute"]["diff"][:80])
    sass = disassemble(res.cubin)["gemm_swiglu_tma_cute"]
    hgmma = [i for i in sass if i.startswith("HGMMA")]
    assert hgmma and all("HGMMA.64x256x16.F32.BF16" in i for i in hgmma), hgmma[:4]
    assert not any(i.startswith("CALL") for i in sass)
