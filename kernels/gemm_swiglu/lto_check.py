"""Separate-compilation control for the GEMM + SwiGLU components (until the linker exists).

Compiles loader.cu, mainloop.cu, swiglu.cu and the glue half of standalone_test.cu
(-DGSW_SEPARATE: hand-written handles + dispatcher) each to LTO-IR, links them with
nvJitLink -lto into one cubin, and reports what LTO made of the handles (CALLs left,
local memory, register budget instructions). With --run (needs a GPU, torch and
cuda-bindings) it also launches the cubin and compares against torch.

  python3 kernels/gemm_swiglu/lto_check.py [--bm 128 --bn 64 --bk 64 --depth 4] [--run]
       [--objdir DIR]   reuse objects built elsewhere (then no nvcc is needed)
"""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def cuda_home() -> Path:
    for c in (os.environ.get("CUDA_HOME"), ROOT / ".venv/lib/python3.11/site-packages/nvidia/cu13", "/usr/local/cuda"):
        if c and (Path(c) / "bin/nvcc").exists():
            return Path(c)
    sys.exit("no nvcc found (set CUDA_HOME)")


def build(objdir: Path, bm: int, bn: int, bk: int, depth: int) -> list[Path]:
    nvcc = str(cuda_home() / "bin/nvcc")
    objdir.mkdir(parents=True, exist_ok=True)
    base = [nvcc, "-std=c++17", "-O3", "-dc", "-gencode", "arch=compute_90a,code=lto_90a",
            f"-I{ROOT / 'tools/pipelink/include'}",
            f"-DMAINLOOP_BLOCK_M={bm}", f"-DMAINLOOP_BLOCK_N={bn}", f"-DMAINLOOP_BLOCK_K={bk}"]
    objs = []
    for name, extra in (("loader", []), ("mainloop", []), ("swiglu", []),
                        ("standalone_test", ["-DGSW_SEPARATE", f"-DTEST_DEPTH={depth}"])):
        out = objdir / f"{name}.o"
        subprocess.run(base + extra + [str(HERE / f"{name}.cu"), "-o", str(out)], check=True)
        objs.append(out)
    return objs


def link(objs: list[Path]) -> bytes:
    from cuda.bindings import nvjitlink as nj
    opts = ["-arch=sm_90a", "-lto", "-O3", "-kernels-used=gsw_dispatch", "-Xptxas=-v"]
    h = nj.create(len(opts), opts)
    try:
        for o in objs:
            data = o.read_bytes()
            nj.add_data(h, nj.InputType.ANY, data, len(data), o.name)
        try:
            nj.complete(h)
        except Exception:
            n = nj.get_error_log_size(h); b = bytearray(n); nj.get_error_log(h, b)
            sys.exit("nvJitLink failed:\n" + b.decode(errors="replace"))
        n = nj.get_info_log_size(h); b = bytearray(n); nj.get_info_log(h, b)
        info = b.decode(errors="replace").strip("\0\n ")
        if info:
            print(info)
        n = nj.get_linked_cubin_size(h); cub = bytearray(n); nj.get_linked_cubin(h, cub)
        return bytes(cub)
    finally:
        nj.destroy(h)


def inspect(cubin_path: Path) -> bool:
    import shutil
    tool = shutil.which("cuobjdump")
    for c in (ROOT / ".venv/lib/python3.11/site-packages/nvidia/cu13/bin/cuobjdump", Path("/usr/local/cuda/bin/cuobjdump")):
        if not tool and c.exists():
            tool = str(c)
    if not tool:
        print("no cuobjdump: SASS not inspected"); return True
    sass = subprocess.run([tool, "-sass", str(cubin_path)], capture_output=True, text=True, check=True).stdout
    ops = {k: len(re.findall(rf"\b{k}\b", sass)) for k in ("CALL", "LDL", "STL", "HMMA", "LDSM", "LDGSTS")}
    regs = re.findall(r"USETMAXREG\.\S+ (?:UP0, )?(0x[0-9a-f]+)", sass)
    print("SASS:", ", ".join(f"{k}={v}" for k, v in ops.items()), "setmaxnreg:", [int(r, 16) for r in regs])
    ok = ops["CALL"] == 0 and ops["LDL"] == 0 and ops["STL"] == 0
    print("handles folded, no local memory" if ok else "FAIL: calls or local memory left after LTO")
    return ok


def run(cubin: bytes, bm: int, bn: int, bk: int, depth: int, shapes) -> bool:
    import ctypes
    import torch
    from cuda.bindings import driver as cu
    torch.cuda.init(); torch.zeros(1, device="cuda")

    def ck(r):
        err = r[0] if isinstance(r, tuple) else r
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver error {err}")
        return r[1] if isinstance(r, tuple) and len(r) == 2 else r

    mod = ck(cu.cuModuleLoadData(cubin))
    fn = ck(cu.cuModuleGetFunction(mod, b"gsw_dispatch"))
    smem = 1024 + depth * (bm + 2 * bn) * bk * 2
    ck(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))

    class P(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint64), ("w", ctypes.c_uint64), ("out", ctypes.c_uint64),
                    ("m", ctypes.c_uint32), ("n", ctypes.c_uint32), ("k", ctypes.c_uint32)]
    ok = True
    for (m, n, k) in shapes:
        g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
        x = (torch.rand(m, k, device="cuda", generator=g) * 2 - 1).bfloat16()
        w = ((torch.rand(2 * n, k, device="cuda", generator=g) * 2 - 1) * (2 / k ** 0.5)).bfloat16()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        p = P(x.data_ptr(), w.data_ptr(), out.data_ptr(), m, n, k)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(p))
        ck(cu.cuLaunchKernel(fn, n // bn, m // bm, 1, 384, 1, 1, smem, 0, ctypes.addressof(args), 0))
        torch.cuda.synchronize()
        h = x.double() @ w.double().t()
        ref = torch.nn.functional.silu(h[:, :n]) * h[:, n:]
        unwritten = int(torch.isnan(out).sum())
        d = (out.double() - ref).abs()
        rel = d / (ref.abs() + 1e-2 * ref.pow(2).mean().sqrt())
        rel = torch.nan_to_num(rel, nan=0.0)
        good = unwritten == 0 and float(rel.max()) <= 2e-2
        ok &= good
        print(f"LTO cubin M={m} N={n} K={k}: max_rel={float(rel.max()):.3e} unwritten={unwritten} {'PASS' if good else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bm", type=int, default=128)
    ap.add_argument("--bn", type=int, default=64)
    ap.add_argument("--bk", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--objdir", type=Path, default=None)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--run", action="store_true")
    a = ap.parse_args()
    tag = f"{a.bm}x{a.bn}x{a.bk}_d{a.depth}"
    if a.objdir and (a.objdir / "standalone_test.o").exists():
        objdir = a.objdir
        objs = [objdir / f"{n}.o" for n in ("loader", "mainloop", "swiglu", "standalone_test")]
    else:
        objdir = a.objdir or ROOT / "build/gemm_swiglu" / f"lto_{tag}"
        objs = build(objdir, a.bm, a.bn, a.bk, a.depth)
    if a.build_only:
        return 0
    cubin = link(objs)
    cpath = objdir / "gsw.cubin"
    cpath.write_bytes(cubin)
    ok = inspect(cpath)
    if a.run:
        ok &= run(cubin, a.bm, a.bn, a.bk, a.depth, [(256, 256, 512), (128, 512, 5120), (256, 128, a.bk)])
    print("LTO CHECK", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
