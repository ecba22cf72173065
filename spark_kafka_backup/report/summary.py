"""A backup's contents, per topic and partition: coverage, gaps, sizes, time range, groups, checkpoints.

Built from the partition indexes and segment indexes (never the records), plus
the catalog for time ranges when it has them, so it is cheap for any size of
backup and works for one the original tool wrote.

**Coverage** is the offset ranges the backup holds, read from the segment
indexes. An offset between a partition's first and last record that holds no
record is one of three things:

- **transaction offsets** (``skipped``): read by spark-kafka-backup from the source, which had
  no record there for a consumer: a transaction's commit or abort marker, an aborted
  transaction's records, and on a compacted topic records compacted away. Known from
  the catalog's ``readFrom`` (:attr:`spark_kafka_backup.catalog.model.PartitionCatalog.read_from`)
  where its entries vouch for the records around them (:class:`GapSorter`): normal, not damage.
- **lost at the source** (:mod:`spark_kafka_backup.catalog.source_gaps`): deleted by the source
  before the backup read them. Not damage to the backup either, but records that are gone.
- **erased** (:mod:`spark_kafka_backup.catalog.erasures`): records ``spark-kafka-backup erase`` took out on purpose.
- **missing** (``missing``): everything else. Not there, and nothing says why: around a
  segment lost, truncated or not cataloged, in a backup written by the original tool or
  before spark-kafka-backup recorded ``readFrom``.

A **gap** is a run of at least ``min_gap`` (default 2) missing offsets between two
covered ranges; transaction offsets do not break a covered range.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from spark_kafka_backup.catalog.build import file_size, segment_time_range
from spark_kafka_backup.catalog.checkpoints import Checkpoint, list_checkpoints
from spark_kafka_backup.catalog.erasures import read_erasure
from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.catalog.source_gaps import ERASED, SourceGap, read_gaps
from spark_kafka_backup.catalog.store import catalog_lost, read_catalog
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.layout import list_partitions, list_topics
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.storage import Location
from spark_kafka_backup.text import count


@dataclass(frozen=True)
class OffsetRange:
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass
class PartitionSummary:
    partition: int
    records: int = 0
    bytes: int = 0
    segments: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    covered: list[OffsetRange] = field(default_factory=list)
    gaps: list[OffsetRange] = field(default_factory=list)
    #: Every run of missing offsets (single ones too), the first :data:`MISSING_LISTED` of them.
    missing_ranges: list[OffsetRange] = field(default_factory=list)
    #: Size of the index files; ``bytes`` is the size of the records files (as ``ls`` and the job logs count).
    index_bytes: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    cataloged: bool = False
    #: Its catalog was kept and is lost (:func:`~spark_kafka_backup.catalog.store.missing_catalog`): damage, the
    #: segments' checksums are gone.
    catalog_lost: bool = False
    #: Offsets between first and last that the backup does not hold, gaps of every size included, less those
    #: recorded as lost at the source and the transaction offsets.
    missing: int = 0
    #: Transaction offsets (module docstring): how many, and the first :data:`MISSING_LISTED` runs of them.
    skipped: int = 0
    skipped_ranges: list[OffsetRange] = field(default_factory=list)
    #: Ranges the source deleted before the backup read them (:mod:`spark_kafka_backup.catalog.source_gaps`): not
    #: damage.
    lost_at_source: list[SourceGap] = field(default_factory=list)
    #: Records taken out on purpose (:mod:`spark_kafka_backup.catalog.erasures`): not damage; their offsets are in
    #: none of the counts above.
    erased_records: int = 0


@dataclass
class TopicSummary:
    topic: str
    partitions: list[PartitionSummary] = field(default_factory=list)
    #: Its recorded ``cleanup.policy`` compacts: transaction offsets include records compacted away.
    compacted: bool = False

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)


@dataclass
class BackupSummary:
    root: str
    topics: list[TopicSummary] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON form (``spark-kafka-backup describe --json``); keys in camelCase like the catalog's."""
        return {
            "root": self.root,
            "topics": [
                {
                    "topic": t.topic,
                    "records": t.records,
                    "bytes": t.bytes,
                    "compacted": t.compacted,
                    "partitions": [_partition_json(p) for p in t.partitions],
                }
                for t in self.topics
            ],
            "checkpoints": [
                {
                    "id": c.id,
                    "status": c.status,
                    "requestedAt": c.requested_at,
                    "takenAt": c.taken_at,
                    "reason": c.reason,
                    "groups": sorted(c.groups),
                    "partitions": len(c.ends),
                }
                for c in self.checkpoints
            ],
        }


