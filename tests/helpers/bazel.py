"""The Bazel end-to-end tests' shared pieces (tests/e2e/): which Bazel to run, the venv's CUDA
wheels, why the tests cannot run here, removing output bases, and the nested relink workspace
(tests/e2e/relink) with the targets and action kinds the tests count."""

from __future__ import annotations

import collections
import os
import shutil
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC_WS = REPO / "tests" / "e2e" / "relink"
SM90_KERNELS = ["//:k1", "//:k2", "//:k3"]
TARGETS = SM90_KERNELS + ["//:k1_sm100a", "//:k1_sm120a"]
LINKS = {"//:k1", "//:k2", "//:k3", "//:k1_sm100a", "//:k1_sm120a"}
COUNTED = {"CudaCompile", "PipelinkPack", "PipelinkLink", "PipelinkControlLink", "PipelinkContractArch"}


def bazel_cmd() -> list[str]:
    env = os.environ.get("PIPELINK_BAZEL")
    return [env] if env else [str(REPO / "tools" / "bazel")]


def venv_paths() -> dict[str, str] | None:
    venv = REPO / ".venv"
    for sp in sorted((venv / "lib").glob("python3*/site-packages"), reverse=True):
        if (sp / "nvidia" / "cu13" / "bin" / "nvcc").exists():
            out = {"PIPELINK_PYTHON": str(venv / "bin" / "python"), "PIPELINK_CUDA_HOME": str(sp / "nvidia" / "cu13")}
            cutlass = sp / "cutlass_library" / "source" / "include"
            if (cutlass / "cutlass").exists():
                out["PIPELINK_CUTLASS_INCLUDE"] = str(cutlass)
            return out
    return None


@lru_cache(maxsize=None)
def bazel_skip_reason() -> str | None:
    """None when the end-to-end tests can run here (Bazel 7 through tools/bazel or
    $PIPELINK_BAZEL, and the venv's CUDA wheels), else why not: their skip reason."""
    cmd = bazel_cmd()
    if not os.environ.get("PIPELINK_BAZEL") and not os.access(cmd[0], os.X_OK):
        return f"{cmd[0]} is missing"
    try:
        res = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bazel unavailable: {e}"
    if res.returncode != 0 or "bazel 7" not in res.stdout + res.stderr:
        return "bazel unavailable (run `bash tools/setup.sh`): " + (res.stderr or res.stdout).strip()[-300:]
    if venv_paths() is None:
        return "no CUDA wheels in .venv (run `bash tools/setup.sh`)"
    return None


def rmtree(path: Path) -> None:
    def onerror(func, p, _exc):
        # a symlink's own removal fails in a read-only folder: open that folder, never the link's target
        os.chmod(os.path.dirname(p) if os.path.islink(p) else p, stat.S_IRWXU)
        func(p)

    if path.exists():
        # Bazel output bases hold read-only directories.
        for root, dirs, _files in os.walk(path):
            for d in dirs:
                if os.path.islink(os.path.join(root, d)):  # chmod would follow it out of the tree
                    continue
                try:
                    os.chmod(os.path.join(root, d), stat.S_IRWXU)
                except OSError:
                    pass
        shutil.rmtree(path, onerror=onerror)


def ran_actions(log: Path) -> dict[str, dict[str, int]]:
    """The counted actions (COUNTED mnemonics) an execution log shows ran, not cache hits:
    {mnemonic: {target: count}}."""
    from pipelink.linker.execlog import read_spawns
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for s in read_spawns(log):
        if not (s.get("cacheHit") or s.get("remoteCacheHit")):
            out[s.get("mnemonic", "?")][s.get("targetLabel", "?")] += 1
    return {m: dict(c) for m, c in out.items() if m in COUNTED and c}


def bazel_in(ws: Path, output_base: Path, logs: Path, *args: str, log: str | None = None) -> None:
    """Run Bazel in the nested workspace `ws` (its own output base); with `log`, write the
    execution log to logs/<log>.json (outside the workspace and the sandbox)."""
    cmd = bazel_cmd() + [f"--output_base={output_base}", args[0], "--color=no", "--curses=no"]
    if log:
        cmd.append(f"--execution_log_json_file={logs / (log + '.json')}")
    cmd += list(args[1:])
    res = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=3600)
    assert res.returncode == 0, f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-6000:]}"
