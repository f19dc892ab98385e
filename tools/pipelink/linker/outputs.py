"""Writing outputs all-or-nothing.

Every command that writes files (pack, link) hands the whole set to `write_all`. The set is
first checked (`check_targets`: no directory, nothing under a file, no over-long name, no two
outputs on one path, no output on an input), so a bad `--out` costs no link and names the
problem as E-OUTPUT. Then each file is written into a staging folder created beside its
target (same file system, so the final rename is atomic), and only when every file is
written are the targets replaced; an earlier run's outputs are moved aside first and put
back if any rename fails (swap.py). Staging folders are always removed: no `*.tmp` is ever left;
those of a run that was killed (SIGKILL) are removed by the next run writing beside them, which
first finishes or undoes that run's swap (staging.py, swap.py).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from pipelink.common.diagnostics import Fact, reject
from pipelink.common.files import display, special_kind
from pipelink.linker.staging import new_stage, remove_stale_stages
from pipelink.linker.swap import Entry, plan, roll_back, swap, write_plans

NAME_MAX = 255  # bytes in one path component (Linux, and the limit of most file systems)
PATH_MAX = 4095


def _bad(path, why: str, hint: str, flag: str = "output"):
    return reject("E-OUTPUT", f"{display(path)}: {why}", facts=[Fact(flag, display(path))], hint=hint)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def _special_kind(p: str) -> str:
    """'' for a missing path or a regular file (or a link to one), else what the path is."""
    try:
        return special_kind(os.stat(p).st_mode)
    except (OSError, ValueError):
        return ""


def check_targets(targets: list[tuple[str, str]], inputs: list[str] = ()) -> None:
    """targets: (flag, path). Reject any path that cannot be written as a plain file."""
    seen: dict[str, tuple[str, str]] = {}
    for flag, path in targets:
        p = str(path)
        if not p or "\0" in p:
            raise _bad(p, "not a usable path" if not p else "the path contains a NUL byte", "give a plain file path", flag)
        enc = os.fsencode(p)
        if len(enc) > PATH_MAX or any(len(part) > NAME_MAX for part in enc.split(b"/")):
            raise _bad(p, f"the path is too long (a name may have at most {NAME_MAX} bytes)",
                       "use a shorter output path or kernel name", flag)
        if os.path.isdir(p) or p.endswith("/"):
            raise _bad(p, "is a directory; an output must be a file path",
                       "name a file inside it (link --out-dir takes the directory)", flag)
        kind = _special_kind(p)
        if kind:  # replacing /dev/null or a FIFO with a regular file would break whatever uses it
            raise _bad(p, f"is {kind}; an output must be a regular file (it is replaced, not written into)",
                       "give a path of a regular file or of a file that does not exist yet", flag)
        parent = os.path.dirname(os.path.abspath(p))
        ancestor = parent
        while not os.path.exists(ancestor):
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor):
            raise _bad(p, f"{display(ancestor)} is a file, so nothing can be written under it",
                       "choose an output folder that is not a file", flag)
        if os.path.exists(ancestor) and not os.access(ancestor, os.W_OK | os.X_OK):
            raise _bad(p, f"{display(ancestor)} is not writable", "choose a writable output folder", flag)
        key = os.path.realpath(p)
        if key in seen:
            raise reject("E-OUTPUT", f"{seen[key][0]} and {flag} are the same path {display(p)}",
                         facts=[Fact(seen[key][0], display(seen[key][1])), Fact(flag, display(p))],
                         hint="give every output its own path")
        seen[key] = (flag, p)
        for i in inputs:
            if os.path.exists(p) and _same_file(p, str(i)):
                raise _bad(p, "is also an input of this command; writing it would destroy the input",
                           "write the output to another path", flag)


def write_all(items: list[tuple[str, bytes]], *, flags: list[str] | None = None, inputs: list[str] = ()) -> None:
    """Write every (path, data) or none. Raises E-OUTPUT (nothing changed) on failure."""
    flags = flags or ["output"] * len(items)
    check_targets(list(zip(flags, (p for p, _ in items))), inputs)
    created: list[Path] = []
    stages: dict[Path, Path] = {}
    entries: list[Entry] = []
    ok = False
    try:
        staged = []
        for n, (path, data) in enumerate(items):
            target = Path(os.path.abspath(path))
            for d in reversed([*target.parents]):
                if not d.exists():
                    d.mkdir()
                    created.append(d)
            if target.parent not in stages:
                remove_stale_stages(target.parent)  # those of runs that were killed (staging.py)
                # Short fixed names inside the stage: a long target name never makes a longer temp name.
                stages[target.parent] = new_stage(target.parent)
            tmp = stages[target.parent] / str(n)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            staged.append((tmp, target))
        entries = plan(staged)
        write_plans(entries)  # before the first rename: a sweep after SIGKILL finishes or undoes the swap
        swap(entries)
        ok = True
    except BaseException as e:  # an OSError, or an interrupt (Ctrl-C, SIGTERM) between two renames
        roll_back(entries)  # put an earlier run's outputs back
        if not isinstance(e, OSError):
            raise
        why = "the disk is full" if e.errno == errno.ENOSPC else f"{e.__class__.__name__}: {e.strerror or e}"
        raise reject("E-OUTPUT", f"writing the outputs failed ({why}); no output was changed",
                     facts=[Fact(f, display(p)) for f, (p, _) in zip(flags, items)],
                     hint="check the output paths and free space, then rerun") from None
    finally:
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)
        for d in reversed(created if not ok else []):  # folders made for a failed write
            try:
                d.rmdir()
            except OSError:
                pass
