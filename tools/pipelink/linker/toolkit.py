"""Finding and driving the CUDA toolkit: nvcc, ptxas, nvJitLink, cuobjdump/nvdisasm.

Search order: an explicit --cuda-home, $PIPELINK_CUDA_HOME, the pip wheels next to this
interpreter (site-packages/nvidia/cu13), $CUDA_PATH, nvcc on PATH. One CUDA major only:
LTO-IR does not link across majors.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pipelink.common.diagnostics import Fact, Rejected, reject

REQUIRED_MAJOR = 13
INCLUDE_DIR = Path(__file__).parent.parent / "include"  # pipelink.h, which every component source includes


@dataclass(frozen=True)
class Toolkit:
    home: Path
    version: str  # "13.0"

    def tool(self, name: str) -> str:
        p = self.home / "bin" / name
        if not p.exists():
            found = shutil.which(name)
            if not found:
                raise reject("E-TOOLKIT", f"{name} not found in {self.home}/bin or on PATH",
                             hint="install the CUDA wheels with `bash tools/setup.sh`")
            return found
        return str(p)

    @property
    def include(self) -> Path:
        return self.home / "include"

    def nvcc_base(self) -> list[str]:
        cmd = [self.tool("nvcc")]
        ccbin = os.environ.get("PIPELINK_HOST_CXX")
        if ccbin:
            cmd += ["-ccbin", ccbin]
        return cmd


def _wheel_homes() -> list[Path]:
    out = []
    for key in ("purelib", "platlib"):
        sp = Path(sysconfig.get_paths()[key])
        out.append(sp / "nvidia" / "cu13")
    for sp in map(Path, sys.path):
        out.append(sp / "nvidia" / "cu13")
    return out


@lru_cache(maxsize=None)
def find_toolkit(explicit: str | None = None) -> Toolkit:
    candidates: list[tuple[str, Path]] = []
    if explicit:
        candidates.append(("--cuda-home", Path(explicit)))
    if os.environ.get("PIPELINK_CUDA_HOME"):
        candidates.append(("PIPELINK_CUDA_HOME", Path(os.environ["PIPELINK_CUDA_HOME"])))
    candidates += [("pip wheels", p) for p in _wheel_homes()]
    if os.environ.get("CUDA_PATH"):
        candidates.append(("CUDA_PATH", Path(os.environ["CUDA_PATH"])))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(("nvcc on PATH", Path(nvcc).resolve().parent.parent))
    tried = []
    for source, home in candidates:
        if (home / "bin" / "nvcc").exists():
            version = nvcc_version(str(home / "bin" / "nvcc"))
            if int(version.split(".")[0]) != REQUIRED_MAJOR:
                raise reject("E-TOOLKIT", f"CUDA {version} found via {source} ({home}); pipelink needs CUDA {REQUIRED_MAJOR}.x",
                             facts=[Fact(source, f"nvcc {version}", str(home))],
                             hint=f"point --cuda-home or PIPELINK_CUDA_HOME at a CUDA {REQUIRED_MAJOR} toolkit")
            return Toolkit(home, version)
        tried.append(f"{source}: {home}")
        if explicit and source == "--cuda-home":
            break
    raise reject("E-TOOLKIT", "no CUDA toolkit (nvcc) found",
                 facts=[Fact("searched", t) for t in tried[:6]],
                 hint="run `bash tools/setup.sh`, or set PIPELINK_CUDA_HOME / CUDA_PATH to a CUDA 13 toolkit")


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise reject("E-TOOLKIT", f"{nvcc} --version failed: {e}", hint="reinstall the toolkit (bash tools/setup.sh)") from None
    m = re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise reject("E-TOOLKIT", f"cannot read the version of {nvcc}", hint="point --cuda-home at a CUDA 13 toolkit")
    return m.group(1)


def run_tool(cmd: list[str], code: str, what: str, cwd: str | None = None) -> str:
    """Run a toolkit command; a failure becomes diagnostic `code` with the tool's log."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    except OSError as e:
        raise reject("E-TOOLKIT", f"cannot run {cmd[0]}: {e}", hint="check the toolkit installation (bash tools/setup.sh)") from None
    if proc.returncode != 0:
        log = (proc.stderr or proc.stdout).strip()
        raise reject(code, f"{what} failed", facts=[Fact(Path(cmd[0]).name, _clip(log))],
                     hint="the tool's log is above")
    return proc.stdout + proc.stderr


