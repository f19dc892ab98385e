"""Guard link mode (`pipelink link --guard`, pipelink/linker/guard.py) and its mutation test.

CPU part: the guarded link places a red zone after every claim, the dispatcher fills and
checks them, handles trap on a bad instance number, and the guarded kernel's SASS still
equals its control's.

GPU part (`requires_gpu`, skipped cleanly without one): every example kernel, guarded, runs
correctly and clean under compute-sanitizer (memcheck, synccheck); the mutation tests trap naming
the clause, and each mutant kept within its contract runs clean: a component that writes past its
claim (tests/components/overrun.cu), one that reads one element past it through PL_SMEM_AT
(overread.cu), and one that syncs its named barrier through PL_BARRIER_SYNC with a thread count
other than its clause's (badbarrier.cu).

The GPU machine has no z3: build the guarded cubins on the CPU machine first with
    PYTHONPATH=tools python tests/linker/test_guard.py --build .guardbuild
and run there with PIPELINK_GUARD_ARTIFACTS=.guardbuild (else the kernels are linked here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for conftest when run as a script

from conftest import require_cutlass  # noqa: E402  (mainloop_wgmma: CuTe's GMMA atoms)

GSW = ROOT / "kernels" / "gemm_swiglu"
COMPONENTS = ROOT / "tests" / "components"
MUTANTS = ("overrun", "overread", "badbarrier")  # tests/components/<name>.{cu,contract.toml}, one instance "o"


def mutant_kernel(name: str) -> str:
    return (f'[kernel]\nname = "{name}"\narch = "sm_90a"\ngrid = ["blocks", 1, 1]\nlaunch_args = ["blocks"]\n'
            f'[[instance]]\nname = "o"\npackage = "{name}"\n')


def mutant(name: str, obj: Path):
    from pipelink.linker.compose import parse_kernel_text
    from pipelink.linker.package import pack

    return parse_kernel_text(mutant_kernel(name), f"{name}.kernel.toml",
                             [pack(str(COMPONENTS / f"{name}.contract.toml"), [str(obj)])])


# ---- building the guarded kernels (CPU) -------------------------------------------------------------

def _nvcc(src: Path, out: Path, defines=()) -> Path:
    from pipelink.linker.toolkit import find_toolkit

    subprocess.run(find_toolkit().nvcc_base() + ["-dc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=lto_90a",
                                                 f"-I{ROOT / 'tools' / 'pipelink' / 'include'}", *defines, str(src),
                                                 "-o", str(out)], check=True)
    return out


def build_guarded(out: Path) -> dict[str, dict[str, str]]:
    """Link every example kernel (toy, gemm_swiglu, gemm_swiglu_wgmma) and the mutants with
    --guard into `out`; name -> paths."""
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import link, write_outputs
    from pipelink.linker.package import pack

    out.mkdir(parents=True, exist_ok=True)
    objs = out / "objects"
    objs.mkdir(exist_ok=True)
    toy = ROOT / "examples" / "toy"
    comps = {
        "toy": parse_kernel(str(toy / "toy.kernel.toml"),
                            [pack(str(toy / f"{n}.contract.toml"), [str(_nvcc(toy / f"{n}.cu", objs / f"{n}.o"))])
                             for n in ("producer", "consumer", "sink")]),
        "gemm_swiglu": parse_kernel(str(GSW / "gemm_swiglu.kernel.toml"),
                                    [pack(str(GSW / f"{n}.contract.toml"), [str(_nvcc(GSW / f"{n}.cu", objs / f"{n}.o"))])
                                     for n in ("loader", "mainloop", "swiglu")]),
        "gemm_swiglu_wgmma": parse_kernel(str(GSW / "gemm_swiglu_wgmma.kernel.toml"), [
            pack(str(GSW / "loader.contract.toml"), [str(objs / "loader.o")]),
            pack(str(GSW / "mainloop_wgmma.contract.toml"), [str(_nvcc(GSW / "mainloop_wgmma.cu", objs / "mainloop_wgmma.o",
                                                                             [f"-I{require_cutlass()}"]))]),
            pack(str(GSW / "swiglu_wgmma.contract.toml"),
                 [str(_nvcc(GSW / "swiglu.cu", objs / "swiglu_wgmma.o", ["-DSWIGLU_LAYOUT_WGMMA"]))])]),
        **{m: mutant(m, _nvcc(COMPONENTS / f"{m}.cu", objs / f"{m}.o")) for m in MUTANTS},
    }
    paths = {}
    for name, comp in comps.items():
        res = link(comp, guard=True)
        paths[name] = {"cubin": str(out / f"{name}.cubin"), "manifest": str(out / f"{name}.manifest.json")}
        write_outputs(res, cubin=paths[name]["cubin"], manifest=paths[name]["manifest"],
                      source=str(out / f"{name}.guard.cu"))
    return paths


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    art = os.environ.get("PIPELINK_GUARD_ARTIFACTS")
    if art:
        return {n: {"cubin": f"{art}/{n}.cubin", "manifest": f"{art}/{n}.manifest.json"}
                for n in ("toy", "gemm_swiglu", "gemm_swiglu_wgmma", *MUTANTS)}
    pytest.importorskip("z3", reason="linking needs z3: set PIPELINK_GUARD_ARTIFACTS (see the module docstring)")
    return build_guarded(tmp_path_factory.mktemp("guarded"))


# ---- CPU --------------------------------------------------------------------------------------------

def test_guarded_toy_has_red_zones_and_matches_control(toy):
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.guard import RED_ZONE
    from pipelink.linker.link import link
    from pipelink.linker.sass import compare

    plain = link(parse_kernel(str(toy.kernel), toy.packages))
    res = link(parse_kernel(str(toy.kernel), toy.packages), guard=True, control=True)
    for key, size in plain.placement.sizes.items():
        assert res.placement.sizes[key] == size + RED_ZONE, key
    assert "pl_guard_zone[]" in res.source and "pl_guard_end:" in res.source and "__trap();" in res.source
    assert "goto pl_guard_end;" in res.source and "; return; }" not in res.source.split("__global__")[-1]
    assert "if (i >= 1u)" in res.source  # a handle traps on an instance number its package lacks
    assert res.control_error is None and compare(res.cubin, res.control_cubin, "toy")["identical"]


def test_cli_guard_flag(tmp_path, packer, toy):
    from pipelink.linker import cli

    pkgs = [a for p in toy.packages for a in ("--package", str(packer.save(p)))]
    rc = cli.main(["--quiet", "link", "--guard", "--kernel", str(toy.kernel), *pkgs, "--out-dir", str(tmp_path),
                   "--source-out", str(tmp_path / "toy.cu")])
    assert rc == 0 and "pl_guard_zone" in (tmp_path / "toy.cu").read_text()


# ---- GPU --------------------------------------------------------------------------------------------

def _sanitizer() -> str | None:
    for c in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if c and os.path.exists(c):
            return c
    return None


@pytest.mark.requires_gpu
@pytest.mark.parametrize("kernel", ["toy", "gemm_swiglu", "gemm_swiglu_wgmma"])
@pytest.mark.parametrize("tool", ["memcheck", "synccheck"])
def test_guarded_examples_clean_under_compute_sanitizer(guarded, kernel, tool):
    san = _sanitizer()
    if not san:
        pytest.skip("compute-sanitizer not found")
    pytest.importorskip("numpy")
    p = subprocess.run([san, "--tool", tool, "--error-exitcode", "9", sys.executable, str(ROOT / "benchmarks" / "gpu_bench.py"),
                        "target", "--kernel", kernel, "--cubin", guarded[kernel]["cubin"],
                        "--manifest", guarded[kernel]["manifest"]], capture_output=True, text=True, timeout=600)
    text = p.stdout + p.stderr
    assert p.returncode == 0 and "RESULT OK" in text and "ERROR SUMMARY: 0 errors" in text, text[-3000:]
    assert "pipelink guard" not in text


def test_checked_handles_plain_and_guarded(tmp_path):
    """PL_SMEM_AT and PL_BARRIER_SYNC are the unchecked code in a plain link and check their
    clause in a guarded one; a count the linked SASS shows as an immediate is rejected at link."""
    pytest.importorskip("z3", reason="linking needs z3")
    from pipelink.common.diagnostics import Rejected
    from pipelink.linker.link import link

    for name, plain_body, check in (("overread", "return 0u + b;", "are outside its 256 B"),
                                    ("badbarrier", "pl::named_barrier_sync(1u, t);", "its contract counts 64")):
        comp = mutant(name, _nvcc(COMPONENTS / f"{name}.cu", tmp_path / f"{name}.o"))
        plain, guarded = link(comp), link(comp, guard=True)
        handle = next(ln for ln in plain.source.splitlines() if f"pl_{name}__" in ln and "(unsigned i, " in ln)
        assert handle.endswith(f"{{ {plain_body} }}") and "printf" not in handle, handle
        assert check in guarded.source and f"{name}.cu" not in guarded.source  # file:line comes from the caller
    comp = mutant("badbarrier", _nvcc(COMPONENTS / "badbarrier.cu", tmp_path / "fixed.o", ["-DBADBARRIER_COUNT=32"]))
    with pytest.raises(Rejected) as e:
        link(comp)
    assert e.value.diagnostics[0].code == "L-BARRIER-THREADS"


MUTANT_LAUNCH = """
import sys
from cuda.bindings import driver as cu
from pipelink.runtime import Kernel
extra = int(sys.argv[3])
k = Kernel.load(sys.argv[1], sys.argv[2])
ok = lambda r: r[1] if r[0] == cu.CUresult.CUDA_SUCCESS and len(r) > 1 else r[0]
ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
cu.cuCtxPushCurrent(ctx)
out = ok(cu.cuMemAlloc(4 * 4))
k.launch(stream=0, out=int(out), extra=extra, blocks=4)
(err,) = cu.cuCtxSynchronize()
print("SYNC", err.name, flush=True)
sys.exit(0 if err == cu.CUresult.CUDA_SUCCESS else 5)
"""


def _launch_mutant(guarded, extra: int, wrap=(), name="overrun"):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    return subprocess.run([*wrap, sys.executable, "-c", MUTANT_LAUNCH, guarded[name]["cubin"],
                           guarded[name]["manifest"], str(extra)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.requires_gpu
def test_mutation_write_past_claim_is_caught(guarded):
    """The mutant keeps to its 256 B claim with extra = 0 and writes past it with extra > 0."""
    within = _launch_mutant(guarded, 0)
    assert within.returncode == 0 and "pipelink guard" not in within.stdout, within.stdout + within.stderr
    for extra in (1, 32):
        past = _launch_mutant(guarded, extra)
        text = past.stdout + past.stderr
        assert past.returncode != 0, text
        assert "pipelink guard" in text and "o.smem.buf" in text and "overrun" in text, text


@pytest.mark.requires_gpu
@pytest.mark.parametrize("name, needles", [
    ("overread", ("o.smem.buf", "overread.cu:21", "bytes 256..259", "outside its 256 B")),
    ("badbarrier", ("o.sync", "badbarrier.cu:23", "bar.sync", "counts 32 threads; its contract counts 64"))])
def test_mutation_checked_access_is_caught(guarded, name, needles):
    """The mutant keeps to its contract with extra = 0; with extra = 1 it reads one element past
    its claim (overread) or syncs its barrier counting 32 of the clause's 64 threads (badbarrier)."""
    within = _launch_mutant(guarded, 0, name=name)
    assert within.returncode == 0 and "pipelink guard" not in within.stdout, within.stdout + within.stderr
    past = _launch_mutant(guarded, 1, name=name)
    text = past.stdout + past.stderr
    assert past.returncode != 0 and "pipelink guard" in text, text
    assert all(n in text for n in needles), (needles, text)
    print(text.strip().splitlines()[0])


@pytest.mark.requires_gpu
def test_mutation_under_compute_sanitizer(guarded):
    san = _sanitizer()
    if not san:
        pytest.skip("compute-sanitizer not found")
    p = _launch_mutant(guarded, 1, wrap=(san, "--tool", "memcheck", "--error-exitcode", "9"))
    text = p.stdout + p.stderr
    assert p.returncode != 0 and "pipelink guard" in text and "o.smem.buf" in text, text[-3000:]


if __name__ == "__main__":  # build the guarded cubins on a machine with z3 and nvcc
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="output folder (then PIPELINK_GUARD_ARTIFACTS=<it> on the GPU)")
    print(json.dumps(build_guarded(Path(ap.parse_args().build)), indent=2))
