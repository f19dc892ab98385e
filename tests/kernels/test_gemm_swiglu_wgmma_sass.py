"""CI guard for the wgmma variant of GEMM+SwiGLU (kernels/gemm_swiglu/gemm_swiglu_wgmma.kernel.toml):
loader + mainloop_wgmma + swiglu (-DSWIGLU_LAYOUT_WGMMA) link from separately packed objects,
the linked SASS equals the single-translation-unit control's, every handle folded (no CALL,
no local memory), the tensor cores run as HGMMA, and the register budgets fit the CTA's
launch allocation (setmaxnreg.inc can only take what .dec released). Runs on the CPU."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import link
from pipelink.linker.package import pack
from pipelink.linker.sass import compare, disassemble
from pipelink.linker.toolkit import find_toolkit

from conftest import require_cutlass

ROOT = Path(__file__).resolve().parents[2]
KDIR = ROOT / "kernels" / "gemm_swiglu"
INCLUDE = ROOT / "tools" / "pipelink" / "include"
HEADERS = ["params.h", "acc_layout.h", "stage_layout.h", "../gemm/wgmma.h"]  # (mainloop_wgmma includes ../gemm/wgmma.h)
TILES = [(128, 64, 64), (128, 128, 64)]
# (source, contract, defines) per package of the wgmma composition
PACKAGES = {
    "loader": ("loader.cu", "loader.contract.toml", []),
    "mainloop_wgmma": ("mainloop_wgmma.cu", "mainloop_wgmma.contract.toml", None),  # tile defines
    "swiglu": ("swiglu.cu", "swiglu_wgmma.contract.toml", ["-DSWIGLU_LAYOUT_WGMMA"]),
}


def _package(tmp: Path, name: str, tiles):
    src, contract_name, defines = PACKAGES[name]
    if defines is None:  # mainloop_wgmma: its tile, and CuTe's GMMA atoms (through ../gemm/wgmma.h)
        defines = [f"-DMAINLOOP_BLOCK_{k}={v}" for k, v in zip("MNK", tiles)] + [f"-I{require_cutlass()}"]
    obj = tmp / f"{name}.o"
    subprocess.run(find_toolkit().nvcc_base() + ["-dc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=lto_90a",
                                                 f"-I{INCLUDE}", *defines, str(KDIR / src), "-o", str(obj)], check=True)
    text = (KDIR / contract_name).read_text()
    if name == "mainloop_wgmma":
        for fact, v in zip(("block_m", "block_n", "block_k"), tiles):
            text = re.sub(rf"(\[fact\.{fact}\][^\[]*?own = )\d+", rf"\g<1>{v}", text)
    contract = tmp / contract_name
    contract.write_text(text)
    sources = [str(KDIR / src)] + [str(KDIR / h) for h in HEADERS]
    return pack(str(contract), [str(obj)], sources=sources, copts=defines)


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: "x".join(map(str, t)))
def test_wgmma_linked_sass_equals_control(tmp_path, tiles):
    pkgs = [_package(tmp_path, n, tiles) for n in PACKAGES]
    res = link(parse_kernel(str(KDIR / "gemm_swiglu_wgmma.kernel.toml"), pkgs), control=True)
    assert res.manifest["facts"] == dict(zip(("block_m", "block_n", "block_k"), tiles))
    assert res.manifest["block"] == [384, 1, 1]
    assert res.report["resource_usage"]["LOCAL"] == 0
    pl = res.placement
    # setmaxnreg.inc draws only on registers released by .dec from the launch allocation.
    assert sum(128 * b for b in pl.group_budgets) <= pl.entry_regs * pl.threads, pl.group_budgets
    cmp = compare(res.cubin, res.control_cubin, "gemm_swiglu_wgmma")
    assert cmp["identical"], "\n".join(cmp["functions"]["gemm_swiglu_wgmma"]["diff"][:80])
    sass = disassemble(res.cubin)["gemm_swiglu_wgmma"]
    assert not any(i.startswith("CALL") for i in sass)
    assert not any(re.match(r"(LDL|STL)\b", i) for i in sass)
    n = 2 * tiles[1]
    hgmma = [i for i in sass if i.startswith("HGMMA")]
    assert hgmma and all(f"HGMMA.64x{n}x16.F32.BF16" in i for i in hgmma), hgmma[:4]
    assert not any("HMMA" in i for i in sass)
