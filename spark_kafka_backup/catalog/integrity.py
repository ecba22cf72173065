"""Checking segments against the catalog before their records are used (restore, cat).

Finished segments are checked whole; the newest segment's committed prefix
against the tail the catalog recorded (:mod:`spark_kafka_backup.catalog.tail`).
A partition whose catalog was kept and is lost has every segment unchecked, each reported as such
(:func:`unverifiable_segments`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from spark_kafka_backup.catalog.build import file_crc32c
from spark_kafka_backup.catalog.model import SegmentEntry
from spark_kafka_backup.catalog.store import catalog_path, missing_catalog, read_catalog
from spark_kafka_backup.catalog.tail import tail_problem
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.storage import Location, exists


@dataclass(frozen=True)
class BadSegment:
    name: str
    first_offset: int | None
    last_offset: int | None
    reason: str

    @property
    def offsets(self) -> str:
        """``offsets A..B``, ``from offset A`` (the newest segment of a partition whose catalog is lost), or
        ``offsets unknown``."""
        if self.first_offset is not None and self.last_offset is not None:
            return f"offsets {self.first_offset}..{self.last_offset}"
        return "offsets unknown" if self.first_offset is None else f"from offset {self.first_offset}"

    def describe(self, topic: str, partition: int) -> str:
        return f"topic {topic!r} partition {partition}: segment {self.name} ({self.offsets}): {self.reason}"


def segment_problem(topic_dir: Location, entry: SegmentEntry) -> str | None:
    """Why a cataloged segment's files are not what the catalog says, or ``None`` when they are."""
    for suffix, size, crc in (
        (RECORDS_SUFFIX, entry.records_bytes, entry.records_crc32c),
        (INDEX_SUFFIX, entry.index_bytes, entry.index_crc32c),
    ):
        path = topic_dir / f"{entry.name}{suffix}"
        if not exists(path):
            return f"{path.name} is missing"
        found_crc, found_size = file_crc32c(path)
        if found_size != size:
            return f"{path.name} has {found_size} bytes, the catalog says {size}"
        if found_crc != crc:
            return f"{path.name} has CRC32C {found_crc:#010x}, the catalog says {crc:#010x}"
    return None


def bad_segments(
    root: Location,
    topic: str,
    partition: int,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    files: Location | None = None,
    only: Collection[str] | None = None,
    legacy: bool = False,
    keys: KeyRing = NO_KEYS,
) -> list[BadSegment]:
    """Every cataloged segment of a partition whose files fail the check (none without a catalog; every segment when
    its catalog was kept and is lost: :func:`unverifiable_segments`).

    With ``from_offset``/``to_offset`` only the segments that may hold offsets in that range are checked.
    ``files``: the directory holding the segment files, when not ``root / topic`` (a local copy); ``only``: check
    just these segments (the ones copied there); ``keys``: those of a newest segment sealed since its prefix was
    recorded.
    """
    topic_dir = files if files is not None else root / topic
    catalog = read_catalog(root, topic, partition)
    if catalog is None:
        return unverifiable_segments(root, topic, partition, from_offset=from_offset, to_offset=to_offset, only=only,
                                     legacy=legacy)  # fmt: skip
    found = []
    for entry in catalog.segments:
        if not offsets_overlap(entry.first_offset, entry.last_offset, from_offset, to_offset):
            continue
        if only is not None and entry.name not in only:
            continue
        problem = segment_problem(topic_dir, entry)
        if problem is not None:
            found.append(BadSegment(entry.name, entry.first_offset, entry.last_offset, problem))
    tail = catalog.tail_of(catalog.tail.name) if catalog.tail is not None else None
    if (
        tail is not None
        and offsets_overlap(tail.first_offset, tail.last_offset, from_offset, to_offset)
        and (only is None or tail.name in only)
    ):
        problem = tail_problem(topic_dir, tail, keys)
        if problem is not None:
            found.append(BadSegment(tail.name, tail.first_offset, tail.last_offset, problem))
    return found


def unverifiable_segments(
    root: Location,
    topic: str,
    partition: int,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    only: Collection[str] | None = None,
    legacy: bool = False,
    keys: KeyRing = NO_KEYS,
) -> list[BadSegment]:
    """The partition's segments (those that may hold offsets in the window), when its catalog was kept and is lost
    (:func:`spark_kafka_backup.catalog.store.missing_catalog`): none can be checked. Empty when the partition has a
    catalog or never had one. No record is read: a look at two paths and the partition index (``keys`` is taken so
    that it and :func:`bad_segments` are called alike)."""
    # The marker first: it is written after the catalog, so a catalog not found after the marker was is gone (not
    # about to be written by a backup starting the partition).
    reason = missing_catalog(root, topic, partition)
    if reason is None or exists(catalog_path(root, topic, partition)):
        return []
    segments = PartitionReader(root / topic, partition, legacy=legacy).segments
    found: list[BadSegment] = []
    for number, segment in enumerate(segments):
        last = segments[number + 1].start_offset - 1 if number + 1 < len(segments) else None
        if not offsets_overlap(segment.start_offset, last, from_offset, to_offset):
            continue
        if only is not None and segment.name not in only:
            continue
        why = reason if not found else "unchecked: its checksums are lost with the catalog"
        found.append(BadSegment(segment.name, segment.start_offset, last, why))
    return found


#: How many damaged segments one refusal names (a partition whose catalog is lost has every segment unchecked).
DAMAGE_NAMED = 5


def damage_text(described: list[str]) -> str:
    """Damaged segments as one refusal names them: the first :data:`DAMAGE_NAMED`, then how many more."""
    more = len(described) - DAMAGE_NAMED
    return "; ".join(described[:DAMAGE_NAMED] + ([f"and {more} more segments"] if more > 0 else []))


def offsets_overlap(first: int | None, last: int | None, low: int | None, high: int | None) -> bool:
    """Whether offsets ``first..last`` meet the window ``low..high`` (``None``: unknown or open)."""
    if low is not None and last is not None and last < low:
        return False
    return high is None or first is None or first <= high
