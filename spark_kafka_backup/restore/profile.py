"""What a restore writes, as a target topic's limits see it: timestamps, sizes, keys.

The plan (:mod:`spark_kafka_backup.restore.target_limits`) compares these with the
target's settings before anything is produced. Per backed-up partition and
window, a :class:`RecordsProfile` holds:

- the oldest and newest timestamp of a stamped record (CreateTime or
  LogAppendTime, a value other than Kafka's "no timestamp" -1): the broker
  checks these against ``message.timestamp.before.max.ms`` /
  ``after.max.ms``, and time-based retention against the oldest;
- the records stamped exactly 0 (1970-01-01T00:00:00Z): a valid Kafka
  timestamp that librdkafka, the producer beneath the restore, replaces with
  the current time (0 means "now" in its API), so they cannot be kept;
- the largest record as a Kafka record batch of its own (what
  ``max.message.bytes`` limits), and the partition's bytes (what
  ``retention.bytes`` limits);
- when asked (a compacted target), the records without a key, which a
  compacted topic rejects.

Cost: a finished segment the catalog describes and the window takes whole is
answered from the catalog (time range, size) and its index (the largest
record's stored length, which bounds its Kafka size), and so is the newest
segment when the catalog's tail is all of it and has its time range; it is
read only when it may hold a timestamp 0, when keys are asked for, or when
that bound exceeds the limit given. Every other segment is read in columnar batches
(:mod:`spark_kafka_backup.partition.segment_batches`, no Python object per record).

Kafka's record batch of one record (message format v2, uncompressed), which
is what the size is measured in::

    batch header        61 bytes  (baseOffset .. recordCount)
    record length       varint
    attributes          1 byte
    timestampDelta      varlong   (0: 1 byte)
    offsetDelta         varint    (0: 1 byte)
    keyLength, key      varint (-1 for null), bytes
    valueLength, value  varint (-1 for null), bytes
    headerCount         varint
    per header: keyLength varint, key, valueLength varint (-1 for null), value

Varints are zig-zag encoded, 7 bits a byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.catalog.model import PartitionCatalog, SegmentEntry
from spark_kafka_backup.format.record_columns import DecodedRecords
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_batches import iter_segment_batches
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.storage import Location, storage_for

#: The bytes of a v2 record batch before its records.
BATCH_HEADER_BYTES = 61
#: How many offsets of records stamped 0 a profile keeps to name them.
NAMED = 5
#: Kafka's "no timestamp".
NO_TIMESTAMP = -1

Int64s = npt.NDArray[np.int64]


@dataclass
class RecordsProfile:
    """What the records a restore writes from one partition (or several, merged) are like (module docstring)."""

    records: int = 0
    oldest: int | None = None
    newest: int | None = None
    #: Records whose timestamp is exactly 0, and the first few as (backed-up partition, offset).
    zero_stamped: int = 0
    zero_stamped_at: list[tuple[int, int]] = field(default_factory=list)
    #: The largest record as a batch of its own, in bytes, and where it is; ``exact`` False: an upper bound.
    largest: int = 0
    largest_at: tuple[int, int] | None = None
    largest_exact: bool = True
    #: The records' stored (v1) bytes: above what they take in a Kafka log (the v1 layout is the wider).
    stored_bytes: int = 0
    #: Records without a key (``None``: not counted), and the first few.
    keyless: int | None = None
    keyless_at: list[tuple[int, int]] = field(default_factory=list)

    def merge(self, other: RecordsProfile) -> RecordsProfile:
        """Both profiles as one (a topic's partitions together)."""
        merged = RecordsProfile(
            records=self.records + other.records,
            oldest=_least(self.oldest, other.oldest),
            newest=_most(self.newest, other.newest),
            zero_stamped=self.zero_stamped + other.zero_stamped,
            zero_stamped_at=sorted(self.zero_stamped_at + other.zero_stamped_at)[:NAMED],
            stored_bytes=self.stored_bytes + other.stored_bytes,
        )
        bigger = self if (self.largest, self.largest_exact) >= (other.largest, other.largest_exact) else other
        merged.largest, merged.largest_at = bigger.largest, bigger.largest_at
        merged.largest_exact = bigger.largest_exact
        if self.keyless is not None and other.keyless is not None:
            merged.keyless = self.keyless + other.keyless
            merged.keyless_at = sorted(self.keyless_at + other.keyless_at)[:NAMED]
        return merged


def profile_partition(
    reader: PartitionReader,
    window: Window,
    catalog: PartitionCatalog | None,
    *,
    keys: bool = False,
    size_limit: int | None = None,
) -> RecordsProfile:
    """The profile of the records ``window`` selects from ``reader``'s partition (module docstring).

    ``keys``: count records without a key. ``size_limit``: the largest record may be given as an upper bound
    (``largest_exact`` False) while that bound is at most this; above it, it is measured exactly.
    """
    cataloged = {entry.name: entry for entry in (catalog.segments if catalog is not None else ())}
    profile = RecordsProfile(keyless=0 if keys else None)
    partition = reader.partition
    segments = reader.segments
    for at, segment in enumerate(segments):
        if window.to_offset is not None and segment.start_offset > window.to_offset:
            break
        following = segments[at + 1].start_offset if at + 1 < len(segments) else None
        if window.from_offset is not None and following is not None and following <= window.from_offset:
            continue  # every record here is below the window
        if segment.name in window.skip_segments:
            continue
        records_path, index_path = reader.segment_paths(segment)
        entry = cataloged.get(segment.name) or _whole_tail(catalog, segment.name, segment.start_offset, records_path,
                                                           index_path)  # fmt: skip
        if entry is not None and not window.by_records and _takes_whole(entry, window):
            quick = _from_catalog(entry, index_path, partition, legacy=reader.legacy)
            # A 0 may be in the range, or a -1 ("no timestamp", which the catalog counts among timestamps): read it.
            zero_possible = quick.oldest is not None and quick.oldest <= 0 and (quick.newest or 0) >= -1
            too_big = size_limit is not None and quick.largest > size_limit
            if not (zero_possible or too_big or keys):
                profile = profile.merge(quick)
                continue
        keep = window.matched.holds if window.matched is not None else None
        for batch in iter_segment_batches(records_path, index_path, from_offset=window.from_offset,
                                          legacy=reader.legacy, keep=keep, keys=reader.keys):  # fmt: skip
            columns = batch.columns
            chosen = _selected(columns, window)
            if chosen is not None and not chosen.any():
                if window.to_offset is not None and columns.offsets[-1] > window.to_offset:
                    break
                continue
            profile = profile.merge(profile_columns(columns, partition, chosen, keys=keys))
            if window.to_offset is not None and columns.offsets[-1] > window.to_offset:
                break
    return profile


def profile_columns(
    columns: DecodedRecords, partition: int, chosen: npt.NDArray[np.bool_] | None = None, *, keys: bool = False
) -> RecordsProfile:
    """The profile of decoded records (those ``chosen`` marks, or all), measured exactly."""
    if chosen is not None:
        columns = _take(columns, chosen)
    n = len(columns)
    if n == 0:
        return RecordsProfile(keyless=0 if keys else None)
    offsets = columns.offsets
    kinds = columns.timestamp_types
    stamps = columns.timestamps
    stamped = ((kinds == 0) | (kinds == 1)) & (stamps != NO_TIMESTAMP)
    profile = RecordsProfile(records=n)
    if stamped.any():
        profile.oldest, profile.newest = int(stamps[stamped].min()), int(stamps[stamped].max())
        zeros = np.flatnonzero(stamped & (stamps == 0))
        profile.zero_stamped = len(zeros)
        profile.zero_stamped_at = [(partition, int(offsets[i])) for i in zeros[:NAMED]]
    sizes = kafka_batch_sizes(columns)
    biggest = int(np.argmax(sizes))
    profile.largest, profile.largest_at = int(sizes[biggest]), (partition, int(offsets[biggest]))
    profile.stored_bytes = int(stored_lengths(columns).sum())
    if keys:
        keyless = np.flatnonzero(columns.key_lengths < 0)
        profile.keyless = len(keyless)
        profile.keyless_at = [(partition, int(offsets[i])) for i in keyless[:NAMED]]
    return profile


def kafka_batch_sizes(columns: DecodedRecords) -> Int64s:
    """Each record's size as a Kafka record batch of its own (module docstring)."""
    key_lengths = columns.key_lengths
    value_lengths = columns.value_lengths
    body = 3 + _varint_sizes(key_lengths) + np.maximum(key_lengths, 0)
    body += _varint_sizes(value_lengths) + np.maximum(value_lengths, 0)
    body += _varint_sizes(columns.header_counts)
    if len(columns.header_key_lengths):
        header_keys = columns.header_key_lengths
        header_values = columns.header_value_lengths
        each = _varint_sizes(header_keys) + header_keys + _varint_sizes(header_values) + np.maximum(header_values, 0)
        totals = np.concatenate(([0], np.cumsum(each)))
        first = columns.header_first
        body += totals[first + columns.header_counts] - totals[first]
    return BATCH_HEADER_BYTES + _varint_sizes(body) + body


def stored_lengths(columns: DecodedRecords) -> Int64s:
    """Each record's length in the v1 layout (formats/records.md)."""
    kinds = columns.timestamp_types
    fixed = 24 + np.where((kinds == 0) | (kinds == 1), 8, 0)
    lengths = fixed + np.maximum(columns.key_lengths, 0) + np.maximum(columns.value_lengths, 0)
    if len(columns.header_key_lengths):
        each = 8 + columns.header_key_lengths + np.maximum(columns.header_value_lengths, 0)
        totals = np.concatenate(([0], np.cumsum(each)))
        lengths += totals[columns.header_first + columns.header_counts] - totals[columns.header_first]
    return lengths.astype(np.int64)


def kafka_size_bound(stored_length: int) -> int:
    """An upper bound of a record's size as a batch of its own, from its stored (v1) length alone.

    The v1 layout spends 24 bytes (32 stamped) on fixed fields and 8 per header where Kafka spends varints of at
    most 5 bytes each: a record of stored length L has at most (L - 24) / 8 headers, each at most 2 bytes longer
    in Kafka, and its other fields at most 21 bytes longer, plus the batch header.
    """
    return BATCH_HEADER_BYTES + 21 + stored_length + max(0, stored_length - 24) // 4


def _varint_sizes(values: Int64s) -> Int64s:
    """Bytes of each value as a zig-zag varint."""
    zigzag = np.where(values < 0, -2 * values - 1, 2 * values).astype(np.uint64)
    sizes = np.ones(len(values), dtype=np.int64)
    for bits in range(7, 64, 7):
        sizes += zigzag >= np.uint64(1 << bits)
    return sizes


def _from_catalog(entry: SegmentEntry, index_path: Location, partition: int, *, legacy: bool) -> RecordsProfile:
    """A whole cataloged segment's profile without reading its records (the largest record bounded)."""
    profile = RecordsProfile(records=entry.records, oldest=entry.min_timestamp, newest=entry.max_timestamp)
    profile.stored_bytes = entry.plain_bytes if entry.plain_bytes is not None else entry.records_bytes
    largest, at = 0, -1
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        step = 1 << 16
        for begin in range(0, index.count, step):
            count = min(step, index.count - begin)
            entries = np.frombuffer(index.read_entries(begin, count), dtype=ENTRY_DTYPE)
            here = int(np.argmax(entries["length"]))
            if int(entries["length"][here]) > largest:
                largest, at = int(entries["length"][here]), int(entries["offset"][here])
    if at >= 0:
        profile.largest, profile.largest_at, profile.largest_exact = kafka_size_bound(largest), (partition, at), False
    return profile


def _whole_tail(
    catalog: PartitionCatalog | None, name: str, start_offset: int, records_path: Location, index_path: Location
) -> SegmentEntry | None:
    """The catalog's tail as a finished segment's entry, when it describes the whole of segment ``name`` (its two
    files hold exactly the committed prefix: nothing in flight past it) with the time range its writer kept; else
    ``None`` (the segment is read). A snapshot's newest segments stay tails: without this a restore's plan read
    every record of them on the driver (5 M records of 200 B: 3 to 8 s before the first task)."""
    tail = catalog.tail if catalog is not None else None
    if tail is None or tail.name != name or not tail.times:
        return None
    if storage_for(records_path).size(records_path) != tail.records_bytes:
        return None
    if storage_for(index_path).size(index_path) != tail.index_bytes:
        return None
    return SegmentEntry(name=name, start_offset=start_offset, first_offset=tail.first_offset,
                        last_offset=tail.last_offset, records=tail.records, min_timestamp=tail.min_timestamp,
                        max_timestamp=tail.max_timestamp, records_bytes=tail.records_bytes,
                        index_bytes=tail.index_bytes, records_crc32c=tail.records_crc32c,
                        index_crc32c=tail.index_crc32c)  # fmt: skip


def _takes_whole(entry: SegmentEntry, window: Window) -> bool:
    low, high = window.from_offset, window.to_offset
    if low is not None and (entry.first_offset is None or entry.first_offset < low):
        return False
    return high is None or (entry.last_offset is not None and entry.last_offset <= high)


def _selected(columns: DecodedRecords, window: Window) -> npt.NDArray[np.bool_] | None:
    """Which decoded records the window selects (``None``: all)."""
    offsets = columns.offsets
    chosen = np.ones(len(offsets), dtype=bool)
    every = True
    if window.from_offset is not None and offsets[0] < window.from_offset:
        chosen &= offsets >= window.from_offset
        every = False
    if window.to_offset is not None and offsets[-1] > window.to_offset:
        chosen &= offsets <= window.to_offset
        every = False
    if window.by_time:
        kinds, stamps = columns.timestamp_types, columns.timestamps
        chosen &= (kinds == 0) | (kinds == 1)
        if window.from_time is not None:
            chosen &= stamps >= window.from_time
        if window.to_time is not None:
            chosen &= stamps <= window.to_time
        every = False
    if window.matched is not None:
        chosen &= window.matched.holds(np.asarray(offsets, dtype=np.int64))
        every = False
    return None if every else chosen


def _take(columns: DecodedRecords, chosen: npt.NDArray[np.bool_]) -> DecodedRecords:
    """The chosen records' columns (headers stay where they are: ``header_first`` still points into them)."""
    return replace(
        columns,
        offsets=columns.offsets[chosen],
        timestamp_types=columns.timestamp_types[chosen],
        timestamps=columns.timestamps[chosen],
        key_starts=columns.key_starts[chosen],
        key_lengths=columns.key_lengths[chosen],
        value_starts=columns.value_starts[chosen],
        value_lengths=columns.value_lengths[chosen],
        header_counts=columns.header_counts[chosen],
        header_first=columns.header_first[chosen],
    )


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
