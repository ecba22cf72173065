"""The catalog as the partition writers' ledger: each finished segment and the newest one's prefix, recorded.

:class:`CatalogLedger` is what the backup's writers are given
(:class:`spark_kafka_backup.partition.ledger.SegmentLedger`); it holds only the backup's root, so
it pickles to Spark executors and is built anywhere. Crash safety is the writers':
they call it after the bytes it records are durable (formats/catalog.md).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from spark_kafka_backup.catalog.build import catch_up_catalog, describe_segment
from spark_kafka_backup.catalog.erasures import read_erased
from spark_kafka_backup.catalog.model import PartitionCatalog, SegmentEntry
from spark_kafka_backup.catalog.seals import refuse_plain_writer, vouch
from spark_kafka_backup.catalog.store import catalog_path, read_catalog, refuse_lost_catalog, write_catalog
from spark_kafka_backup.catalog.tail import record_tail
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.partition_index import PartitionIndexEntry
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.ledger import TailEntry
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.storage import Location, exists


@dataclass(frozen=True)
class CatalogLedger:
    """The catalog of the backup under ``root`` (a directory or an object-store prefix).

    ``sync``: each new catalog (and marker) is fsynced as it is written. ``False`` only for placeholders prepared
    many at once (:func:`spark_kafka_backup.backup.group_offsets.ensure_partitions`), whose caller makes them all
    durable with one file-system sync; a catalog that a power loss before it left empty is read as none
    (:func:`~spark_kafka_backup.catalog.store.read_catalog`).
    """

    root: Location
    sync: bool = True

    def committed_tail(
        self, topic: str, partition: int, segment: str, *, present: Collection[str] = ()
    ) -> TailEntry | None:
        catalog = read_catalog(self.root, topic, partition, expected=True)
        if catalog is None:
            return None
        tail = catalog.tail
        if (
            tail is not None
            and tail.records
            and present
            and tail.name not in present
            and all(entry.name != tail.name for entry in catalog.segments)
        ):
            raise FormatError(
                f"the catalog says {tail.records} records were committed in segment {tail.name} (offsets "
                f"{tail.first_offset}..{tail.last_offset}), which the partition no longer has: committed records "
                "are lost (spark-kafka-backup verify names them); the backup does not write over the loss",
                file=str(catalog_path(self.root, topic, partition)),
            )
        return catalog.tail_of(segment)

    def opening(self, topic: str, partition: int, *, has_segments: bool) -> None:
        if exists(catalog_path(self.root, topic, partition)):
            return  # a look, not a read: an object writer opens each partition every batch
        if has_segments:
            refuse_lost_catalog(self.root, topic, partition)
        elif self.sync:  # (a placeholder's first catalog is its tail's, written as the preparer closes it)
            write_catalog(self.root, PartitionCatalog(topic, partition))  # then its marker

    def record_tail(self, topic: str, partition: int, tail: TailEntry, *, read_from: int | None = None) -> None:
        record_tail(self.root, topic, partition, tail, read_from=read_from, sync=self.sync)

    def segments_finished(
        self, topic_dir: Path, partition: int, keys: KeyRing, *, read_from: int | None = None
    ) -> None:
        catch_up_catalog(self.root, topic_dir, partition, read_from=read_from, keys=keys)
        self._vouch(topic_dir, partition, keys)

    def newest_sealed(self, topic_dir: Path, partition: int, keys: KeyRing, *, read_from: int | None = None) -> None:
        catch_up_catalog(self.root, topic_dir, partition, newest_too=True, read_from=read_from, keys=keys)
        self._vouch(topic_dir, partition, keys)

    def sealing(self, topic_dir: Location, partition: int, kek: bytes | None) -> None:
        if kek is not None:
            vouch(self.root, topic_dir, partition, kek)
        else:
            refuse_plain_writer(self.root, topic_dir.name, partition)

    def _vouch(self, topic_dir: Location, partition: int, ring: KeyRing) -> None:
        """Bring the seal record up to the sealed segments just cataloged, under the key of the newest (when this
        writer holds it: the one that sealed it does). Without a key there is nothing to vouch with: no read at all
        (a plain backup's writers pay nothing)."""
        keys = ring.keys
        if not keys:
            return
        catalog = read_catalog(self.root, topic_dir.name, partition)
        sealed = [entry for entry in (catalog.segments if catalog else ()) if entry.key_id and entry.records]
        if not sealed:
            return
        kek = keys.get(bytes.fromhex(max(sealed, key=lambda e: e.start_offset).key_id or ""))
        if kek is not None:
            vouch(self.root, topic_dir, partition, kek, catalog=catalog)

    def segment_reopened(self, topic: str, partition: int, segment: str) -> None:
        catalog = read_catalog(self.root, topic, partition)
        if catalog is not None and any(entry.name == segment for entry in catalog.segments):
            kept = tuple(entry for entry in catalog.segments if entry.name != segment)
            write_catalog(self.root, replace(catalog, segments=kept))

    def accounted(self, topic: str, partition: int) -> set[str]:
        catalog = read_catalog(self.root, topic, partition)
        return {entry.name for entry in catalog.segments} if catalog is not None else set()

    def erased(self, topic: str, partition: int) -> ErasedOffsets:
        return read_erased(self.root, topic, partition)

    def segments_published(
        self,
        topic_dir: Location,
        partition: int,
        named: Sequence[PartitionIndexEntry],
        spool: PartitionReader,
        *,
        read_from: int | None = None,
    ) -> None:
        """Add every named segment the catalog lacks: the spool's (described from its local copy, the same bytes
        without reading the objects back), and any that a crash left out; drop entries no longer named."""
        topic = topic_dir.name
        fresh: dict[str, SegmentEntry] = {
            segment.name: describe_segment(spool, number) for number, segment in enumerate(spool.segments)
        }
        catalog = read_catalog(self.root, topic, partition, expected=True) or PartitionCatalog(topic, partition)
        current = {segment.name for segment in named}
        # Entries of replaced (empty) placeholders go, fresh ones come in. An entry of records the index no longer
        # names stays: it is how verify and ls tell that they are lost (dropping it would hide the loss).
        kept = [entry for entry in catalog.segments
                if (entry.name in current or entry.records) and entry.name not in fresh]  # fmt: skip
        accounted = {entry.name for entry in kept}
        stored: PartitionReader | None = None
        added = []
        for number, segment in enumerate(named):
            if segment.name in accounted:
                continue
            if segment.name in fresh:
                added.append(fresh[segment.name])
            else:
                stored = stored or PartitionReader(topic_dir, partition, keys=spool.keys)
                added.append(describe_segment(stored, number))
        known = catalog.read_from if catalog.read_from is not None else read_from
        if added or len(kept) != len(catalog.segments) or known != catalog.read_from:
            entries = sorted((*kept, *added), key=lambda entry: entry.start_offset)
            write_catalog(
                self.root,
                PartitionCatalog(topic, partition, tuple(entries), read_from=known, pruned=catalog.pruned),
            )
        self._vouch(topic_dir, partition, spool.keys)