def _partition_json(p: PartitionSummary) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "records": p.records,
        "bytes": p.bytes,
        "segments": p.segments,
        "firstOffset": p.first_offset,
        "lastOffset": p.last_offset,
        "minTimestamp": p.min_timestamp,
        "maxTimestamp": p.max_timestamp,
        "covered": [asdict(r) for r in p.covered],
        "gaps": [asdict(r) for r in p.gaps],
        "missingOffsets": p.missing,
        "missingRanges": [asdict(r) for r in p.missing_ranges],
        "transactionOffsets": p.skipped,
        "transactionRanges": [asdict(r) for r in p.skipped_ranges],
        "lostAtSourceOffsets": sum(g.count for g in p.lost_at_source),
        "lostAtSource": [{"first": g.first, "last": g.last, "how": g.how} for g in p.lost_at_source],
        "erasedRecords": p.erased_records,
        "indexBytes": p.index_bytes,
        "groups": dict(sorted(p.groups.items())),
        "cataloged": p.cataloged,
        "catalogLost": p.catalog_lost,
    }


#: Single missing offsets are usually transaction markers; gaps shorter than this are counted, not listed.
MIN_GAP = 2
#: How many runs of missing offsets a summary keeps (compaction can leave millions); all are counted.
MISSING_LISTED = 100
#: How many of them one line of text shows.
MISSING_SHOWN = 10

_CHUNK_ENTRIES = 1 << 16


def summarize_partition(
    root: Location,
    topic: str,
    partition: int,
    *,
    legacy: bool = False,
    min_gap: int = MIN_GAP,
    keys: KeyRing = NO_KEYS,
) -> PartitionSummary:
    summary = PartitionSummary(partition)
    reader = PartitionReader(root / topic, partition, legacy=legacy, keys=keys)
    summary.segments = len(reader.segments)
    summary.lost_at_source = read_gaps(root, topic, partition)
    erased, summary.erased_records = read_erasure(root, topic, partition)
    catalog = read_catalog(root, topic, partition)
    summary.catalog_lost = catalog_lost(root, topic, partition, catalog=catalog, has_segments=bool(reader.segments))
    sorter = GapSorter(explained_gaps(summary.lost_at_source, erased, topic, partition), catalog)
    previous: int | None = None
    run_start: int | None = None
    for entry in reader.segments:
        records_path, index_path = reader.segment_paths(entry)
        summary.bytes += file_size(records_path) or 0
        summary.index_bytes += file_size(index_path) or 0
        # One pass over the index gives both the record count and the runs of offsets.
        runs = _runs(index_path, legacy=legacy)
        _enter(sorter, entry.name, runs)
        for number, (first, last) in enumerate(runs):
            summary.records += last - first + 1
            if previous is None:
                run_start = first
            elif first > previous + 1:
                missing, skipped = sorter.sort(previous + 1, first - 1, across=number == 0)
                _add(summary.missing_ranges, missing)
                _add(summary.skipped_ranges, skipped)
                summary.missing += sum(part.count for part in missing)
                summary.skipped += sum(part.count for part in skipped)
                read_through = sum(part.count for part in skipped) == first - previous - 1
                if first - previous - 1 >= min_gap and not read_through:
                    assert run_start is not None
                    summary.covered.append(OffsetRange(run_start, previous))
                    if missing:  # a range lost at the source is drawn as such, not as a gap
                        summary.gaps.append(OffsetRange(previous + 1, first - 1))
                    run_start = first
            previous = last
    if run_start is not None and previous is not None:
        summary.covered.append(OffsetRange(run_start, previous))
    if summary.covered:
        summary.first_offset = summary.covered[0].first
        summary.last_offset = summary.covered[-1].last
    ranges: list[tuple[int | None, int | None]] = []
    described = set()
    if catalog is not None and catalog.segments:
        summary.cataloged = True
        ranges = [(e.min_timestamp, e.max_timestamp) for e in catalog.segments]
        described = {e.name for e in catalog.segments}
    for entry in reader.segments:
        if entry.name not in described:  # the tail a backup still appends to, or no catalog
            records_path, index_path = reader.segment_paths(entry)
            ranges.append(segment_time_range(records_path, index_path, legacy=legacy, keys=keys))
    lows = [low for low, _ in ranges if low is not None]
    highs = [high for _, high in ranges if high is not None]
    summary.min_timestamp = min(lows) if lows else None
    summary.max_timestamp = max(highs) if highs else None
    summary.groups = read_consumer_offsets(root / topic, partition)
    return summary


def _enter(sorter: GapSorter, name: str, runs: list[tuple[int, int]]) -> None:
    records = sum(last - first + 1 for first, last in runs)
    sorter.enter(name, runs[0][0] if runs else None, runs[-1][1] if runs else None, records)


