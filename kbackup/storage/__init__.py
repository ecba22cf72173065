"""Where a backup lives: a local directory or an S3 prefix, behind one interface.

A location is a :class:`pathlib.Path` (local disk) or an :class:`ObjectPath`
(``s3://bucket/prefix``); :func:`parse_location` picks by URI scheme and
:func:`storage_for` returns the :class:`~kbackup.storage.base.Storage` that
reads and writes it. Code above this package never opens a path itself for
backup data: it asks the storage, so the same reader, verify, catalog and
restore code serves both.
"""

from __future__ import annotations

from pathlib import Path

from kbackup.storage.base import Location, ReadHandle, Storage
from kbackup.storage.local import LOCAL
from kbackup.storage.object_path import ObjectPath

__all__ = [
    "Location",
    "ObjectPath",
    "ReadHandle",
    "Storage",
    "as_local",
    "exists",
    "is_local",
    "parse_location",
    "prepare_root",
    "read_limited",
    "storage_for",
    "write_whole",
]


def parse_location(text: str | Path | ObjectPath) -> Location:
    """``s3://bucket/prefix`` -> :class:`ObjectPath`; anything else is a local path."""
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
        from kbackup.storage.s3 import s3_storage

        return s3_storage()
    return LOCAL


def exists(location: Location) -> bool:
    return storage_for(location).exists(location)


def read_limited(location: Location, limit: int) -> bytes:
    """Read a small file whole, refusing one larger than ``limit`` bytes."""
    return storage_for(location).read_limited(location, limit)


def write_whole(location: Location, data: bytes, *, sync: bool = True) -> None:
    """Create or replace a file whole (parents created as needed on disk)."""
    storage_for(location).write_whole(location, data, sync=sync)


def prepare_root(root: Location) -> None:
    """Make a backup root usable for writing: create the directory, or check the bucket answers."""
    if isinstance(root, ObjectPath):
        from kbackup.storage.s3 import S3Storage

        storage = storage_for(root)
        if isinstance(storage, S3Storage):
            storage.check_bucket(root)
        return
    root.mkdir(parents=True, exist_ok=True)


def as_local(location: Location) -> Path:
    """``location`` as a local path; code that appends or renames in place works only on disk."""
    if not isinstance(location, Path):
        raise TypeError(f"{location}: a local path is needed here")
    return location
