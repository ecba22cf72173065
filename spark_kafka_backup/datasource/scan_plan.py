"""Planning a read of a backup on the driver: which segments, in which tasks.

What is looked at: the topic directories, each chosen partition's partition index and its catalog (small files).
No segment is opened (but with keys, each segment's sealed head, as ``cat`` checks it): a segment is left out when
the options show it holds no row they want, from the catalog's first and last offset and its smallest and largest
timestamp. A segment the catalog does not describe (the newest one of a running backup, or a backup without a
catalog) is pruned by offsets only, from the partition index's start offsets. Each plan says in one line how many
segments it reads of how many the topics and partitions it looked at hold.

Each task then reads whole segments of one partition, consecutive ones grouped up to ``maxBytesPerTask`` stored
bytes (:class:`~spark_kafka_backup.datasource.segment_scan.SegmentScan`).

Checked here, as ``cat`` checks them: segments lost from the partition index (named by the catalog, or present as
files) and, with keys, the seals; checksums are checked by each task on the segments it reads.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from spark_kafka_backup.catalog.integrity import damage_text, offsets_overlap, unverifiable_segments
from spark_kafka_backup.catalog.model import PartitionCatalog, SegmentEntry
from spark_kafka_backup.catalog.seals import seal_problems
from spark_kafka_backup.catalog.segment_set import lost_segments
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.datasource.scan_options import ScanOptions
from spark_kafka_backup.datasource.segment_scan import SegmentScan
from spark_kafka_backup.errors import BackupNotFoundError, DamagedBackupError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.partition.layout import chosen_topics, list_partitions
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import load_keys
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.storage import parse_location, size

log = logging.getLogger("spark_kafka_backup.datasource")


@dataclass(frozen=True)
class _Chosen:
    name: str
    start_offset: int
    #: The start offset of the segment after it in the partition index (``None``: none).
    following: int | None
    #: Stored bytes, from the catalog (``None``: not described there).
    size: int | None


def plan_scans(options: ScanOptions) -> list[SegmentScan]:
    """The tasks reading what ``options`` leave of the backup, by topic, partition and offset; logs how many segments
    they read of how many there are."""
    root = parse_location(options.root)
    keys = load_keys(options.key_sources)  # exactly this read's keys (none: none)
    topics = chosen_topics(root, None, option="the option topics")
    for topic in options.topics or ():
        if topic not in topics:
            raise BackupNotFoundError(
                f"kbackup data source: topic {topic!r} (option topics) is not in backup {root} "
                f"(topics: {', '.join(topics) or 'none'})"
            )
    partitions = {topic: list_partitions(root / topic) for topic in options.topics or topics}
    found = {partition for listed in partitions.values() for partition in listed}
    for partition in sorted(options.partitions or ()):
        if partition not in found:
            raise BackupNotFoundError(
                f"kbackup data source: partition {partition} (option partitions) is in none of the topics read "
                f"(partitions: {', '.join(map(str, sorted(found))) or 'none'})"
            )
    scans: list[SegmentScan] = []
    looked_at = 0
    for topic, listed in partitions.items():
        for partition in listed:
            if options.partitions is None or partition in options.partitions:
                partition_scans, segments = _partition_scans(options, topic, partition, keys)
                scans += partition_scans
                looked_at += segments
    if options.log_plan:
        _say(
            f"kbackup data source: {root}: reading {sum(len(scan.segments) for scan in scans)} of {looked_at} segments "
            f"in {len(scans)} tasks ({_described(options)})"
        )
    return scans


def _described(options: ScanOptions) -> str:
    """What the options select, for the plan's line."""
    window = options.window
    parts = [f"topics {','.join(options.topics)}" if options.topics else "every topic"]
    if options.partitions is not None:
        parts.append(f"partitions {','.join(map(str, sorted(options.partitions)))}")
    for name, value in (("fromOffset", window.from_offset), ("toOffset", window.to_offset),
                        ("fromTimestamp", window.from_time), ("toTimestamp", window.to_time)):  # fmt: skip
        if value is not None:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


def _say(line: str) -> None:
    """The plan's line: in the log when this process has one (a job's driver), else on standard error, which Spark
    passes on from its planning worker to the driver's."""
    if log.isEnabledFor(logging.INFO) and log.hasHandlers():
        log.info("%s", line)
    else:
        print(line, file=sys.stderr, flush=True)


