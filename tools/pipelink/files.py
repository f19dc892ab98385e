"""Reading input files: every way a path or its bytes can be wrong is an E-FILE with a hint.

A path given on the command line may be missing, a directory, unreadable, too long, contain a
NUL byte, or hold text that is not UTF-8. Each is the user's mistake, so each gets a coded
diagnostic naming the path (and the line of a bad byte), never a traceback or E-INTERNAL.
"""

from __future__ import annotations

import errno
import os

from pipelink.diagnostics import Fact, reject


def _why(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(e, NotADirectoryError):
        return "a folder on its path is a file"
    if isinstance(e, PermissionError):
        return "permission denied"
    if isinstance(e, ValueError):  # os functions refuse an embedded NUL this way
        return "the path contains a NUL byte"
    if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:
        return "the path or one of its names is too long"
    if isinstance(e, OSError) and e.errno == errno.ELOOP:
        return "too many symbolic links on the path"
    return f"cannot read it ({e.__class__.__name__}: {getattr(e, 'strerror', None) or e})"


def display(path) -> str:
    """A path as diagnostics show it: NULs and other control characters escaped."""
    s = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    return s.encode("unicode_escape", "backslashreplace").decode("ascii") if any(ord(ch) < 32 for ch in s) else s


def read_bytes(path, what: str = "file", hint: str = "check the path") -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError) as e:
        raise reject("E-FILE", f"{display(path)}: {_why(e)}", facts=[Fact(what, display(path))], hint=hint) from None


def decode_utf8(data: bytes, path, what: str = "file") -> str:
    """UTF-8 text, or E-FILE naming the line and byte of the first invalid sequence."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise reject("E-FILE", f"{display(path)}: not UTF-8 text (byte {e.start}, line {line}: {data[e.start:e.start + 1]!r})",
                     facts=[Fact(what, f"invalid UTF-8 at byte {e.start}", f"{display(path)}:{line}")],
                     hint="save the file as UTF-8 (contracts and kernel files are TOML, which is UTF-8)") from None


def read_text(path, what: str = "file", hint: str = "check the path") -> str:
    return decode_utf8(read_bytes(path, what, hint), path, what)