def _add(listed: list[OffsetRange], parts: list[OffsetRange]) -> None:
    listed.extend(parts[: max(0, MISSING_LISTED - len(listed))])


def summarize_backup(
    root: Location, topics: list[str] | None = None, *, legacy: bool = False, keys: KeyRing = NO_KEYS
) -> BackupSummary:
    """Summarise ``topics`` (default: all) of the backup at ``root`` (``keys``: a sealed uncataloged segment's)."""
    chosen = list_topics(root) if topics is None else topics
    result = BackupSummary(str(root), checkpoints=list_checkpoints(root))
    for topic in chosen:
        partitions = [
            summarize_partition(root, topic, p, legacy=legacy, keys=keys) for p in list_partitions(root / topic)
        ]
        result.topics.append(TopicSummary(topic, partitions, compacted=is_compacted(root, topic)))
    return result


def is_compacted(root: Location, topic: str) -> bool:
    """Whether the topic's recorded configuration compacts it (then records compacted away are skipped too)."""
    record = read_topic_record(root, topic)
    return record is not None and "compact" in record.config.get("cleanup.policy", "")


def explained_gaps(lost: list[SourceGap], erased: ErasedOffsets, topic: str, partition: int) -> list[SourceGap]:
    """The ranges that explain offsets holding no record other than as transaction offsets or missing ones: lost at
    the source, and erased on purpose; in offset order."""
    on_purpose = [SourceGap(topic, partition, first, last, 0, ERASED) for first, last in erased.ranges()]
    return sorted([*lost, *on_purpose], key=lambda gap: (gap.first, gap.last))


def missing_offsets(
    reader: PartitionReader,
    *,
    legacy: bool = False,
    lost_at_source: list[SourceGap] | None = None,
    catalog: PartitionCatalog | None = None,
) -> tuple[tuple[int, list[OffsetRange]], tuple[int, list[OffsetRange]]]:
    """Offsets between a partition's first and last record that the backup does not hold: the missing ones and the
    transaction offsets (module docstring), each as a count and its first runs; ranges lost at the source in neither."""
    sorter = GapSorter(lost_at_source or [], catalog)
    missing: list[OffsetRange] = []
    skipped: list[OffsetRange] = []
    counts = [0, 0]
    previous: int | None = None
    for entry in reader.segments:
        _, index_path = reader.segment_paths(entry)
        runs = _runs(index_path, legacy=legacy)
        _enter(sorter, entry.name, runs)
        for number, (first, last) in enumerate(runs):
            if previous is not None and first > previous + 1:
                missing_parts, skipped_parts = sorter.sort(previous + 1, first - 1, across=number == 0)
                counts[0] += sum(part.count for part in missing_parts)
                counts[1] += sum(part.count for part in skipped_parts)
                _add(missing, missing_parts)
                _add(skipped, skipped_parts)
            previous = last
    return (counts[0], missing), (counts[1], skipped)


class GapSorter:
    """Sorts the offsets between two stored records into missing ones and transaction offsets (module docstring),
    leaving out the ranges lost at the source.

    Offsets are transaction offsets only where the catalog vouches for the records around them, not merely where
    nothing says otherwise: at or above ``readFrom``, inside a segment whose catalog entry says exactly what its
    index holds (first and last offset, record count; for the newest segment, its recorded committed prefix), or
    between two such segments that follow each other in the catalog. A segment lost, truncated, re-indexed, copied
    in from elsewhere or not cataloged yet vouches for nothing: the offsets around it stay missing.

    The caller walks the partition's segments in order: :meth:`enter` with each one's first and last offset and
    record count, then :meth:`sort` for each gap before one of its runs.
    """

    def __init__(self, lost: list[SourceGap], catalog: PartitionCatalog | None) -> None:
        self._lost = _Explained(lost)
        self._read_from = catalog.read_from if catalog is not None else None
        #: Per segment name: its place in the catalog's chain of segments with records, and what it must hold.
        self._chain: dict[str, tuple[int, int | None, int | None, int, bool]] = {}
        if catalog is not None and self._read_from is not None:
            described = [e for e in catalog.segments if e.records]
            for place, entry in enumerate(described):
                self._chain[entry.name] = (place, entry.first_offset, entry.last_offset, entry.records, False)
            tail = catalog.tail
            if tail is not None and tail.records and tail.name not in self._chain:
                self._chain[tail.name] = (len(described), tail.first_offset, tail.last_offset, tail.records, True)
        self._previous: tuple[int, int] | None = None  # (place, vouched through) of the last segment with records
        self._current: tuple[int, int] | None = None

    def enter(self, name: str, first: int | None, last: int | None, records: int) -> None:
        """The next segment of the partition, as its index has it."""
        if records == 0:
            return  # an empty segment holds nothing to vouch for and breaks no chain
        self._previous = self._current
        self._current = None
        described = self._chain.get(name)
        if described is None or first is None or last is None:
            return
        place, want_first, want_last, want_records, newest = described
        if newest:  # the newest segment: its committed prefix, which may have grown since
            if want_first == first and want_last is not None and want_last <= last and want_records <= records:
                self._current = (place, want_last)
        elif (want_first, want_last, want_records) == (first, last, records):
            self._current = (place, last)

    def sort(self, first: int, last: int, *, across: bool) -> tuple[list[OffsetRange], list[OffsetRange]]:
        """The missing parts and the transaction-offset parts of ``first..last``: a gap inside the segment
        entered last, or ``across`` the boundary between it and the one before."""
        vouched = self._vouched(first, last, across=across)
        missing: list[OffsetRange] = []
        skipped: list[OffsetRange] = []
        read_from = self._read_from
        for part in self._lost.rest(first, last):
            if not vouched or read_from is None or part.last < read_from:
                missing.append(part)
                continue
            if part.first < read_from:
                missing.append(OffsetRange(part.first, read_from - 1))
                part = OffsetRange(read_from, part.last)
            skipped.append(part)
        return missing, skipped

    def _vouched(self, first: int, last: int, *, across: bool) -> bool:
        current = self._current
        if current is None or last >= current[1]:
            return False
        if not across:
            return True
        previous = self._previous
        # The one before must be vouched for to its end (its last record is just below the gap) and come right
        # before this one in the catalog.
        return previous is not None and previous[1] == first - 1 and previous[0] + 1 == current[0]


