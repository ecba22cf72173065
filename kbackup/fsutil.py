"""Small durable-file helpers for local disks.

``atomic_write`` publishes a whole file by writing a temporary sibling,
fsyncing it, renaming it over the target and fsyncing the directory: a
reader sees the old file or the new one, never a mix, and after it returns
the new file survives a power loss.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".kbackup-tmp"


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once (see module docstring)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)
