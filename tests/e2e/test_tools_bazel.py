"""tools/bazel without root: the sid root runs in a user + mount namespace, no host mounts.

  * a command run in the root (`--pipelink-exec`) leaves no mount in the host's namespace;
  * an ordinary user (uid 65534 through setpriv, when this test runs as root) enters the root:
    uid 0 inside the namespace, sid's python3, its own output root;
  * the namespace's holder process exits once nothing runs in it.
Skips (with the reason) without the Bazel root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BAZEL = REPO / "tools" / "bazel"


def _paths(env=None) -> dict[str, str]:
    out = subprocess.run([str(BAZEL), "--pipelink-paths"], capture_output=True, text=True, env=env, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _reason() -> str | None:
    if shutil.which("bazel") and not os.environ.get("PIPELINK_FORCE_SIDROOT"):
        return "a host Bazel is used; the sid root is not"
    root = Path(_paths()["SIDROOT"])
    if not (root / ".pipelink-root-ready").exists():
        return f"no Bazel root at {root} (run `bash tools/setup.sh`)"
    return None


_REASON = _reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _mounts() -> set[str]:
    return set(subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split())


def _holder_gone(output_root: str, timeout: float = 40) -> bool:
    pid_file = Path(output_root) / ".ns" / "holder.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return True
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(1)
    return False


def test_exec_leaves_no_host_mounts():
    before = _mounts()
    res = subprocess.run([str(BAZEL), "--pipelink-exec", "python3", "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith("(3, 1"), res.stdout  # sid's python3 (3.14), not the host's
    new = _mounts() - before
    assert not new, f"tools/bazel left mounts in the host namespace: {sorted(new)[:10]}"


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root to become uid 65534 with setpriv")
def test_ordinary_user_enters_the_root():
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is missing")
    # The checkout may be private to root: give the user its own copy of the launcher.
    top = Path(tempfile.mkdtemp(prefix="pipelink-nonroot-", dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "tools").mkdir()
        shutil.copy2(BAZEL, top / "tools" / "bazel")
        shutil.copytree(REPO / "third_party" / "bazel_stubs", top / "third_party" / "bazel_stubs")
        home = top / "home"
        home.mkdir()
        for root, dirs, files in os.walk(top):
            for n in dirs + files:
                os.chown(os.path.join(root, n), 65534, 65534)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PIPELINK_SIDROOT": _paths()["SIDROOT"]}
        user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        before = _mounts()
        res = subprocess.run(user + [str(top / "tools" / "bazel"), "--pipelink-exec", "sh", "-c", "id -u; python3 -V"],
                             capture_output=True, text=True, env=env, cwd=home, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.split()[0] == "0", res.stdout  # root inside the namespace only
        assert "Python 3." in res.stdout
        assert not (_mounts() - before)
        out_root = subprocess.run(user + [str(top / "tools" / "bazel"), "--pipelink-paths"], capture_output=True,
                                  text=True, env=env, check=True).stdout
        out_root = dict(x.split("=", 1) for x in out_root.splitlines())["OUTPUT_ROOT"]
        assert out_root.startswith(str(home)), out_root  # the user's own output root
        assert _holder_gone(out_root), "the namespace holder did not exit after its last process"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_checkout_replaced_at_the_same_path_runs_again():
    """A checkout deleted and cloned again at the same path while the namespace lives (a CI
    clone redone): its old bind holds the deleted directory, and the wrapper binds the new one."""
    top = Path(tempfile.mkdtemp(prefix="pipelink-replaced-", dir="/tmp"))

    def make():
        (top / "tools").mkdir(parents=True)
        shutil.copy2(BAZEL, top / "tools" / "bazel")
        shutil.copytree(REPO / "third_party" / "bazel_stubs", top / "third_party" / "bazel_stubs")
        (top / "MODULE.bazel").write_text("")

    def run():
        return subprocess.run([str(top / "tools" / "bazel"), "--pipelink-exec", "ls", str(top)], capture_output=True,
                              text=True, cwd=top, timeout=120)

    try:
        make()
        first = run()
        assert first.returncode == 0 and "MODULE.bazel" in first.stdout, first.stderr
        shutil.rmtree(top)
        make()
        (top / "again").write_text("")
        second = run()
        assert second.returncode == 0, second.stderr
        assert "again" in second.stdout, second.stdout  # the new directory, not the deleted one
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("bad", ["/tmp/pl out", "/tmp/pl\nout", "/tmp/pl'out", '/tmp/pl"out', "/tmp/pl\\out", "/tmp/pl\tout"])
def test_a_path_the_bazelrc_cannot_carry_is_refused(tmp_path, bad):
    """The output root (and the checkout, the sid root) go unquoted into the root's bazelrc and its
    bind mounts: a space, quote, backslash or control character is refused, exit 2 with a fix,
    before anything is created there."""
    env = {**os.environ, "PIPELINK_BAZEL_OUTPUT_ROOT": bad, "PIPELINK_FORCE_SIDROOT": "1"}
    p = subprocess.run([str(BAZEL), "version"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "OUTPUT_ROOT" in p.stderr and "Fix:" in p.stderr, p.stderr
    assert not os.path.lexists(bad)
