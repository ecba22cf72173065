"""Small durable-file helpers for local disks.

``atomic_write`` publishes a whole file by writing a temporary sibling,
fsyncing it, renaming it over the target and fsyncing the directory: a
reader sees the old file or the new one, never a mix, and after it returns
the new file survives a power loss. A failure (a full disk) removes the
temporary file and raises one :class:`~spark_kafka_backup.errors.StorageError` naming
the file and the space it needed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import BinaryIO

from spark_kafka_backup.errors import StorageError

TMP_SUFFIX = ".kbackup-tmp"

#: What spark-kafka-backup takes away from the permissions of every file and directory it creates, unless ``--umask``
#: says otherwise: nothing for others, no writing for the group (files 0640, directories 0750). A backup holds every
#: record of its topics; it deserves the protection of the cluster it came from.
DEFAULT_UMASK = 0o027


def parse_umask(text: str) -> int:
    """An octal umask such as ``027`` or ``0077`` (what ``--umask`` takes)."""
    try:
        value = int(text, 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o777:
        raise ValueError(f"expected an octal umask between 000 and 777 (e.g. 027), got {text!r}")
    return value


def restrict_new_files(umask: int | None) -> int:
    """Set this process's umask: ``umask`` itself, or (None) the inherited one with :data:`DEFAULT_UMASK` added.

    Returns the umask now in force. Called where a spark-kafka-backup process starts writing: the job drivers, the Spark
    tasks on the executors (each a Python worker of their own), the CLI.
    """
    inherited = os.umask(0o077)
    chosen = (inherited | DEFAULT_UMASK) if umask is None else umask
    os.umask(chosen)
    return chosen


def world_writable(root: Path, *, limit: int = 5) -> tuple[int, list[Path]]:
    """How many of ``root`` and the files and directories below it others may write, and the first ``limit``."""
    import stat

    count = 0
    found: list[Path] = []
    for directory, dirs, files in os.walk(root):
        base = Path(directory)
        paths = [base] if base == root else []
        paths += [base / name for name in (*dirs, *files)]
        for path in paths:
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue  # removed meanwhile (a prune, a running backup's temporary file)
            if mode & stat.S_IWOTH and not stat.S_ISLNK(mode):
                count += 1
                if len(found) < limit:
                    found.append(path)
    return count, found


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


def open_new(path: Path, flags: int = os.O_WRONLY, mode: int = 0o644) -> int:
    """A new, empty file at ``path`` (a temporary file): whatever is there is removed first (a file left by a killed
    run, or a link someone planted: the link goes, never what it points to) and the file is created exclusively,
    without following links, so a link planted meanwhile is an error instead of a write elsewhere."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)


def open_new_file(path: Path) -> BinaryIO:
    """:func:`open_new` as a binary file object for writing."""
    return os.fdopen(open_new(path), "wb")


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once (see module docstring)."""
    os.close(_replace(path, data, sync=sync, lock=False))


def atomic_write_locked(path: Path, data: bytes) -> int:
    """:func:`atomic_write`, the new file locked (``flock``, exclusive) before it takes the name: a writer that opens
    it waits until the caller closes the returned descriptor."""
    return _replace(path, data, sync=True, lock=True)


def _replace(path: Path, data: bytes, *, sync: bool, lock: bool) -> int:
    """Write ``data`` under a temporary name, then rename it over ``path``; returns the new file's open descriptor."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    fd = -1
    try:
        fd = open_new(tmp, os.O_RDWR)
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # no temporary file is left behind
        raise disk_error(exc, path, writing=len(data)) from exc
    return fd
