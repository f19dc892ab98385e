"""Swapping staged outputs into place so that a kill at any step can be undone or finished.

write_all stages every new file as `<stage>/<n>`; the swap moves each earlier output aside to
`<stage>/<n>.old` and renames `<stage>/<n>` onto its target, one output after the other. Before
the first rename, every stage gets a `plan`: the whole set's entries (stage, n, target, whether
an earlier output existed, and the staged file's device and inode, which the rename keeps).

An exception or signal (Ctrl-C, SIGTERM) rolls back in the process (`roll_back`). SIGKILL does
not let it, so the next run's sweep of the dead process's stage calls `recover`: if every new
file is on its target the swap had finished and the backups are dropped; otherwise each
earlier output is put back and each new file that had no earlier output removed. Both steps
look only at the files as they are (a backup still there, an inode on the target), so a
recovery that is itself killed is simply done again. A reader thus sees the complete earlier
set or the complete new set, never a mix or nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PLAN = "plan"


@dataclass(frozen=True)
class Entry:
    stage: Path
    n: int
    target: Path
    had_old: bool
    dev: int
    ino: int

    @property
    def new(self) -> Path:
        return self.stage / str(self.n)

    @property
    def backup(self) -> Path:
        return self.stage / f"{self.n}.old"

    def new_on_target(self) -> bool:
        try:
            st = os.lstat(self.target)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.dev, self.ino)


def plan(staged: list[tuple[Path, Path]]) -> list[Entry]:
    """staged: (stage/<n>, target) in the order they will be swapped."""
    entries = []
    for tmp, target in staged:
        st = os.lstat(tmp)
        entries.append(Entry(tmp.parent, int(tmp.name), target, os.path.lexists(target), st.st_dev, st.st_ino))
    return entries


def write_plans(entries: list[Entry]) -> None:
    """The plan into every stage, each complete or absent (renamed into place), before any swap."""
    text = json.dumps([{"stage": str(e.stage), "n": e.n, "target": str(e.target), "had_old": e.had_old,
                        "dev": e.dev, "ino": e.ino} for e in entries])
    for stage in dict.fromkeys(e.stage for e in entries):
        with open(stage / f"{PLAN}.tmp", "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename names it: a crash leaves it whole or absent
        os.replace(stage / f"{PLAN}.tmp", stage / PLAN)
        _fsync_dir(stage)  # ... and the name on disk before the first swap


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: some file systems refuse a folder's fsync)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def swap(entries: list[Entry]) -> None:
    for e in entries:
        if e.had_old:
            os.replace(e.target, e.backup)
        os.replace(e.new, e.target)
    for folder in dict.fromkeys(e.target.parent for e in entries):
        _fsync_dir(folder)  # the new names on disk before write_all reports success


def _undo(e: Entry) -> None:
    mine = e.new_on_target()
    if os.path.lexists(e.backup):
        if mine or not os.path.lexists(e.target):  # else a later run has written the target since
            os.replace(e.backup, e.target)
    elif not e.had_old and mine:
        os.unlink(e.target)


def roll_back(entries: list[Entry]) -> None:
    """Put the earlier outputs back; best effort, each entry on its own."""
    for e in reversed(entries):
        try:
            _undo(e)
        except OSError:
            pass


def read_plan(stage: Path, may_touch: Callable[[Path], bool]) -> list[Entry]:
    """The plan in `stage`, [] if there is none (the swap had not begun) or it is not one we wrote
    here: `stage` must be one of its stages (not a folder moved since), and every entry's stage
    must pass `may_touch` (the same dead maker's) and sit beside its target."""
    try:
        with open(stage / PLAN, encoding="utf-8") as f:
            raw = json.load(f)
        entries = [Entry(Path(d["stage"]), int(d["n"]), Path(d["target"]), bool(d["had_old"]), int(d["dev"]),
                         int(d["ino"])) for d in raw]
    except (OSError, ValueError, TypeError, KeyError):
        return []
    if stage not in {e.stage for e in entries}:
        return []
    if not all(e.stage.is_absolute() and e.stage.parent == e.target.parent and may_touch(e.stage) for e in entries):
        return []
    return entries


def recover(entries: list[Entry]) -> None:
    """Finish or undo the swap of a killed run (see the module's doc)."""
    if not all(e.new_on_target() and not os.path.lexists(e.new) for e in entries):
        roll_back(entries)