def _clip(s: str, n: int = 4000) -> str:
    return s if len(s) <= n else s[:n] + f"\n... ({len(s) - n} more characters)"


# ---- nvJitLink ------------------------------------------------------------------------

def _nvjitlink():
    try:
        from cuda.bindings import nvjitlink
    except ImportError:
        raise reject("E-TOOLKIT", "cuda-bindings (nvJitLink) is not installed",
                     hint="run `bash tools/setup.sh` or `pip install cuda-bindings==13.*`") from None
    return nvjitlink


def gencode(arch: str, kind: str) -> str:
    """nvcc's -gencode for `arch` (sm_90a) emitting `kind` (lto, sm)."""
    return f"-gencode=arch=compute_{arch[3:]},code={kind}_{arch[3:]}"


def lto_link_options(arch: str, kernel: str) -> list[str]:
    """nvJitLink's options for one kernel. The link, the plain symbol link and the control all
    use these, so they differ only in what they link."""
    return [f"-arch={arch}", "-lto", "-O3", f"-kernels-used={kernel}"]


def nvjitlink_link(inputs: list[tuple[str, bytes]], options: list[str], *, ptx: bool = False,
                   code: str = "L-LINK") -> bytes:
    """Link (name, data) inputs (LTO-IR objects/fatbins) -> cubin, or PTX when ptx=True.

    nvJitLink runs in a forked child: some inputs crash it (SIGSEGV), and a crash must be a
    coded diagnostic, not the end of pipelink (or of the process that imported it)."""
    _nvjitlink()  # E-TOOLKIT here, in the parent, when the bindings are missing
    return run_isolated(_nvjitlink_link, inputs, options, ptx, code, code=code, what="nvJitLink")


def run_isolated(fn, *args, code: str, what: str):
    """fn(*args) in a forked child; its result, its Rejected, or `code` if the child dies."""
    if not hasattr(os, "fork"):
        return fn(*args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        try:
            import faulthandler

            faulthandler.disable()  # the parent reports a crash; no dump on the shared stderr
            try:
                result = ("ok", fn(*args))
            except Rejected as e:
                result = ("rejected", e.diagnostics)
            except BaseException as e:  # noqa: BLE001 - handed to the parent, which decides
                result = ("error", f"{e.__class__.__name__}: {e}")
            with os.fdopen(w, "wb") as f:
                f.write(pickle.dumps(result))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or not data:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        name = signal.Signals(sig).name if sig else f"exit {os.WEXITSTATUS(status)}"
        raise reject(code, f"{what} crashed ({name}) on these inputs",
                     facts=[Fact(what, f"killed by {name}")],
                     hint=f"a {what} bug triggered by the inputs: check the contracts' values and the objects, "
                          "and report it with the packages")
    kind, value = pickle.loads(data)
    if kind == "ok":
        return value
    if kind == "rejected":
        raise Rejected(value)
    raise RuntimeError(f"{what} failed in its child process: {value}")


def _nvjitlink_link(inputs, options, ptx, code) -> bytes:
    nj = _nvjitlink()
    try:
        handle = nj.create(len(options), options)
    except Exception as e:  # the bindings raise nvJitLinkError for a bad option or a missing library
        raise reject("E-TOOLKIT", f"nvJitLink could not start: {e}",
                     hint="check that nvidia-nvjitlink 13.x is installed") from None
    try:
        for name, data in inputs:
            nj.add_data(handle, nj.InputType.ANY, data, len(data), name)
        nj.complete(handle)
        if ptx:
            size = nj.get_linked_ptx_size(handle)
            buf = bytearray(size)
            nj.get_linked_ptx(handle, buf)
        else:
            size = nj.get_linked_cubin_size(handle)
            buf = bytearray(size)
            nj.get_linked_cubin(handle, buf)
        return bytes(buf).rstrip(b"\0") if ptx else bytes(buf)
    except Exception as e:
        log = ""
        try:
            n = nj.get_error_log_size(handle)
            b = bytearray(n)
            nj.get_error_log(handle, b)
            log = b.decode(errors="replace").strip("\0 \n")
        except Exception:
            pass
        raise reject(code, f"nvJitLink failed: {log or e}",
                     facts=[Fact("nvJitLink", _clip(log or str(e)))],
                     hint="inputs must be LTO-IR built by the same CUDA major for the same arch") from None
    finally:
        nj.destroy(handle)


def nvjitlink_version() -> str:
    nj = _nvjitlink()
    major, minor = nj.version()
    return f"{major}.{minor}"
