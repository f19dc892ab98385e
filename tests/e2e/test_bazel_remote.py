"""Remote caching on a real REAPI server: BuildGrid 0.9.1 on 127.0.0.1.

BuildGrid (CAS + ActionCache + ByteStream, installed by tools/setup.sh from
requirements-remote.lock into .pipelink/buildgrid-py3.14 and run with Debian sid's Python 3.14
inside the Bazel root) listens on a free loopback port for the length of this module; it is
stopped in all cases. Two checkouts at different paths build the relink e2e workspace
(tests/e2e/relink: 8 compiles, 8 packs, 5 links for sm_90a/sm_100a/sm_120a):

  * checkout A (this repo, consumer workspace A) builds cold with --remote_cache: every
    action runs locally and is uploaded;
  * checkout B (a copy of this checkout's files at another path, its own consumer workspace
    and output base, the venv's interpreter and CUDA wheels reached through another path)
    builds clean with --remote_cache: every compile, pack and link is a remote cache hit
    (counted from --execution_log_json_file), and the top-level outputs are bit-identical to A's.

The hit counts go to .pipelink/remote/remote_cache_hits.json.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from pipelink.linker.execlog import read_spawns

from helpers.bazel import COUNTED, LINKS, SRC_WS, TARGETS, bazel_cmd, bazel_skip_reason, rmtree, venv_paths

REPO = Path(__file__).resolve().parents[2]
BG_SITE = REPO / ".pipelink" / "buildgrid-py3.14"
ROOT = REPO / ".pipelink" / "remote"   # inside the checkout: visible in the Bazel root
SERVER_START_S = 90
BUILD_TIMEOUT_S = 900


def _reason() -> str | None:
    r = bazel_skip_reason()
    if r:
        return r
    if not (BG_SITE / "buildgrid" / "server").is_dir():
        return f"BuildGrid is not installed at {BG_SITE} (run `bash tools/setup.sh`)"
    return None


_REASON = _reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


BGD_CONFIG = """\
description: pipelink remote cache (tests/e2e/test_bazel_remote.py)
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
authorization:
  method: none
storages:
  - !disk-storage &cas
    path: {cas}
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
thread-pool-size: 8
"""


class BuildGrid:
    """`bgd server start` inside the Bazel root (sid's python3), bound to 127.0.0.1:<port>."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = workdir / "bgd.log"

    def start(self) -> None:
        last = ""
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = _free_port()
            cas = self.workdir / "cas"
            cas.mkdir(parents=True, exist_ok=True)
            cfg = self.workdir / "bgd.yml"
            cfg.write_text(BGD_CONFIG.format(port=self.port, cas=cas))
            cmd = bazel_cmd() + [
                "--pipelink-exec", "env", f"PYTHONPATH={BG_SITE}", "python3", "-c",
                "import sys; from buildgrid.server.app import cli; sys.argv[0] = 'bgd'; cli()",
                "server", "start", str(cfg)]
            with open(self.log, "w") as log:
                self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + SERVER_START_S
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _listening(self.port):
                    return
                time.sleep(0.5)
            last = self.log.read_text()[-2000:]
            self.stop()
        raise AssertionError(f"BuildGrid did not start on 127.0.0.1:\n{last}")

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=20)

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"


def _copy_checkout(dest: Path) -> None:
    """This checkout's tracked and untracked-but-not-ignored files (uncommitted edits too)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in files:
        src = REPO / rel
        if not rel or not src.is_file():
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def _consumer(ws: Path, pipelink: Path, env: dict[str, str]) -> None:
    shutil.copytree(SRC_WS, ws, ignore=shutil.ignore_patterns("bazel-*", "user.bazelrc"))
    module = (ws / "MODULE.bazel").read_text().replace('path = "../../.."', f'path = "{pipelink}"')
    (ws / "MODULE.bazel").write_text(module)
    (ws / "user.bazelrc").write_text("".join(f"common --repo_env={k}={v}\n" for k, v in sorted(env.items())))


def _spawns(path: Path) -> list[dict]:
    return read_spawns(path)


def _tally(spawns: list[dict]) -> dict[str, dict[str, int]]:
    """mnemonic -> {"remote_hit": n, "ran": n} for the counted mnemonics."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for s in spawns:
        m = s.get("mnemonic", "?")
        if m in COUNTED:
            # Bazel 7's JSON log marks a cache hit as cacheHit + runner "remote cache hit" (no disk
            # cache is in use here, so every hit is the remote one).
            hit = s.get("cacheHit") and s.get("runner") == "remote cache hit"
            out[m]["remote_hit" if hit else "ran"] += 1
    return {m: dict(c) for m, c in sorted(out.items())}


