"""Staging folders a killed run left (staging.py): the next write beside them removes those whose
process is gone (or, made under another boot or host, untouched for a day), and never a live process's,
another user's, or one it cannot place.

write_all removes its staging folder on every exception and signal it sees, but SIGKILL is not
seen: before this, each killed pack or link left a `.pl-*` folder (with the staged outputs and
the earlier outputs it had moved aside) next to its outputs, for good.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipelink.linker.outputs import write_all
from pipelink.linker.staging import LEGACY_AGE_S, host_key, remove_stale_stages, start_time

TOOLS = Path(__file__).resolve().parents[2] / "tools"


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
        from pipelink.linker import outputs
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
                make_stage(tmp_path, ".pl-k2j4xq1z"),  # the random name of earlier versions, recent: maybe in use
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

    monkeypatch.setattr("pipelink.linker.outputs.os.replace", spy)
    write_all([(str(tmp_path / "a"), b"1")])
    assert seen and seen[0].startswith(f".pl-{host_key()}-{os.getpid()}-{start_time(os.getpid()) or 0}-")
    assert stages(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_start_time_reads_proc():
    assert start_time(os.getpid()) and start_time(dead_pid()) is None


# ---- a kill in the middle of the swap ---------------------------------------------------------------

OLD = {"a/x": b"old x", "b/z": b"old z"}  # a/y has no earlier output
NEW = {"a/x": b"new x", "a/y": b"new y", "b/z": b"new z"}
RENAMES = 2 + 2 + 1 + 2  # a plan into each of the two stages, then x: aside + in, y: in, z: aside + in


def outputs_now(root: Path) -> dict[str, bytes]:
    return {k: (root / k).read_bytes() for k in NEW if (root / k).exists()}


def kill_after_renames(root: Path, k: int) -> None:
    """A write_all of NEW over OLD, SIGKILLed after its k-th os.replace (before the first for k=0)."""
    for k_, v in OLD.items():
        (root / k_).parent.mkdir(exist_ok=True)
        (root / k_).write_bytes(v)
    items = [(str(root / name), data) for name, data in NEW.items()]
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pipelink.linker import outputs
        real, done = os.replace, [0]
        def replace(a, b):
            if done[0] == {k}:
                os.kill(os.getpid(), signal.SIGKILL)
            real(a, b)
            done[0] += 1
            if done[0] == {k}:
                os.kill(os.getpid(), signal.SIGKILL)
        outputs.os.replace = replace
        outputs.write_all({items!r})
        """)], env={**os.environ, "PYTHONPATH": str(TOOLS)})
    assert killed.returncode == -9


@pytest.mark.parametrize("k", range(RENAMES + 1))
def test_sweep_after_a_kill_at_any_step_of_the_swap_leaves_one_whole_set(tmp_path, k):
    """Before, the sweep deleted the dead run's stage with the earlier outputs it had moved aside:
    a kill between moving x aside and renaming the new x left no x at all."""
    kill_after_renames(tmp_path, k)
    remove_stale_stages(tmp_path / "a")  # the dead run's stage in b/ is recovered with a/'s ...
    assert outputs_now(tmp_path) == (NEW if k == RENAMES else OLD)
    assert stages(tmp_path / "a") == [] and (stages(tmp_path / "b") == []) == (k > 0)  # ... once a/ has a plan
    remove_stale_stages(tmp_path / "b")
    assert outputs_now(tmp_path) == (NEW if k == RENAMES else OLD) and stages(tmp_path / "b") == []


@pytest.mark.parametrize("k", [3, 4, 6])
def test_a_sweep_killed_while_recovering_is_done_again(tmp_path, k):
    kill_after_renames(tmp_path, k)
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pipelink.linker import staging
        real = os.replace
        def replace(a, b):  # the sweep's first restore done, then killed
            real(a, b)
            os.kill(os.getpid(), signal.SIGKILL)
        staging.os.replace = replace
        staging.remove_stale_stages({str(tmp_path / "b")!r})
        """)], env={**os.environ, "PYTHONPATH": str(TOOLS)})
    assert killed.returncode == -9
    remove_stale_stages(tmp_path / "b")
    assert outputs_now(tmp_path) == OLD and stages(tmp_path / "a") == [] and stages(tmp_path / "b") == []


def test_a_stage_of_the_run_already_gone_does_not_stop_the_recovery(tmp_path):
    kill_after_renames(tmp_path, 5)  # x and y replaced, z not yet moved aside
    for s in stages(tmp_path / "b"):
        shutil.rmtree(tmp_path / "b" / s)
    remove_stale_stages(tmp_path / "a")
    assert outputs_now(tmp_path) == OLD and stages(tmp_path / "a") == []


def test_recovery_never_overwrites_a_later_output(tmp_path):
    """A later run wrote x (its own stages were elsewhere) before the dead run's stage was swept:
    the dead run's backup of x is dropped, not put over the later output."""
    kill_after_renames(tmp_path, 3)  # x moved aside, its new file not yet in
    (tmp_path / "a" / "x").write_bytes(b"later x")
    remove_stale_stages(tmp_path / "a")
    assert outputs_now(tmp_path) == {**OLD, "a/x": b"later x"} and stages(tmp_path / "a") == []