def _partition_scans(options: ScanOptions, topic: str, partition: int, keys: KeyRing) -> tuple[list[SegmentScan], int]:
    """The tasks of one partition, and how many segments its partition index names."""
    window = options.window
    root = parse_location(options.root)
    reader = PartitionReader(root / topic, partition, legacy=options.legacy, keys=keys)
    if keys.keys:  # what the key does not vouch for is never read, whatever verify says
        unsealed = seal_problems(root, topic, partition, reader, keys, unrecorded_ok=options.allow_unauthenticated)
        if unsealed:
            raise DamagedBackupError(f"kbackup data source: nothing was read: {'; '.join(unsealed)}")
    unchecked: frozenset[str] = frozenset()
    if options.verify:
        lost = [bad.describe(topic, partition) for bad in lost_segments(root, topic, partition, reader)]
        if lost and not options.skip_bad_segments:
            raise DamagedBackupError(
                f"kbackup data source: the backup is damaged: {damage_text(lost)} (the option skipBadSegments reads "
                "the rest, verify=false reads what the files hold)"
            )
        for line in lost:
            log.warning("kbackup data source: left out: %s", line)
        # A catalog that was kept and is lost: no segment of the partition can be checked.
        unverifiable = unverifiable_segments(root, topic, partition, legacy=options.legacy)
        if unverifiable and not options.skip_bad_segments:
            unread = damage_text([bad.describe(topic, partition) for bad in unverifiable])
            raise DamagedBackupError(
                f"kbackup data source: nothing was read: {unread} (verify=false reads what the files hold, "
                "unchecked; skipBadSegments leaves the partition out)"
            )
        if unverifiable:
            log.warning("kbackup data source: left out, unchecked: topic %r partition %d (%d segments): its catalog is "
                        "lost", topic, partition, len(unverifiable))  # fmt: skip
        unchecked = frozenset(bad.name for bad in unverifiable)
    # The catalog's offsets and times prune only what is checked against it; verify=false reads as cat --no-verify
    # does, by the partition index alone.
    catalog = read_catalog(root, topic, partition) if options.verify else None
    described = {entry.name: entry for entry in catalog.segments} if catalog is not None else {}
    chosen: list[_Chosen] = []
    for number, segment in enumerate(reader.segments):
        following = reader.segments[number + 1].start_offset if number + 1 < len(reader.segments) else None
        entry = described.get(segment.name) or _vouched_tail(catalog, reader, segment.name, window)
        if segment.name not in unchecked and _may_hold(entry, segment.start_offset, following, window):
            size = None if entry is None else _stored(entry)
            chosen.append(_Chosen(segment.name, segment.start_offset, following, size))
    return [
        SegmentScan(
            root=options.root,
            topic=topic,
            partition=partition,
            segments=tuple((one.name, one.start_offset) for one in group),
            next_start=group[-1].following,
            window=window,
            key_sources=options.key_sources,
            verify=options.verify,
            skip_bad_segments=options.skip_bad_segments,
            legacy=options.legacy,
            columns=options.columns,
        )
        for group in _grouped(chosen, options.task_bytes)
    ], len(reader.segments)


def _vouched_tail(
    catalog: PartitionCatalog | None, reader: PartitionReader, name: str, window: Window
) -> SegmentEntry | None:
    """The newest segment as a catalog entry, for a time window, when its recorded tail vouches for its times: the
    writer kept them as it wrote (``tailTimes``) and the files hold nothing past the recorded prefix (a backup
    appending right now has bytes past it: then ``None``, and it is read)."""
    tail = catalog.tail_of(name) if catalog is not None and window.by_time else None
    if tail is None or not tail.times:
        return None
    records_path, index_path = reader.segment_paths(reader.segments[-1])
    if reader.segments[-1].name != name or (size(records_path), size(index_path)) != (
        tail.records_bytes,
        tail.index_bytes,
    ):
        return None
    return SegmentEntry(name, reader.segments[-1].start_offset, tail.first_offset, tail.last_offset, tail.records,
                        tail.min_timestamp, tail.max_timestamp, tail.records_bytes, tail.index_bytes,
                        tail.records_crc32c, tail.index_crc32c)  # fmt: skip


def _may_hold(entry: SegmentEntry | None, start: int, following: int | None, window: Window) -> bool:
    """Whether a segment may hold a record of the window (its catalog entry when it has one, else its place)."""
    if entry is None:
        last = None if following is None else following - 1
        return offsets_overlap(start, last, window.from_offset, window.to_offset)
    if not offsets_overlap(entry.first_offset, entry.last_offset, window.from_offset, window.to_offset):
        return False
    if not window.by_time:
        return True
    if entry.min_timestamp is None or entry.max_timestamp is None:
        return False  # no record of it has a timestamp: none is in a time window
    return offsets_overlap(entry.min_timestamp, entry.max_timestamp, window.from_time, window.to_time)


def _stored(entry: SegmentEntry) -> int:
    return entry.records_bytes + entry.index_bytes


def _grouped(chosen: list[_Chosen], task_bytes: int) -> list[list[_Chosen]]:
    """Consecutive segments together up to ``task_bytes`` stored bytes; a segment of unknown size alone."""
    groups: list[list[_Chosen]] = []
    total = task_bytes
    for one in chosen:
        if one.size is None or total + one.size > task_bytes or (groups and groups[-1][-1].size is None):
            groups.append([])
            total = 0
        groups[-1].append(one)
        total += one.size or task_bytes
    return groups
