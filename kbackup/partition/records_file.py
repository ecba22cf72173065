"""A segment's records file as its plain v1 bytes, whether it is stored plain or compressed.

Every reader of records files opens them with :func:`open_records`: a plain
file is returned as the storage's own handle; a compressed one
(``formats/compressed-records.md``) as a handle whose ``size``, ``pread``
and ``stream`` are those of the plain bytes, decompressing one frame at a
time. So segment indexes, the catalog's time ranges, ``cat``, ``verify``,
the restore and ``index rebuild`` read both kinds, mixed in one partition.

:func:`compress_records_file` turns a finished local records file into its
compressed form, crash-safely: the compressed copy is written beside it and
synced, then renamed over it; at every instant the file is whole, one form or
the other.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import BinaryIO

from kbackup.format.frames import DEFAULT_FRAME_SIZE, FramedReader, compress_frames, is_framed
from kbackup.fsutil import TMP_SUFFIX, disk_error, fsync_dir
from kbackup.storage import Location, ReadHandle, storage_for
from kbackup.storage.base import PositionalRaw

#: Compression codecs ``--compression`` offers ("none" keeps the original tool's plain files).
COMPRESSIONS = ("none", "zstd", "lz4", "gzip")

_CHUNK = 1 << 20


class _FramedRaw(PositionalRaw):
    """A seekable raw stream over the plain bytes of a compressed file."""

    def __init__(self, frames: FramedReader) -> None:
        super().__init__(frames.size)
        self._frames = frames

    def fetch(self, length: int, position: int) -> bytes:
        return self._frames.pread(length, position)


class FramedHandle:
    """A :class:`~kbackup.storage.base.ReadHandle` over the plain bytes of a compressed records file."""

    def __init__(self, stored: ReadHandle, path: Location) -> None:
        self._stored = stored
        self.frames = FramedReader(stored.pread, stored.size, file=str(path))
        self.size = self.frames.size
        self.stream: BinaryIO = io.BufferedReader(_FramedRaw(self.frames), buffer_size=_CHUNK)

    @property
    def codec(self) -> str:
        return self.frames.table.codec

    def pread(self, length: int, position: int) -> bytes:
        return self.frames.pread(length, position)

    def refresh_size(self) -> int:
        return self.size  # a compressed file is finished: it never grows

    def close(self) -> None:
        self.stream.close()
        self._stored.close()


def open_records(path: Location) -> ReadHandle:
    """Open a records file for reading its plain bytes (see the module docstring)."""
    stored = storage_for(path).open_read(path)
    try:
        if stored.size >= 4 and is_framed(stored.pread(4, 0)):
            return FramedHandle(stored, path)
    except BaseException:
        stored.close()
        raise
    return stored


def compress_records_file(path: Path, codec: str, *, frame_size: int = DEFAULT_FRAME_SIZE, sync: bool = True) -> int:
    """Replace the plain records file ``path`` by its compressed form; return the stored size.

    A file already compressed is left as it is (a writer reopened after a crash may meet one).
    """
    with open(path, "rb") as plain:
        if is_framed(plain.read(4)):
            return os.fstat(plain.fileno()).st_size
        plain.seek(0)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        written = 0
        try:
            with open(tmp, "wb") as out:
                for piece in compress_frames(iter(lambda: plain.read(_CHUNK), b""), codec, frame_size=frame_size):
                    out.write(piece)
                    written += len(piece)
                out.flush()
                if sync:
                    os.fsync(out.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise disk_error(exc, path, writing=written) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    if sync:
        fsync_dir(path.parent)
    return written
