"""Small durable-file helpers for local disks.

``atomic_write`` publishes a whole file by writing a temporary sibling,
fsyncing it, renaming it over the target and fsyncing the directory: a
reader sees the old file or the new one, never a mix, and after it returns
the new file survives a power loss. A failure (a full disk) removes the
temporary file and raises one :class:`~kbackup.errors.StorageError` naming
the file and the space it needed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from kbackup.errors import StorageError

TMP_SUFFIX = ".kbackup-tmp"


def disk_error(exc: OSError, path: Path, *, writing: int | None = None) -> StorageError:
    """The one-line error for a failed write to a local file: the file, and for a full disk the space it needed."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(path)
        needed = f"; it needed {writing} bytes more" if writing else ""
        return StorageError(
            f"{path}: no space left on its file system ({free} bytes free{needed}); free space and run again "
            "(what was written before is kept and the rerun goes on from it)"
        )
    return StorageError(f"{path}: cannot write: {exc.strerror or exc}")


def free_bytes(path: Path) -> int:
    """Bytes available to this user on the file system holding ``path`` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    stats = os.statvfs(probe)
    return stats.f_bavail * stats.f_frsize


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """Make everything written to the file system holding ``path`` durable, in one call.

    ``syncfs(2)`` on Linux (it returns once the file system's dirty data and
    metadata are on disk); ``sync(2)`` elsewhere. For many small files written
    without fsync: one call instead of one per file and directory.
    """
    import ctypes
    import ctypes.util

    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(path))
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once (see module docstring)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # no temporary file is left behind
        raise disk_error(exc, path, writing=len(data)) from None
