"""Reading and writing the files a user names: never a hang, never a clobbered device.

Every path accel reads (a model, an artifact, a target file, an ``.npy``
input, a saved graph) must be a regular file: a named pipe would block the
read forever, a device would stream without end, a folder cannot be read.
It is checked before it is opened, opened without blocking and checked again
through the open descriptor (the path may have been swapped in between), and
its size is compared with the reader's budget before a byte is read.

Every path accel writes is checked before any work is done (its folder
exists and is writable; it is not a folder, a pipe, a socket or a block
device) and written atomically: a temporary file in the same folder, renamed
over the destination when complete, so a failed run leaves nothing
half-written. A symbolic link is followed (the file it names is replaced, the
link stays). A character device (``/dev/null``, a terminal) is written in
place: it cannot be renamed over without destroying it, and ``-o /dev/null``
is the usual way to discard an output.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from accel.errors import AccelError
from accel.limits import fmt_bytes

__all__ = ["check_output", "describe_special", "open_regular", "physical_memory", "read_regular", "write_output"]

PathLike = str | os.PathLike[str]


def describe_special(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (``"a folder"``), else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _stat_error(exc: OSError, label: str, error: type[AccelError], verb: str) -> AccelError:
    if isinstance(exc, FileNotFoundError):
        return error(f"{label} does not exist")
    if isinstance(exc, NotADirectoryError):
        return error(f"{label} does not exist (a folder on its path is a file)")
    return error(f"{label} cannot be {verb}: {exc.strerror or exc}")


@contextlib.contextmanager
def open_regular(path: PathLike, label: str, error: type[AccelError]) -> Iterator[BinaryIO]:
    """Open ``path`` for reading if it is a regular file; otherwise ``error`` naming ``label``.

    The open never blocks (a FIFO swapped in after the check opens at once and
    is refused through its descriptor). ``OSError`` raised while reading inside
    the block becomes ``error`` too.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _stat_error(exc, label, error, "read") from None
    except ValueError as exc:  # a NUL byte in the path
        raise error(f"{label} is not a valid path ({exc})") from None
    special = describe_special(st.st_mode)
    if special is not None:
        raise error(f"{label} is {special}, not a file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _stat_error(exc, label, error, "read") from None
    try:
        special = describe_special(os.fstat(fd).st_mode)
        if special is not None:
            raise error(f"{label} is {special}, not a file")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        try:
            yield f
        except OSError as exc:
            raise error(f"{label} cannot be read: {exc.strerror or exc}") from None


def read_regular(
    path: PathLike, label: str, error: type[AccelError], *, limit: int | None = None, why: str = ""
) -> bytes:
    """The bytes of the regular file ``path``, refused before reading when it is over ``limit`` bytes
    (``why`` says what the limit is, e.g. ``"an ONNX protobuf can hold"``)."""
    with open_regular(path, label, error) as f:
        size = os.fstat(f.fileno()).st_size
        if limit is not None and size > limit:
            raise error(f"{label} is {fmt_bytes(size)}, more than the {fmt_bytes(limit)} {why or 'accepted'}")
        data = f.read()
    return data


def check_output(path: PathLike, label: str, error: type[AccelError]) -> None:
    """Refuse, before any work is done, an output path that cannot be written as a file.

    A missing file in a writable folder, a regular file (replaced) and a
    character device (written in place) are accepted.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise error(f"{label}: a folder on its path is a file") from None
    except OSError as exc:
        raise error(f"{label} cannot be written: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise error(f"{label} is not a valid path ({exc})") from None
    if st is not None:
        if stat.S_ISCHR(st.st_mode):
            return  # written in place (/dev/null, a terminal)
        special = describe_special(st.st_mode)
        if special == "a folder":
            raise error(f"{label} is a folder; give a file name")
        if special is not None:
            raise error(f"{label} is {special}; give the name of a regular file (or a new one)")
    folder = Path(os.path.realpath(p)).parent if st is not None or p.is_symlink() else p.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise error(f"{label}: folder {str(folder)!r} {what}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"{label}: folder {str(folder)!r} is not writable")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_output(path: PathLike, label: str, error: type[AccelError], write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` by calling ``write(file)``: atomically for a file (a temporary file renamed over
    it, with the mode of any new file), in place for a character device. Returns ``path``.

    Nothing is ever renamed over a folder, pipe, socket or device, and a failure leaves no file behind.
    """
    p = Path(path)
    check_output(p, label, error)
    if p.exists() and stat.S_ISCHR(os.stat(p).st_mode):
        # made in memory first: a device cannot seek back, and a zip writer does (/dev/null's tell() stays 0)
        buf = io.BytesIO()
        write(buf)
        try:
            with open(p, "wb") as f:
                f.write(buf.getbuffer())
        except OSError as exc:
            raise error(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
        return p
    real = Path(os.path.realpath(p))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise error(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        # mkstemp makes the file 0600; an output is an ordinary file (0666 less the umask)
        os.chmod(tmp, 0o666 & ~_umask())
        # the destination may have changed since the check: never rename over anything but a file
        with contextlib.suppress(FileNotFoundError):
            special = describe_special(os.lstat(real).st_mode)
            if special is not None:
                raise error(f"{label} became {special} while it was being written; nothing was written")
        os.replace(tmp, real)
    except OSError as exc:
        raise error(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return p
