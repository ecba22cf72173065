"""The storage interface: what the backup code needs from a disk or an object store.

Two rules shape it, so that one commit protocol fits both kinds:

* Files are **published whole**: :meth:`Storage.write_whole` and
  :meth:`Storage.upload` make a file appear with all its bytes or not at all
  (a local rename, an S3 PUT). Appending is not part of this interface; only
  the local partition writer appends, and it talks to the disk directly.
* Reads go through a :class:`ReadHandle` that reads at a position without
  loading the whole file, so memory never grows with a file's size.
"""

from __future__ import annotations

import io
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeAlias

from spark_kafka_backup.errors import BackupNotFoundError, FormatError
from spark_kafka_backup.storage.object_path import ObjectPath
from spark_kafka_backup.storage.retention import KeptVersion, Purge

Location: TypeAlias = Path | ObjectPath


class ReadHandle(Protocol):
    """An open file: sequential reads through ``stream``, random ones through ``pread``."""

    size: int
    stream: BinaryIO

    def pread(self, length: int, position: int) -> bytes: ...

    def refresh_size(self) -> int:
        """The size now: a local file may have grown since it was opened (an object never does)."""
        ...

    def close(self) -> None: ...


class Storage(ABC):
    """One kind of storage (local disk, S3). Every method takes a full location."""

    @abstractmethod
    def exists(self, location: Location) -> bool: ...

    @abstractmethod
    def size(self, location: Location) -> int | None:
        """The file's size in bytes, or ``None`` when it does not exist."""

    @abstractmethod
    def open_read(self, location: Location) -> ReadHandle:
        """Open for reading; :class:`~spark_kafka_backup.errors.BackupNotFoundError` when absent."""

    @abstractmethod
    def write_whole(self, location: Location, data: bytes, *, sync: bool = True) -> None:
        """Create or replace the file with ``data``; readers see the old or the new bytes."""

    @abstractmethod
    def create_exclusive(self, location: Location, data: bytes) -> bool:
        """Create the file with ``data`` unless it exists; return whether this call created it."""

    @abstractmethod
    def upload(self, location: Location, source: Path) -> None:
        """Publish the local file ``source`` whole at ``location``."""

    @abstractmethod
    def delete(self, location: Location) -> None:
        """Remove the file; absent is fine."""

    def remove(self, location: Location) -> list[KeptVersion]:
        """Delete the file as :meth:`delete` does; the versions of it the store still keeps (a versioned or locked
        bucket: :mod:`spark_kafka_backup.storage.retention`), none on a disk."""
        self.delete(location)
        return []

    def purge_deleted(self, directory: Location, prefix: str, *, bypass_governance: bool = False) -> Purge:
        """Delete for good every version the store keeps of deleted objects (no current version) under
        ``directory`` whose names start with ``prefix``; the versions a lock keeps are reported, not deleted. A
        disk keeps no versions: nothing to do."""
        return Purge()

    @abstractmethod
    def list_files(self, directory: Location, *, starting_with: str = "") -> list[str] | None:
        """Names of the files directly in ``directory`` (only those starting with ``starting_with``: on an object
        store, one listing of that prefix, not of the whole directory); ``None`` when it does not exist (on an object
        store: when nothing is there with that prefix)."""

    @abstractmethod
    def list_dirs(self, directory: Location) -> list[str] | None:
        """Names of the subdirectories of ``directory``; ``None`` when it does not exist."""

    def read_limited(self, location: Location, limit: int) -> bytes:
        """Read a small file whole, refusing one larger than ``limit`` bytes."""
        handle = self.open_read(location)
        try:
            if handle.size > limit:
                raise FormatError(
                    "file is larger than this kind of file can be",
                    file=str(location),
                    expected=f"at most {limit} bytes",
                    found=f"{handle.size} bytes",
                )
            return handle.pread(handle.size, 0)
        finally:
            handle.close()


def object_location(location: Location) -> ObjectPath:
    """``location``, which an object store's method was given: an object's (a local path is a caller's bug)."""
    if not isinstance(location, ObjectPath):
        raise TypeError(f"not an object location: {location}")
    return location


