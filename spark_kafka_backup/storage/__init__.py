"""Where a backup lives: a local directory or a prefix on S3, Google Cloud Storage or Azure Blob Storage, behind one
interface.

A location is a :class:`pathlib.Path` (local disk) or an :class:`ObjectPath` (``s3://bucket/prefix``,
``gs://bucket/prefix``, ``az://container/prefix``); :func:`parse_location` picks by URI scheme and
:func:`storage_for` returns the :class:`~spark_kafka_backup.storage.base.Storage` that reads and writes it
(:class:`~spark_kafka_backup.storage.base.ObjectStorage` for an object store). Code above this package never
opens a path itself for backup data: it asks the storage, so the same reader, verify, catalog and restore code
serves them all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spark_kafka_backup.errors import StorageError, UsageError
from spark_kafka_backup.format.json_document import MAX_DEPTH, parse_document
from spark_kafka_backup.storage.base import Location, ObjectStorage, ReadHandle, Storage
from spark_kafka_backup.storage.local import LOCAL, confine
from spark_kafka_backup.storage.object_path import ObjectPath

__all__ = [
    "Location",
    "ObjectPath",
    "ObjectStorage",
    "ReadHandle",
    "Storage",
    "as_local",
    "confine_root",
    "exists",
    "is_local",
    "object_storage_for",
    "parse_location",
    "prepare_root",
    "read_chunks",
    "read_document",
    "read_limited",
    "size",
    "storage_for",
    "write_whole",
]


def parse_location(text: str | Path | ObjectPath) -> Location:
    """``s3://bucket/prefix``, ``gs://...``, ``az://container/prefix`` -> :class:`ObjectPath`; anything else is a
    local path."""
    if isinstance(text, (Path, ObjectPath)):
        return text
    if "://" in text:
        return ObjectPath.parse(text)
    return Path(text)


def is_local(location: Location) -> bool:
    return isinstance(location, Path)


def storage_for(location: Location) -> Storage:
    """The storage that serves ``location`` (one shared instance per kind and process)."""
    if isinstance(location, ObjectPath):
        return object_storage_for(location)
    return LOCAL


def object_storage_for(location: ObjectPath) -> ObjectStorage:
    """The object store of ``location``'s scheme (its client library imported on first use)."""
    if location.scheme == "gs":
        from spark_kafka_backup.storage.gcs import gcs_storage

        return gcs_storage()
    if location.scheme == "az":
        from spark_kafka_backup.storage.azure import azure_storage

        return azure_storage()
    from spark_kafka_backup.storage.s3 import s3_storage

    return s3_storage()


def confine_root(root: Location) -> None:
    """Keep file operations under a local backup root inside it (:mod:`spark_kafka_backup.storage.local`); an object
    store has no links, and names are checked before they become keys."""
    if isinstance(root, Path):
        confine(root)


def exists(location: Location) -> bool:
    return storage_for(location).exists(location)


def size(location: Location) -> int | None:
    """A file's size in bytes (``None``: there is none)."""
    return storage_for(location).size(location)


def read_limited(location: Location, limit: int) -> bytes:
    """Read a small file whole, refusing one larger than ``limit`` bytes."""
    return storage_for(location).read_limited(location, limit)


def read_document(location: Location, limit: int, *, what: str = "JSON document", max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document at ``location``: at most ``limit`` bytes and ``max_depth`` levels, else one FormatError
    naming the file (:mod:`spark_kafka_backup.format.json_document`)."""
    return parse_document(read_limited(location, limit), file=str(location), what=what, max_depth=max_depth)


def read_chunks(location: Location, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A file's bytes in pieces of at most ``chunk`` (memory does not grow with its size)."""
    handle = storage_for(location).open_read(location)
    try:
        position = 0
        while position < handle.size:
            piece = handle.pread(min(chunk, handle.size - position), position)
            if not piece:
                break
            yield piece
            position += len(piece)
    finally:
        handle.close()


def write_whole(location: Location, data: bytes, *, sync: bool = True) -> None:
    """Create or replace a file whole (parents created as needed on disk)."""
    storage_for(location).write_whole(location, data, sync=sync)


def prepare_root(root: Location) -> None:
    """Make a backup root usable for writing: create the directory, or check the bucket answers."""
    if isinstance(root, ObjectPath):
        object_storage_for(root).check_bucket(root)
        return
    root.mkdir(parents=True, exist_ok=True)


def check_writable_root(root: Location, *, what: str = "backup target") -> None:
    """Refuse, in one line, a local root that cannot be written: nothing is left behind.

    A root that exists must be a directory this process may write into; one
    that does not exist must be creatable: its deepest existing ancestor is
    a directory this process may write into (tried: an empty directory is
    made there and removed at once). Object stores are checked by
    :func:`prepare_root` when the job starts writing.
    """
    if not isinstance(root, Path):
        return
    if root.exists() and not root.is_dir():
        raise StorageError(f"{root}: the {what} is a file, not a directory")
    existing = root
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise StorageError(f"{root}: the {what} cannot be created: {existing} is a file, not a directory")
    verb = "write into" if existing == root else "create directories in"
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StorageError(f"{root}: the {what} is not usable: no permission to {verb} {existing}")
    try:  # what access() cannot tell: a read-only file system, /proc, a root-squashed NFS export
        os.rmdir(tempfile.mkdtemp(prefix=".kbackup-probe-", dir=existing))
    except OSError as exc:
        raise StorageError(f"{root}: the {what} is not usable: cannot {verb} {existing}: {exc.strerror}") from exc


def as_local(location: Location) -> Path:
    """``location`` as a local path; code that appends or renames in place works only on disk."""
    if not isinstance(location, Path):
        raise UsageError(f"{location}: this works on a local path only (it appends or renames files in place)")
    return location
