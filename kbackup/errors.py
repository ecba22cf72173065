"""Errors kbackup raises on purpose.

Every error a user can cause (a damaged file, a bad option, a conflicting
record) is a subclass of :class:`KbackupError`, so the CLI and the jobs can
print it as one line and exit non-zero without a traceback.

The tree is shallow::

    KbackupError
    ├── FormatError              a file is not what the v1 format says
    │   ├── MagicByteError       wrong or missing magic byte at position 0
    │   └── TruncatedError       a field runs past the end of the file
    ├── PlacementError           a record cannot be placed in a partition
    │   └── OffsetConflictError  same offset already stored with other bytes
    ├── InvalidRecordError       a record value cannot be encoded (also ValueError)
    ├── BackupNotFoundError      a backup root, topic or partition is absent
    ├── StorageError             the storage (an S3 endpoint, a bucket) failed or refused
    └── UsageError               a bad option or argument

Each error carries the context that locates the problem (file, byte position,
topic, partition, offset) as attributes and in its message.
"""

from __future__ import annotations

from os import PathLike


class KbackupError(Exception):
    """Root of every error kbackup raises on purpose."""


class FormatError(KbackupError):
    """A file does not follow the v1 format.

    ``file`` is the path (or a label such as ``"<bytes>"`` for in-memory
    input), ``position`` the byte offset inside it where the problem starts,
    ``expected`` and ``found`` say what the format requires and what is there.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | PathLike[str] | None = None,
        position: int | None = None,
        expected: str | None = None,
        found: str | None = None,
    ) -> None:
        self.file = None if file is None else str(file)
        self.position = position
        self.expected = expected
        self.found = found
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.file or "<input>"
        if self.position is not None:
            where += f" at byte {self.position}"
        text = f"{where}: {self.detail}"
        if self.expected is not None:
            text += f": expected {self.expected}"
            if self.found is not None:
                text += f", found {self.found}"
        elif self.found is not None:
            text += f": found {self.found}"
        return text


class MagicByteError(FormatError):
    """The first byte of a v1 file is not ``0x01`` (or the file is empty)."""


class TruncatedError(FormatError):
    """A length or field reaches past the end of the file."""


class PlacementError(KbackupError):
    """A record cannot be placed at its offset in a partition."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"topic {topic!r} partition {partition} offset {offset}: {message}")


class OffsetConflictError(PlacementError):
    """An offset is already stored in the backup with different bytes."""


class InvalidRecordError(KbackupError, ValueError):
    """A record's fields cannot be encoded in the v1 format."""


class BackupNotFoundError(KbackupError):
    """A backup root, topic directory, partition or file does not exist."""


class StorageError(KbackupError):
    """The storage behind a location failed: unreachable endpoint, missing bucket, denied access."""


class UsageError(KbackupError):
    """An option or argument is unknown, missing or out of range."""