class ObjectStorage(Storage):
    """An object store (S3, Google Cloud Storage, Azure Blob Storage): files are objects published whole, and a
    few writes are conditional on a *tag* the store gives each version of an object (S3's and Azure's ETag, GCS's
    generation), enforced by the store: what the object-store lease (:mod:`spark_kafka_backup.storage.lease`)
    is built on. Every backend passes the same contract tests (``tests/test_storage_contract.py``)."""

    def __init__(self, client: Any | None = None) -> None:
        self._given = client

    @property
    def client(self) -> Any:
        """The client given, or this process's for the current settings (its library imported on first use)."""
        return self._given if self._given is not None else self.shared_client()

    @abstractmethod
    def shared_client(self) -> Any:
        """This process's client for the settings in its environment now (made once per settings)."""

    @abstractmethod
    def stat(self, location: ObjectPath) -> tuple[int, str] | None:
        """The object's size and tag (the version a read is pinned to), or ``None`` when there is none."""

    @abstractmethod
    def fetcher(self, location: ObjectPath, tag: str) -> Callable[[int, int], bytes]:
        """``fetch(length, position)``: one ranged GET per call, of the version with ``tag`` where the store can
        pin it."""

    def size(self, location: Location) -> int | None:
        found = self.stat(object_location(location))
        return None if found is None else found[0]

    def exists(self, location: Location) -> bool:
        return self.size(location) is not None

    def open_read(self, location: Location) -> RangedHandle:
        target = object_location(location)
        found = self.stat(target)
        if found is None:
            raise BackupNotFoundError(f"{location}: object does not exist")
        size, tag = found
        return RangedHandle(self.fetcher(target, tag), size)

    def create_exclusive(self, location: Location, data: bytes) -> bool:
        if self.create_exclusive_tagged(location, data, patient=True) is not None:
            return True
        # An object with the name: another writer's, or this call's own when the answer to its first attempt was
        # lost and the client's retry met what that attempt created. The same bytes are taken for its own.
        try:
            return self.size(location) == len(data) and self.read_limited(location, len(data)) == data
        except BackupNotFoundError:
            return False  # deleted since: someone else's, gone

    @abstractmethod
    def create_exclusive_tagged(self, location: Location, data: bytes, *, patient: bool = False) -> str | None:
        """Create the object unless one has the name; its tag, or ``None`` when one existed. A lease's request
        (the default) is answered or fails within seconds; a ``patient`` one is retried with the library's full
        backoff."""

    @abstractmethod
    def read_tagged(self, location: Location) -> tuple[bytes, str] | None:
        """A small object's bytes (at most 64 KiB) and tag, or ``None`` when it does not exist."""

    @abstractmethod
    def replace_if(self, location: Location, data: bytes, tag: str) -> str | None:
        """Replace the object if it still has ``tag``; the new tag, or ``None`` when it changed or is gone."""

    @abstractmethod
    def delete_if(self, location: Location, tag: str) -> None:
        """Delete the object if it still has ``tag`` (otherwise leave it: it is someone else's now)."""

    @abstractmethod
    def check_bucket(self, location: ObjectPath) -> None:
        """Fail with one clear error when the bucket (container) is absent or unreachable."""

    @abstractmethod
    def list_level(self, directory: ObjectPath, starting_with: str = "") -> tuple[list[str], list[str]]:
        """The names of the objects directly under ``directory`` (a key prefix) and of its sub-prefixes."""

    def list_files(self, directory: Location, *, starting_with: str = "") -> list[str] | None:
        assert isinstance(directory, ObjectPath)
        files, dirs = self.list_level(directory, starting_with)
        return files if files or dirs else None

    def list_dirs(self, directory: Location) -> list[str] | None:
        assert isinstance(directory, ObjectPath)
        files, dirs = self.list_level(directory)
        return dirs if files or dirs else None


#: A URL's query: for a GCS resumable upload its session id, for Azure a SAS token; credentials either way. To the
#: next whitespace: a SAS token's times keep their colons.
_URL_QUERY = re.compile(r"(https?://[^\s?'\"]+|/[^\s?'\"]*)\?\S*")


def without_url_queries(text: str) -> str:
    """``text`` (an object store's error message) with every URL's query replaced by ``...``."""
    return _URL_QUERY.sub(r"\1?...", text)


def safe_cause(exc: BaseException) -> BaseException | None:
    """``exc`` to chain under an error of ours, or ``None`` when its message holds a URL's query (a credential that
    ``--debug`` or a task's traceback would print)."""
    return None if without_url_queries(str(exc)) != str(exc) else exc


class FileHandle:
    """A :class:`ReadHandle` over a local file (``pread`` is ``os.pread``)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._fd = stream.fileno()
        self.size = os.fstat(self._fd).st_size

    def pread(self, length: int, position: int) -> bytes:
        return os.pread(self._fd, length, position)

    def refresh_size(self) -> int:
        self.size = os.fstat(self._fd).st_size
        return self.size

    def close(self) -> None:
        self.stream.close()


class PositionalRaw(io.RawIOBase):
    """A seekable raw stream whose reads go to ``fetch(length, position)`` (buffer it with io.BufferedReader)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._position = 0

    def fetch(self, length: int, position: int) -> bytes:
        raise NotImplementedError

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.fetch(len(view), self._position)
        view[: len(data)] = data
        self._position += len(data)
        return len(data)


class RangedHandle:
    """A :class:`ReadHandle` over one object of an object store: ``fetch(length, position)`` is one ranged GET (the
    backend's), sequential reads go through a buffer of ``read_ahead`` bytes. Objects are written whole and never
    grow."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, read_ahead: int = 4 << 20) -> None:
        self.size = size
        self._raw = _FetchingRaw(fetch, size)
        self.stream: BinaryIO = io.BufferedReader(self._raw, buffer_size=read_ahead)

    def pread(self, length: int, position: int) -> bytes:
        return self._raw.fetch(length, position)

    def refresh_size(self) -> int:
        return self.size

    def close(self) -> None:
        self.stream.close()


class _FetchingRaw(PositionalRaw):
    def __init__(self, fetch: Callable[[int, int], bytes], size: int) -> None:
        super().__init__(size)
        self._fetch = fetch

    def fetch(self, length: int, position: int) -> bytes:
        length = min(length, self._size - position)
        return self._fetch(length, position) if length > 0 else b""
