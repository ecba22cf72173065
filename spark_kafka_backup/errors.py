"""Errors spark-kafka-backup raises on purpose.

Every error a user can cause (a damaged file, a bad option, a conflicting
record, a cluster that refuses) is a subclass of :class:`SparkKafkaBackupError`, so the
CLI and the jobs catch that root alone and print it as one line, exiting
non-zero without a traceback. Anything else reaching them is a fault of
spark-kafka-backup or of a library beneath it (printed as one line too; ``--debug``
shows the traceback).

The tree is shallow::

    SparkKafkaBackupError
    ├── UsageError               a bad option, argument or settings file
    ├── FormatError              a file is not what the v1 format says
    │   ├── MagicByteError       wrong or missing magic byte at position 0
    │   └── TruncatedError       a field runs past the end of the file
    ├── EncodingError            a value cannot be written in the format (also ValueError)
    │   └── InvalidRecordError   a record (key, value, header, timestamp) cannot be encoded
    ├── PlacementError           a record cannot be placed in a partition
    │   └── OffsetConflictError  same offset already stored with other bytes
    ├── BackupNotFoundError      a backup root, topic or partition is absent
    ├── ChecksumError            a segment's files differ from what the catalog recorded
    ├── DecryptionKeyError       an encrypted segment's key was not given (or is not a valid key)
    ├── DamagedBackupError       segments are damaged or lost; a read would leave records out
    ├── StorageError             the storage (a disk, an S3 endpoint, a bucket) failed or refused
    │   └── RetainedError        erased records are out of the backup, but a bucket's lock keeps versions holding them
    ├── LeaseHeldError           another job holds the target's lease
    ├── LeaseLostError           another job took this job's lease over
    ├── OriginError              the target holds a backup of another cluster or topic incarnation
    ├── SourceLossError          the source deleted records (retention) before the backup could read them
    ├── ClusterError             a Kafka cluster cannot be reached or refused (``transient`` says which)
    ├── AccessDeniedError        the cluster's ACLs do not grant the job an operation it needs
    ├── DeliveryError            the restore's target cluster refused records
    ├── TargetNotEmptyError      a target partition holds records of something else
    ├── TargetChangedError       another restore wrote there after this one was planned
    ├── RestoreFencedError       a newer restore of the same partitions took over
    ├── TargetLimitError         the target's settings would delete, reject or change restored records
    ├── SchemaRegistryError      a schema registry cannot be reached, refused, or contradicts the backup's copy
    │   └── SchemaIdError        a record names a schema id the backup's copy of the registry does not hold
    └── ArtifactError            Java artifacts (Spark's Kafka connector, Kafka) cannot be resolved

Test and demo scaffolding (the repository's ``devkit/``, not shipped) adds ``KafkaClusterError``
and ``SparkClusterError`` below the root.

Each error carries the context that locates the problem (file, byte position,
topic, partition, offset) as attributes or in its message.
"""

from __future__ import annotations

from os import PathLike


class SparkKafkaBackupError(Exception):
    """Root of every error spark-kafka-backup raises on purpose."""


class FormatError(SparkKafkaBackupError):
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


class PlacementError(SparkKafkaBackupError):
    """A record cannot be placed at its offset in a partition."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"topic {topic!r} partition {partition} offset {offset}: {message}")


class OffsetConflictError(PlacementError):
    """An offset is already stored in the backup with different bytes."""


class EncodingError(SparkKafkaBackupError, ValueError):
    """A value cannot be written in the format (out of range, wrong type)."""


class InvalidRecordError(EncodingError):
    """A record's fields cannot be encoded in the v1 format."""


class BackupNotFoundError(SparkKafkaBackupError):
    """A backup root, topic directory, partition or file does not exist."""


class StorageError(SparkKafkaBackupError):
    """The storage behind a location failed: unreachable endpoint, missing bucket, denied access."""


class RetainedError(StorageError):
    """An erase took the records out of the backup, but versions of its objects that hold them are kept by a lock
    (S3 Object Lock, a retention policy) the store will not lift before a date: the erase is not done until then."""


class UsageError(SparkKafkaBackupError):
    """An option or argument is unknown, missing or out of range."""


class ChecksumError(SparkKafkaBackupError):
    """A segment's files differ from what the catalog recorded."""


class DecryptionKeyError(SparkKafkaBackupError):
    """An encrypted segment needs a key-encryption key that was not given, or a given key is not a key."""


class DamagedBackupError(SparkKafkaBackupError):
    """Segments of the backup are damaged or lost; a read would leave their records out."""


class LeaseHeldError(SparkKafkaBackupError):
    """Another job holds the target's lease."""


class LeaseLostError(SparkKafkaBackupError):
    """Another job took over this job's lease (object stores: it was not renewed in time)."""


class ClusterError(SparkKafkaBackupError):
    """The Kafka cluster could not be reached or refused a request.

    ``transient``: the cause is one the cluster recovers from by itself (no
    connection, no leader, a timeout), as opposed to a refusal (authorization,
    an invalid request) that asking again will not change.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class AccessDeniedError(SparkKafkaBackupError):
    """The cluster's ACLs do not grant the job an operation it needs (the message names it, the resource and the
    principal)."""


class ArtifactError(SparkKafkaBackupError):
    """Java artifacts could not be resolved."""


class DeliveryError(SparkKafkaBackupError):
    """The target cluster refused records."""


class TargetChangedError(SparkKafkaBackupError):
    """The target partition holds another restore's records, written after this restore was planned."""


class StandbyGapError(SparkKafkaBackupError):
    """A follower's next records are no longer in the backup (a prune let them go before they were restored)."""


class TargetNotEmptyError(SparkKafkaBackupError):
    """A target partition holds records that are not an earlier run of this restore."""


class RestoreFencedError(SparkKafkaBackupError):
    """A newer restore of the same target partitions fenced this one's producers."""


class TargetLimitError(SparkKafkaBackupError):
    """The target's settings (retention, compaction, timestamp and size limits) or the producer would delete,
    reject or change restored records (see :mod:`spark_kafka_backup.restore.target_limits`)."""


class SourceLossError(SparkKafkaBackupError):
    """The source cluster deleted records before the backup could read them (a snapshot that is not whole)."""


class StoppedEarlyError(SparkKafkaBackupError):
    """A job stopped by a signal before it did what it set out to do (a snapshot that did not reach the end offsets
    it planned): what it did is kept and a run with the same options goes on from there. Its exit status is the
    shell's for the signal, ``128 + signal``: 143 for SIGTERM, 130 for SIGINT."""

    def __init__(self, message: str, *, signum: int) -> None:
        super().__init__(message)
        self.exit_status = 128 + signum


class OriginError(SparkKafkaBackupError):
    """The target holds a backup of another Kafka cluster or of another incarnation of a topic."""


class SchemaRegistryError(SparkKafkaBackupError):
    """A schema registry could not be reached or refused a request, or its schemas contradict the backup's copy."""


class SchemaIdError(SchemaRegistryError):
    """A record's key or value names a schema id that the backup's copy of the registry does not hold.

    ``schema_id`` is the id, ``field`` ``"key"`` or ``"value"``; the message names topic, partition and offset.
    """

    def __init__(self, message: str, *, schema_id: int, field: str) -> None:
        self.schema_id = schema_id
        self.field = field
        super().__init__(message)