@pytest.fixture(scope="module")
def remote():
    for d in ("a", "b"):  # servers left by an earlier run
        ob = ROOT / d / "ob"
        if (ob / "server").exists() and (ROOT / d / "ws").exists():
            subprocess.run(bazel_cmd() + [f"--output_base={ob}", "shutdown"], cwd=ROOT / d / "ws",
                           capture_output=True, timeout=300)
    rmtree(ROOT)
    ROOT.mkdir(parents=True)
    bg = BuildGrid(ROOT / "buildgrid")
    (ROOT / "buildgrid").mkdir()
    used: list[tuple[Path, Path]] = []
    try:
        bg.start()
        yield bg, used
    finally:
        for ws, ob in used:
            subprocess.run(bazel_cmd() + [f"--output_base={ob}", "shutdown"], cwd=ws, capture_output=True,
                           timeout=300)
        bg.stop()


def _build(ws: Path, ob: Path, url: str, log: Path) -> float:
    cmd = bazel_cmd() + [f"--output_base={ob}", "build", "--color=no", "--curses=no",
                          f"--remote_cache={url}", "--remote_timeout=120",
                          f"--execution_log_json_file={log}", *TARGETS]
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stderr[-6000:]}"
    return round(time.monotonic() - t0, 2)


def _top_outputs(ws: Path) -> dict[str, str]:
    out = {}
    for k in LINKS:
        for ext in (".cubin", ".manifest.json", ".report.json", ".map.txt"):
            p = ws / "bazel-bin" / f"{k[3:]}{ext}"
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_second_checkout_gets_every_action_from_the_remote_cache(remote):
    bg, used = remote
    env = venv_paths()
    assert env is not None

    # Checkout A: this repo. Cold: everything runs here and is uploaded to BuildGrid.
    ws_a, ob_a = ROOT / "a" / "ws", ROOT / "a" / "ob"
    _consumer(ws_a, REPO, env)
    used.append((ws_a, ob_a))
    t_a = _build(ws_a, ob_a, bg.url, ROOT / "a.json")
    a = _tally(_spawns(ROOT / "a.json"))
    assert a["CudaCompile"] == {"ran": 8}, a
    assert a["PipelinkPack"] == {"ran": 8}, a
    assert a["PipelinkLink"] == {"ran": len(LINKS)}, a

    # Checkout B: the same files at another path, another consumer workspace, a fresh output
    # base, and its interpreter and toolkit at other paths (a venv reached through another
    # folder, as a second clone's .venv of the same lock is): a clean build takes every compile,
    # pack and link from the remote cache, since no action key holds a machine path.
    pl_b, ws_b, ob_b = ROOT / "b" / "pipelink", ROOT / "b" / "ws", ROOT / "b" / "ob"
    _copy_checkout(pl_b)
    venv_b = ROOT / "b" / "venv"
    venv_b.symlink_to(REPO / ".venv", target_is_directory=True)
    env_b = {k: v.replace(str(REPO / ".venv"), str(venv_b)) for k, v in env.items()}
    assert env_b != env, env
    _consumer(ws_b, pl_b, env_b)
    used.append((ws_b, ob_b))
    t_b = _build(ws_b, ob_b, bg.url, ROOT / "b.json")
    b = _tally(_spawns(ROOT / "b.json"))
    summary = {"server": "buildgrid 0.9.1", "checkout_a_cold": a, "checkout_b_clean": b,
               "wall_s": {"a_cold": t_a, "b_clean_remote": t_b}}
    (ROOT / "remote_cache_hits.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\nremote cache:", json.dumps(summary, sort_keys=True))
    assert b["CudaCompile"] == {"remote_hit": 8}, b
    assert b["PipelinkPack"] == {"remote_hit": 8}, b
    assert b["PipelinkLink"] == {"remote_hit": len(LINKS)}, b
    assert all(set(c) == {"remote_hit"} for c in b.values()), b
    assert _top_outputs(ws_a) == _top_outputs(ws_b)
