"""What a partition's writers report about the segments they write, to whoever keeps account of them.

The writers (:mod:`spark_kafka_backup.partition.writer` on disk, :mod:`spark_kafka_backup.partition.object_writer`
on an object store) know when bytes are committed and when a segment is finished; the
backup's catalog (:class:`spark_kafka_backup.catalog.ledger.CatalogLedger`, a layer above) keeps
their checksums. A writer given no ledger keeps no account (a spool, a test's files).

Calls and what they promise, in the order a writer makes them:

* ``opening`` when a writer opens a partition that has no segments yet (a local writer), or any partition (an object
  writer): before the first segment is named, the ledger starts its account, so a partition with segments and no
  account has lost it; with segments, a lost account is refused (the writer does not go on).
* ``committed_tail`` once when a local writer opens a partition with segments: the newest
  segment's prefix as last recorded, which the writer extends instead of reading the files.
* ``record_tail`` when a local writer closes after syncing: the newest segment's committed
  prefix (the bytes it names are on disk before the call).
* ``segments_finished`` when a local writer starts a new segment: every older one is synced
  and will not change again.
* ``segment_reopened`` when a local writer makes an empty sealed newest segment plain again.
* ``newest_sealed`` when a local writer sealed its newest segment (``seal_newest``), and when one
  opens a partition whose newest segment is sealed: every segment, the newest included, is finished.
* ``erased`` when a writer opens a partition: the offsets erased on purpose, whose records it passes over.
* ``segments_published`` after an object writer replaced the partition index: the index
  names ``named``; the new ones among them are readable from ``spool`` as well.

READ_THROUGH: a backup's writer appends a partition's records in offset order, going on from the last one stored,
and what it is handed was read from the source without a break (an offset the source deleted before it was read is
recorded as lost at the source before any record after it is written). So from the first record a writer appends,
an offset it does not store was skipped by the source (see
:attr:`spark_kafka_backup.catalog.model.PartitionCatalog.read_from`). The first writer to append to a partition whose
catalog does not know this yet passes ``read_from``; later ones keep it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.partition_index import PartitionIndexEntry
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.storage import Location

if TYPE_CHECKING:
    from spark_kafka_backup.partition.reader import PartitionReader


@dataclass(frozen=True)
class TailEntry:
    """The committed prefix of the newest segment, which may still grow.

    ``records_bytes``/``index_bytes`` bytes of its two files (from byte 0,
    magic byte included) hold ``records`` records, committed by a writer that
    synced them; the CRC32Cs cover exactly those prefixes. Bytes past them are
    a batch in flight (or left by a crash), not yet covered.

    ``times``: the writer kept the oldest and newest timestamp of the prefix's
    records as it wrote them (``min_timestamp``/``max_timestamp``, ``None``
    when no record has one); without it (a prefix rebuilt from the files, a
    writer that took over bytes it did not read) they say nothing.
    """

    name: str
    first_offset: int | None
    last_offset: int | None
    records: int
    records_bytes: int
    index_bytes: int
    records_crc32c: int
    index_crc32c: int
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    times: bool = False


class SegmentLedger(Protocol):
    """Keeps account of one backup's segments (see the module docstring for when each call comes)."""

    def committed_tail(
        self, topic: str, partition: int, segment: str, *, present: Collection[str] = ()
    ) -> TailEntry | None:
        """The committed prefix last recorded for ``segment`` as the newest, unfinished one (else ``None``).
        ``present``: the partition's segments; a recorded prefix of one not among them (nor finished) means
        committed records were lost, and is refused."""
        ...

    def opening(self, topic: str, partition: int, *, has_segments: bool) -> None:
        """A writer opens the partition: start its account before a first segment is named, or (``has_segments``)
        refuse to go on where an account was kept and is lost."""
        ...

    def record_tail(self, topic: str, partition: int, tail: TailEntry, *, read_from: int | None = None) -> None:
        """Replace the recorded prefix of the partition's newest segment. ``read_from``: the first offset this writer
        appended, from which the partition was read without a break (READ_THROUGH in the module docstring)."""
        ...

    def segments_finished(
        self, topic_dir: Path, partition: int, keys: KeyRing, *, read_from: int | None = None
    ) -> None:
        """Every segment but the newest of a local partition is finished: account for any not yet accounted (with the
        writer's ``keys``, which its sealed segments are read with). ``read_from`` as for :meth:`record_tail`."""
        ...

    def newest_sealed(self, topic_dir: Path, partition: int, keys: KeyRing, *, read_from: int | None = None) -> None:
        """Every segment of a local partition is finished, the newest included: account for any not yet accounted
        (with the writer's ``keys``), and drop the newest one's recorded prefix."""
        ...

    def sealing(self, topic_dir: Location, partition: int, kek: bytes | None) -> None:
        """The writer of the partition seals what it finishes with ``kek``: vouch for the partition as it is
        (:mod:`spark_kafka_backup.catalog.seals`); ``None``: it writes plain, refused where the partition is sealed."""
        ...

    def segment_reopened(self, topic: str, partition: int, segment: str) -> None:
        """An empty sealed newest segment is made plain again to be appended to: no longer finished."""
        ...

    def accounted(self, topic: str, partition: int) -> set[str]:
        """The names of the finished segments already accounted for."""
        ...

    def erased(self, topic: str, partition: int) -> ErasedOffsets:
        """The partition's offsets erased on purpose (``spark-kafka-backup erase``): a writer passes over records
        there instead of storing them again."""
        ...

    def segments_published(
        self,
        topic_dir: Location,
        partition: int,
        named: Sequence[PartitionIndexEntry],
        spool: PartitionReader,
        *,
        read_from: int | None = None,
    ) -> None:
        """An object store's partition index now names ``named``; ``spool`` holds the ones just uploaded (read with
        the writer's keys, ``spool.keys``). ``read_from`` as for :meth:`record_tail`."""
        ...
