"""Reading input files: every way a path or its bytes can be wrong is an E-FILE with a hint.

A path given on the command line may be missing, a directory, unreadable, too long, contain a
NUL byte, name something that is not a regular file (a FIFO would block the read forever, a
device like /dev/zero never ends), be larger than any input of its kind, or hold text that is
not UTF-8. Each is the user's mistake, so each gets a coded diagnostic naming the path (and the
line of a bad byte), never a traceback, a hang or E-INTERNAL.
"""

from __future__ import annotations

import errno
import os
import stat

from pipelink.common.diagnostics import Fact, reject


MAX_INPUT_BYTES = 1 << 30  # objects, packages, cubins: far beyond any real one
MAX_TEXT_BYTES = 4 << 20  # contracts, kernel files, manifests: real ones are a few KB


class NotARegularFile(OSError):
    """The path names a FIFO, device, socket, or a file over the size limit of its kind."""


def special_kind(mode: int) -> str:
    """What a FIFO, device or socket is, in words; '' for anything else."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return ""


def read_regular(path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Opened without blocking, so a FIFO
    is refused instead of waiting forever for a writer. Raises OSError (NotARegularFile for
    special files and oversized ones) or ValueError (a NUL in the path)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"is {special_kind(st.st_mode) or 'not a regular file'}, not a regular file")
        if st.st_size > limit:  # a sparse 100 GB file is refused before reading any of it
            raise NotARegularFile(f"is larger than {limit} bytes, more than any input of its kind")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotARegularFile(f"is larger than {limit} bytes, more than any input of its kind")
    return data


def _why(e: BaseException) -> str:
    if isinstance(e, NotARegularFile):
        return str(e)
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


def control_chars(text: str) -> list[str]:
    """The C0 control characters and DEL in `text`, each as repr() writes it, once each, sorted: what
    cannot stand in one line of generated text or of a diagnostic."""
    return sorted({repr(c) for c in text if ord(c) < 32 or ord(c) == 127})


def display(path) -> str:
    """A path as diagnostics show it: NULs and other control characters escaped."""
    s = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    return s.encode("unicode_escape", "backslashreplace").decode("ascii") if any(ord(ch) < 32 for ch in s) else s


def read_bytes(path, what: str = "file", hint: str = "check the path", limit: int = MAX_INPUT_BYTES) -> bytes:
    try:
        return read_regular(path, limit)
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


def read_text(path, what: str = "file", hint: str = "check the path", limit: int = MAX_TEXT_BYTES) -> str:
    return decode_utf8(read_bytes(path, what, hint, limit), path, what)


def why_unreadable(e: BaseException) -> str:
    """The reason an input could not be read, in the words of E-FILE (for other codes' messages)."""
    return _why(e)
