"""Staging folders a killed run left (staging.py): the next write beside them removes those whose
process is gone, and never a live process's, another user's or host's, or one it cannot place.

write_all removes its staging folder on every exception and signal it sees, but SIGKILL is not
seen: before this, each killed pack or link left a `.pl-*` folder (with the staged outputs and
the earlier outputs it had moved aside) next to its outputs, for good.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelink.outputs import write_all
from pipelink.staging import host_key, start_time

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def stages(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".pl-"))


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid


def make_stage(d: Path, name: str) -> Path:
    s = d / name
    s.mkdir()
    (s / "0.old").write_bytes(b"an earlier output")
    return s


def test_sigkill_during_write_leaves_a_stage_the_next_write_removes(tmp_path):
    (tmp_path / "k.cubin").write_bytes(b"earlier")
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pipelink import outputs
        real = os.replace
        def replace(a, b):  # killed between moving the earlier output aside and renaming the new one
            real(a, b)
            os.kill(os.getpid(), signal.SIGKILL)
        outputs.os.replace = replace
        outputs.write_all([({str(tmp_path / 'k.cubin')!r}, b"new")])
        """)], env={**os.environ, "PYTHONPATH": str(TOOLS)})
    assert killed.returncode == -9
    left = stages(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".pl-{host_key()}-"), left

    write_all([(str(tmp_path / "k.cubin"), b"rerun")])
    assert stages(tmp_path) == [] and (tmp_path / "k.cubin").read_bytes() == b"rerun"


def test_only_stages_of_gone_processes_of_this_user_and_host_are_removed(tmp_path):
    me = os.getpid()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        host = host_key()
        other_host = "0" * 12 if host != "0" * 12 else "1" * 12
        removed = [make_stage(tmp_path, f".pl-{host}-{dead_pid()}-0-abc"),  # its process is gone
                   make_stage(tmp_path, f".pl-{host}-{me}-1-pidreused")]  # this pid, but started at another time
        kept = [make_stage(tmp_path, f".pl-{host}-{me}-{start_time(me) or 0}-mine"),  # this process's own
                make_stage(tmp_path, f".pl-{host}-{sleeper.pid}-{start_time(sleeper.pid) or 0}-live"),
                make_stage(tmp_path, f".pl-{other_host}-{dead_pid()}-0-elsewhere"),  # a shared file system
                make_stage(tmp_path, ".pl-k2j4xq1z"),  # the random name of earlier versions: maker unknown
                make_stage(tmp_path, f".pl-{host}-0-0-pidzero")]  # kill(0) would ask about our own group
        target = make_stage(tmp_path, "precious")
        link = tmp_path / f".pl-{host}-{dead_pid()}-0-alink"
        link.symlink_to(target)  # named like a stale stage, but a link: neither it nor what it names goes
        plain = tmp_path / f".pl-{host}-{dead_pid()}-0-afile"
        plain.write_text("not a folder")
        if os.getuid() == 0:  # another user's stage of a gone process: not ours to remove
            other = make_stage(tmp_path, f".pl-{host}-{dead_pid()}-0-theirs")
            os.chown(other, 54321, 54321)
            kept.append(other)

        write_all([(str(tmp_path / "out.bin"), b"x")])
        assert not any(p.exists() for p in removed)
        assert all((p / "0.old").exists() for p in kept)
        assert link.is_symlink() and (target / "0.old").exists() and plain.exists()
        assert (tmp_path / "out.bin").read_bytes() == b"x"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stage_name_says_who_made_it(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def spy(a, b):
        seen.append(Path(a).parent.name)
        real(a, b)

    monkeypatch.setattr("pipelink.outputs.os.replace", spy)
    write_all([(str(tmp_path / "a"), b"1")])
    assert seen and seen[0].startswith(f".pl-{host_key()}-{os.getpid()}-{start_time(os.getpid()) or 0}-")
    assert stages(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_start_time_reads_proc():
    assert start_time(os.getpid()) and start_time(dead_pid()) is None
