"""Scratch folders for intermediate files (generated source, objects, PTX, a cubin for cuobjdump).

They live in the temporary directory (TMPDIR, else /tmp) and are removed when the work is
done, on failure, Ctrl-C and SIGTERM. SIGKILL or a crash leaves one, so each is named like a
staging folder (staging.py): `pipelink-<host>-<pid>-<start>-<kind>_<random>`, and the first
scratch folder a process makes removes the stale ones there: this user's, of this host and PID
namespace, whose process is gone. Those of another boot, container or host, and those of
pipelink before this naming (`pipelink-{link,pack,rebuild,plain}-` and 8 random characters),
go once untouched for staging.LEGACY_AGE_S. Nothing else in the temporary directory is looked at.

A scratch folder that cannot be made or written (the temporary directory missing, read-only or
full) is E-TEMP, naming the folder, instead of an internal error.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from pipelink.common.diagnostics import Fact, reject
from pipelink.common.files import display
from pipelink.linker.staging import maker_prefix, stale_folders

PREFIX = "pipelink-"
_LEGACY = re.compile(r"^pipelink-(link|pack|rebuild|plain)-[a-z0-9_]{8}$")  # TemporaryDirectory of earlier versions


@lru_cache(maxsize=None)
def _swept(root: str) -> bool:
    """Remove the stale scratch folders in `root`, once per process (best effort)."""
    for folder in stale_folders(Path(root), PREFIX, _LEGACY):
        shutil.rmtree(folder, ignore_errors=True)  # does not follow links inside the folder
    return True


def _temp_error(where: str, e: OSError):
    why = "it is full" if e.errno == errno.ENOSPC else f"{e.__class__.__name__}: {e.strerror or e}"
    return reject("E-TEMP", f"a scratch folder in {display(where)} cannot be made or written ({why})",
                  facts=[Fact("temporary directory", display(where))],
                  hint="free space there, or point TMPDIR at a writable folder with space, then rerun")


@contextmanager
def scratch_dir(kind: str) -> Iterator[Path]:
    """A fresh scratch folder, removed afterwards. An OSError on a path inside it is E-TEMP."""
    root = os.environ.get("TMPDIR") or "/tmp"  # named in the diagnostic if gettempdir() finds none
    try:
        root = tempfile.gettempdir()
        _swept(root)
        folder = Path(tempfile.mkdtemp(prefix=f"{maker_prefix(PREFIX)}{kind}_", dir=root))
    except OSError as e:
        raise _temp_error(root, e) from None
    try:
        yield folder
    except OSError as e:
        if not str(e.filename or "").startswith(str(folder) + os.sep):
            raise
        raise _temp_error(root, e) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch_file(kind: str, name: str, data: bytes) -> Iterator[Path]:
    """`data` as the file `name` in a fresh scratch folder (for a tool that reads only paths)."""
    with scratch_dir(kind) as folder:
        path = folder / name
        path.write_bytes(data)
        yield path