class _Explained:
    """Takes the ranges lost at the source out of runs of missing offsets (runs come in increasing order)."""

    def __init__(self, gaps: list[SourceGap]) -> None:
        self._gaps = [(gap.first, gap.last) for gap in gaps]

    def rest(self, first: int, last: int) -> list[OffsetRange]:
        """The parts of ``first..last`` no recorded gap explains."""
        parts = []
        at = first
        for low, high in self._gaps:
            if high < at or low > last:
                continue
            if low > at:
                parts.append(OffsetRange(at, low - 1))
            at = max(at, high + 1)
            if at > last:
                break
        if at <= last:
            parts.append(OffsetRange(at, last))
        return parts


def describe_skipped(skipped: int, ranges: list[OffsetRange], *, compacted: bool, shown: int = MISSING_SHOWN) -> str:
    """Transaction offsets as ``ls``, ``describe`` and the report write them: "12 transaction offsets: 40..51"
    (on a compacted topic "compacted or transaction offsets")."""
    if not skipped:
        return ""
    word = "compacted or transaction offset" if compacted else "transaction offset"
    return f"{count(skipped, word)}: {_listed(skipped, ranges, shown)}"


def describe_missing(missing: int, ranges: list[OffsetRange], *, shown: int = MISSING_SHOWN) -> str:
    """Missing offsets as ``ls``, ``describe`` and the report all write them: "3 offsets missing: 40, 52..53"."""
    if not missing:
        return ""
    return f"{count(missing, 'offset')} missing: {_listed(missing, ranges, shown)}"


def _listed(total: int, ranges: list[OffsetRange], shown: int) -> str:
    listed = ", ".join(str(r.first) if r.first == r.last else f"{r.first}..{r.last}" for r in ranges[:shown])
    rest = total - sum(r.count for r in ranges[:shown])
    return listed + (f" and {rest} more" if rest > 0 else "")


def _runs(index_path: Location, *, legacy: bool) -> list[tuple[int, int]]:
    """The runs of consecutive offsets a segment index lists, as ``(first, last)`` pairs.

    Reads the index in chunks (64 Ki entries) and finds breaks with numpy, so
    the cost is one pass over the index, never the records.
    """
    runs: list[tuple[int, int]] = []
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        for start in range(0, index.count, _CHUNK_ENTRIES):
            n = min(_CHUNK_ENTRIES, index.count - start)
            raw = index.read_entries(start, n)
            offsets = np.frombuffer(raw, dtype=ENTRY_DTYPE)["offset"].astype(np.int64)
            breaks = np.flatnonzero(np.diff(offsets) != 1)
            firsts = [int(offsets[0]), *(int(offsets[i + 1]) for i in breaks)]
            lasts = [*(int(offsets[i]) for i in breaks), int(offsets[-1])]
            for first, last in zip(firsts, lasts, strict=True):
                if runs and first == runs[-1][1] + 1:
                    runs[-1] = (runs[-1][0], last)
                else:
                    runs.append((first, last))
    return runs
