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
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from spark_kafka_backup.errors import DecryptionKeyError, FormatError
from spark_kafka_backup.format.encryption import FileCipher, KeyRing, parse_key
from spark_kafka_backup.format.frames import DEFAULT_FRAME_SIZE, FramedReader, compress_frames, is_framed
from spark_kafka_backup.fsutil import TMP_SUFFIX, disk_error, fsync_dir, open_new_file
from spark_kafka_backup.storage import Location, ReadHandle, storage_for
from spark_kafka_backup.storage.base import PositionalRaw

#: Compression codecs ``--compression`` offers ("none" keeps the original tool's plain files).
COMPRESSIONS = ("none", "zstd", "lz4", "gzip")

#: No key: what a reader of a plain backup passes. Keys are never kept by a module: the command line's, a job's or a
#: task's :class:`~spark_kafka_backup.format.encryption.KeyRing` is handed to each reader that decrypts
#: (:func:`open_records`, :class:`~spark_kafka_backup.partition.reader.PartitionReader`, the catalog's writers).
NO_KEYS = KeyRing({})


def key_ring(kek: bytes | None) -> KeyRing:
    """The ring of a writer's one key (``None``: no key)."""
    return KeyRing.of([kek]) if kek is not None else NO_KEYS


def load_keys(sources: Iterable[tuple[str | None, str | None]]) -> KeyRing:
    """The ring of the keys named by ``(key file, environment variable)`` pairs (a task's or a scan's sources: key
    material never crosses to executors in a pickle, only where to find it)."""
    return KeyRing.of(load_key(file=file, env=env) for file, env in sources)


def load_key(*, file: str | Path | None = None, env: str | None = None) -> bytes:
    """A key-encryption key from a key file or an environment variable (see
    :func:`spark_kafka_backup.format.encryption.parse_key`)."""
    if file is not None:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise DecryptionKeyError(f"cannot read the key file {file}: {exc.strerror or exc}") from exc
        return parse_key(data, source=f"the key file {file}")
    if env is not None:
        value = os.environb.get(env.encode())
        if not value:
            raise DecryptionKeyError(f"the environment variable {env} (the encryption key) is not set")
        return parse_key(value, source=f"the environment variable {env}")
    raise DecryptionKeyError("no key: give a key file or an environment variable")


_CHUNK = 1 << 20


class _FramedRaw(PositionalRaw):
    """A seekable raw stream over the plain bytes of a compressed file."""

    def __init__(self, frames: FramedReader) -> None:
        super().__init__(frames.size)
        self._frames = frames

    def fetch(self, length: int, position: int) -> bytes:
        return self._frames.pread(length, position)


class FramedHandle:
    """A :class:`~spark_kafka_backup.storage.base.ReadHandle` over the plain bytes of a compressed records file."""

    def __init__(self, stored: ReadHandle, path: Location, keys: KeyRing) -> None:
        self._stored = stored
        self.frames = FramedReader(stored.pread, stored.size, file=str(path), keys=keys)
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


def is_sealed(records: ReadHandle) -> bool:
    """Whether an open records file is encrypted (then written whole: every plain byte after the magic byte is in a
    record its index lists)."""
    return isinstance(records, FramedHandle) and records.frames.key_id is not None


def refuse_unindexed(file: str, start: int, stop: int) -> None:
    """Bytes ``start..stop-1`` of a sealed segment lie outside every record its index lists: the index was changed
    (its entries are not authenticated; the records are), so what it lists cannot be trusted."""
    raise FormatError(
        f"bytes {start}..{stop - 1} of a sealed segment are not in any record its index lists: the index was changed "
        "(a sealed segment is written whole)",
        file=file,
    )


def open_records(path: Location, keys: KeyRing = NO_KEYS) -> ReadHandle:
    """Open a records file for reading its plain bytes (see the module docstring); ``keys``: those a sealed file may
    be decrypted with (asked for at its first read: its size and frame table need none)."""
    stored = storage_for(path).open_read(path)
    try:
        if stored.size >= 4 and is_framed(stored.pread(4, 0)):
            return FramedHandle(stored, path, keys)
    except BaseException:
        stored.close()
        raise
    return stored


def compress_records_file(
    path: Path,
    codec: str,
    *,
    frame_size: int = DEFAULT_FRAME_SIZE,
    sync: bool = True,
    encryption_key: bytes | None = None,
) -> int:
    """Replace the plain records file ``path`` by its compressed form (sealed with a new data key wrapped by
    ``encryption_key`` when given; ``codec`` may then be ``none``); return the stored size.

    A file already compressed is left as it is (a writer reopened after a crash may meet one).
    """
    cipher = FileCipher.new(encryption_key) if encryption_key is not None else None
    with open(path, "rb") as plain:
        if is_framed(plain.read(4)):
            return os.fstat(plain.fileno()).st_size
        plain.seek(0)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        written = 0
        try:
            with open_new_file(tmp) as out:
                chunks = iter(lambda: plain.read(_CHUNK), b"")
                for piece in compress_frames(chunks, codec, frame_size=frame_size, cipher=cipher):
                    out.write(piece)
                    written += len(piece)
                out.flush()
                if sync:
                    os.fsync(out.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise disk_error(exc, path, writing=written) from exc
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    if sync:
        fsync_dir(path.parent)
    return written
