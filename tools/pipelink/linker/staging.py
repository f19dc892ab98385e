"""The staging folders of `outputs.write_all`, and removing those a killed run left behind.

write_all stages its files in a folder beside each target and removes it on success, failure,
Ctrl-C and SIGTERM; SIGKILL, the OOM killer or a crash of the interpreter leave it. So a folder's
name says who made it: `.pl-<host>-<pid>-<start>-<random>`, where <host> is a digest of this
boot and PID namespace and <start> the process's start time (/proc/<pid>/stat, clock ticks since
boot; 0 where unknown). Before staging into a folder, write_all removes the staging folders there
that are stale: a real directory (not a link), owned by this user, made on this host and PID
namespace, whose process is gone (no process has that pid, or the one that has it started at
another time: the pid was reused). If the dead run was swapping its outputs into place, the
swap is first finished or undone from the plan it left (swap.py), in every folder it staged in.
Never touched: a live process's folder, another user's, and names of another form. A folder
made under another <host> (before a reboot, in another container, or on another machine
sharing the file system) cannot have its process asked about: it goes, as a legacy one does,
only once untouched for LEGACY_AGE_S.

Legacy folders: pipelink before this naming staged in `.pl-` + 8 random characters, so their
maker cannot be known. One is removed only when nothing in it (the folder or an entry in it)
was modified for LEGACY_AGE_S: such a folder lives only while write_all renames files already
in memory (seconds), and this pipelink never makes a name of that form. It holds no plan, so an
earlier output it holds cannot be put back: it was a build output, which the next build remakes.
The same naming and rules serve the scratch folders in the temporary directory (scratch.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from pipelink.linker.swap import read_plan, recover

PREFIX = ".pl-"
LEGACY_AGE_S = 24 * 3600
_LEGACY_STAGE = re.compile(r"^\.pl-[a-z0-9_]{8}$")  # tempfile.mkdtemp(prefix=".pl-") of earlier versions


def _maker_name(prefix: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(prefix)}([0-9a-f]{{12}})-([1-9][0-9]{{0,9}})-([0-9]{{1,20}})-[A-Za-z0-9_]+$")


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


@lru_cache(maxsize=1)
def host_key() -> str:
    """Same for every process of this boot and PID namespace, different elsewhere."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    boot = _read("/proc/sys/kernel/random/boot_id").strip()
    node = os.uname().nodename
    return hashlib.sha256(f"{boot}\0{pid_ns}\0{node}".encode()).hexdigest()[:12]


def start_time(pid: int) -> int | None:
    """The process's start time (field 22 of /proc/<pid>/stat), None if unknown or no such process."""
    text = _read(f"/proc/{pid}/stat")
    fields = text[text.rfind(")") + 2:].split() if ")" in text else []
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def maker_prefix(prefix: str) -> str:
    """`<prefix><host>-<pid>-<start>-`: the start of the name of a folder this process makes."""
    pid = os.getpid()
    return f"{prefix}{host_key()}-{pid}-{start_time(pid) or 0}-"


def new_stage(parent: Path) -> Path:
    """A fresh staging folder in `parent`, named after this process (see the module's doc)."""
    return Path(tempfile.mkdtemp(prefix=maker_prefix(PREFIX), dir=parent))


def _process_gone(pid: int, started: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists (pid >= 1 by the name's pattern)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # EPERM: it exists, as another user's process
        return False
    now = start_time(pid)
    return bool(started) and now is not None and now != started


def own_folder(path) -> bool:
    """A real directory (not a link) owned by this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _untouched_for(path: str, age_s: float, now: float) -> bool:
    """Neither the folder nor any entry in it was modified in the last `age_s` seconds."""
    try:
        newest = max([os.lstat(path).st_mtime] + [e.stat(follow_symlinks=False).st_mtime for e in os.scandir(path)])
    except OSError:
        return False
    return now - newest > age_s


def stale_folders(parent: Path, prefix: str, legacy: re.Pattern, now: float | None = None) -> list[Path]:
    """The folders in `parent` named `prefix`+maker whose maker is gone, and those of another
    <host> and legacy ones (names matching `legacy`) untouched for LEGACY_AGE_S; only this user's
    real directories."""
    found = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    pattern, now = _maker_name(prefix), time.time() if now is None else now
    for entry in entries:
        m = pattern.match(entry.name)
        if m and m.group(1) == host_key():
            stale = _process_gone(int(m.group(2)), int(m.group(3)))
        elif m:  # another boot, container or host: whether its maker lives cannot be asked
            stale = _untouched_for(entry.path, LEGACY_AGE_S, now)
        else:
            stale = bool(legacy.match(entry.name)) and _untouched_for(entry.path, LEGACY_AGE_S, now)
        if stale and own_folder(entry.path):
            found.append(Path(entry.path))
    return found


def stale_stages(parent: Path, now: float | None = None) -> list[Path]:
    """The staging folders in `parent` whose maker is gone (the module's doc says which those are)."""
    return stale_folders(parent, PREFIX, _LEGACY_STAGE, now)


def remove_stale_stages(parent: Path) -> None:
    """Finish or undo a dead run's swap, then remove its stages; best effort (another run may be
    removing them too)."""
    for stage in stale_stages(parent):
        maker = stage.name[:stage.name.rfind("-") + 1]  # the same dead process's stages beside other targets
        # A stage of that run already removed (after its recovery) still names its targets.
        entries = read_plan(stage, lambda s: s.name.startswith(maker) and (own_folder(s) or not os.path.lexists(s))) \
            if maker != PREFIX else []
        recover(entries)
        for s in dict.fromkeys([stage, *(e.stage for e in entries)]):
            if own_folder(s):
                shutil.rmtree(s, ignore_errors=True)  # does not follow links inside the folder
