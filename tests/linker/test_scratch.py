"""Scratch folders in the temporary directory (scratch.py): named after their process, removed by
the next run once that process is gone, and E-TEMP where none can be made.

Before, link, pack, rebuild, plainlink and sass used tempfile.TemporaryDirectory and
NamedTemporaryFile: a SIGKILL (Bazel's hard kill, the OOM killer) left `/tmp/pipelink-link-*`
with the generated source and objects for good, and an unwritable TMPDIR was E-INTERNAL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TOY
from pipelink.linker import scratch
from pipelink.linker.scratch import scratch_dir, scratch_file
from pipelink.linker.staging import LEGACY_AGE_S, host_key

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch) -> Path:
    """The temporary directory of this process (and its children) is a fresh folder."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    monkeypatch.setenv("TMPDIR", str(d))
    scratch._swept.cache_clear()
    yield d
    scratch._swept.cache_clear()


def folders(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_no_other_temporary_files_are_made():
    """scratch.py is the one maker of temporary files (staging.py makes output stages), in the
    linker and in the experiment's plain linker, which runs the linker's passes."""
    made = re.compile(r"\b(TemporaryDirectory|NamedTemporaryFile|TemporaryFile|SpooledTemporaryFile|mkdtemp|mkstemp)\b")
    sources = [*(TOOLS / "pipelink").rglob("*.py"), ROOT / "experiments" / "symbol_link" / "plainlink.py"]
    found = [f"{f.relative_to(ROOT)}:{n}" for f in sorted(sources)
             if f.name not in ("scratch.py", "staging.py")
             for n, line in enumerate(f.read_text().splitlines(), 1) if made.search(line)]
    assert not found, found


def test_scratch_folder_is_named_after_its_process_and_removed(tmpdir_here):
    with scratch_file("sass", "input.cubin", b"x") as f:
        assert f.read_bytes() == b"x"
        assert f.parent.name.startswith(f"pipelink-{host_key()}-{os.getpid()}-")
        assert f.parent.parent == tmpdir_here
    assert folders(tmpdir_here) == []


def test_sigkill_during_pack_leaves_a_folder_the_next_run_removes(tmpdir_here, tmp_path, toy):
    pack = ["pack", "--contract", str(TOY / "producer.contract.toml"), "--object", str(toy.objects["producer"])]
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pipelink.linker import cli, trial
        def run_tool(*a, **k):  # killed while nvcc would be compiling into the scratch folder
            os.kill(os.getpid(), signal.SIGKILL)
        trial.run_tool = run_tool
        trial._TRIAL_OBJECTS.clear()
        cli.main({[*pack, "--out", str(tmp_path / "killed.plpkg")]!r})
        """)], env={**os.environ, "PYTHONPATH": str(TOOLS), "TMPDIR": str(tmpdir_here)})
    assert killed.returncode == -9
    left = folders(tmpdir_here)
    assert len(left) == 1 and left[0].startswith(f"pipelink-{host_key()}-") and "pack_" in left[0], left

    # The next run in a fresh process, as the next Bazel action would be (in this one, state
    # of earlier tests, such as a cached trial compile, could spare it every scratch folder).
    again = _pack_in_fresh_process([*pack, "--out", str(tmp_path / "p.plpkg")], tmpdir_here)
    assert again.returncode == 0, again.stdout + again.stderr
    assert folders(tmpdir_here) == [] and (tmp_path / "p.plpkg").exists() and not (tmp_path / "killed.plpkg").exists()


def test_only_dead_processes_and_old_legacy_folders_are_removed(tmpdir_here):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        dead = subprocess.Popen([sys.executable, "-c", ""])
        dead.wait()
        host = host_key()
        gone = [f"pipelink-{host}-{dead.pid}-0-link_abc", "pipelink-pack-k2j4xq1z"]
        kept = [f"pipelink-{host}-{sleeper.pid}-0-link_live", f"pipelink-{'0' * 12 if host != '0' * 12 else '1' * 12}-{dead.pid}-0-link_x",
                "pipelink-rebuild-recent0", "pipelink-nvcc", "pipelink-other-k2j4xq1z", "unrelated"]
        for name in gone + kept:
            (tmpdir_here / name).mkdir()
            (tmpdir_here / name / "generated.cu").write_text("x")
        t = time.time() - LEGACY_AGE_S - 60
        for name in ("pipelink-pack-k2j4xq1z", "pipelink-nvcc", "pipelink-other-k2j4xq1z"):
            for p in (tmpdir_here / name / "generated.cu", tmpdir_here / name):
                os.utime(p, (t, t))
        with scratch_dir("link"):
            pass
        assert folders(tmpdir_here) == sorted(kept)
    finally:
        sleeper.kill()
        sleeper.wait()


def _pack_in_fresh_process(args: list[str], tempdir: Path) -> subprocess.CompletedProcess:
    """`pipelink <args>` in a new interpreter whose tempfile.tempdir is `tempdir` (set directly:
    with TMPDIR alone, Python falls back to /tmp when the folder is unusable)."""
    code = f"import sys, tempfile; tempfile.tempdir = {str(tempdir)!r}; from pipelink.linker import cli; sys.exit(cli.main({args!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(TOOLS), "TMPDIR": str(tempdir)})


def test_unusable_temporary_directory_is_e_temp(tmp_path, toy):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "p.plpkg"
    run = _pack_in_fresh_process(["pack", "--contract", str(TOY / "consumer.contract.toml"), "--object",
                                  str(toy.objects["consumer"]), "--out", str(out), "--format", "json"],
                                 tmp_path / "afile" / "tmp")  # under a file: nothing can be made
    rc, text = run.returncode, run.stdout
    assert rc == 1 and '"code": "E-TEMP"' in text and "afile/tmp" in text and '"hint": "free space' in text, run.stderr
    assert not out.exists()


def test_a_write_failing_inside_the_scratch_folder_is_e_temp(tmpdir_here):
    from pipelink.common.diagnostics import Rejected

    with pytest.raises(Rejected) as e:
        with scratch_dir("link") as d:
            raise OSError(28, "No space left on device", str(d / "generated.o"))
    assert e.value.codes == ["E-TEMP"] and "is full" in e.value.diagnostics[0].message
    assert folders(tmpdir_here) == []
    with pytest.raises(OSError):  # an error about another path is not the temporary directory's
        with scratch_dir("link"):
            raise OSError(2, "No such file or directory", "/elsewhere/nvcc")