# ---- legacy staging folders (.pl-XXXXXXXX) -----------------------------------------------------------

def age(path: Path, seconds: float) -> None:
    """Set the modification time of the folder and everything in it `seconds` back."""
    t = time.time() - seconds
    for p in [*path.iterdir(), path]:
        os.utime(p, (t, t), follow_symlinks=False)


def test_legacy_stages_are_removed_only_when_untouched_for_the_age_limit(tmp_path):
    old = make_stage(tmp_path, ".pl-k2j4xq1z")
    age(old, LEGACY_AGE_S + 60)
    recent = make_stage(tmp_path, ".pl-a_b3c4d5")
    age(recent, LEGACY_AGE_S - 600)
    touched = make_stage(tmp_path, ".pl-zzzzzzzz")
    age(touched, LEGACY_AGE_S + 60)
    os.utime(touched / "0.old")  # written into a minute ago: a run of an old pipelink may be in it
    other = [make_stage(tmp_path, n) for n in (".pl-k2j4xq1zz", ".pl-K2J4XQ1Z", ".pl-k2j4-q1z", "pl-k2j4xq1z")]
    for o in other:
        age(o, LEGACY_AGE_S + 60)
    precious = make_stage(tmp_path, "precious")
    link = tmp_path / ".pl-linklink"
    link.symlink_to(precious)
    age(precious, LEGACY_AGE_S + 60)
    os.utime(link, (time.time() - LEGACY_AGE_S - 60,) * 2, follow_symlinks=False)

    write_all([(str(tmp_path / "out.bin"), b"x")])
    assert not old.exists()
    assert all((p / "0.old").exists() for p in [recent, touched, *other, precious])
    assert link.is_symlink()


def test_stages_of_another_boot_or_host_go_once_untouched_for_the_age_limit(tmp_path):
    """Before, a stage named for another boot, container or host was never removed: after a
    reboot (a new boot id) the stages a crash left stayed for good, their plans never recovered."""
    host = host_key()
    other_host = "0" * 12 if host != "0" * 12 else "1" * 12
    old = make_stage(tmp_path, f".pl-{other_host}-{dead_pid()}-7-rebooted")
    age(old, LEGACY_AGE_S + 60)
    recent = make_stage(tmp_path, f".pl-{other_host}-{dead_pid()}-7-shared")  # may be a live run elsewhere
    age(recent, LEGACY_AGE_S - 600)
    write_all([(str(tmp_path / "out.bin"), b"x")])
    assert not old.exists() and (recent / "0.old").exists()


def test_a_stage_of_another_boot_has_its_swap_recovered(tmp_path):
    """A run killed mid-swap, then the boot changed: once its stages are old enough, the sweep
    puts the earlier outputs back from the plan, as for a dead process of this boot."""
    kill_after_renames(tmp_path, 3)  # x moved aside, its new file not yet in
    other_host = "0" * 12 if host_key() != "0" * 12 else "1" * 12
    for d in ("a", "b"):
        for s in stages(tmp_path / d):
            moved = tmp_path / d / s.replace(host_key(), other_host, 1)
            os.rename(tmp_path / d / s, moved)
            plan = moved / "plan"
            if plan.exists():  # the plan names the stages it was written in
                plan.write_text(plan.read_text().replace(host_key(), other_host))
            age(moved, LEGACY_AGE_S + 60)
    remove_stale_stages(tmp_path / "a")
    assert outputs_now(tmp_path) == OLD and stages(tmp_path / "a") == [] and stages(tmp_path / "b") == []
