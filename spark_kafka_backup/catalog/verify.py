"""Checking a backup: its files against its indexes, and against its catalog.

Always checked, per partition: the partition index decodes and every segment
it names has both files; segment files it does not name are reported as
extra (as a note when they hold nothing but magic bytes); segments follow
each other in increasing offsets; the consumer offsets file decodes. Against the catalog
(when the partition has one): every cataloged segment is present with the
same sizes and CRC32C checksums, the newest segment's committed prefix has
the CRC32Cs recorded for it, and the catalog's offsets increase. With
``deep``: every record of every segment is decoded and checked against its
index entry.

Findings are **errors** (the backup is damaged or incomplete) or **notes**
(worth knowing, not damage: no catalog yet, a finished segment the catalog
does not name yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spark_kafka_backup.catalog.build import file_crc32c, file_size
from spark_kafka_backup.catalog.erase import pending_erase, pending_erase_segments
from spark_kafka_backup.catalog.erasures import describe_erasure, read_erasure
from spark_kafka_backup.catalog.prune import pending_deletions
from spark_kafka_backup.catalog.seals import seal_problems
from spark_kafka_backup.catalog.source_gaps import HOW, read_gaps
from spark_kafka_backup.catalog.store import catalog_path, missing_catalog, read_catalog
from spark_kafka_backup.catalog.tail import tail_problem
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import RECORDS_SUFFIX
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.partition.layout import list_partitions, list_segment_files
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS, open_records
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile, iter_segment
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.storage import Location, ObjectPath, exists
from spark_kafka_backup.text import count

#: Index entries read per step when looking for records at erased offsets.
_ENTRIES_PER_STEP = 1 << 16


@dataclass
class PartitionReport:
    topic: str
    partition: int
    segments: int = 0
    records: int = 0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def verify_partition(
    root: Location,
    topic: str,
    partition: int,
    *,
    deep: bool = False,
    legacy: bool = False,
    deleting: set[tuple[str, int, str]] | None = None,
    keys: KeyRing | None = None,
    unrecorded_ok: bool = False,
) -> PartitionReport:
    """Check one partition; ``deleting`` is what an unfinished prune is removing (read when not given); with
    ``keys``, also that they vouch for every segment (:mod:`spark_kafka_backup.catalog.seals`)."""
    report = PartitionReport(topic, partition)
    topic_dir = root / topic
    try:
        reader = PartitionReader(topic_dir, partition, legacy=legacy, keys=keys or NO_KEYS)
    except SparkKafkaBackupError as exc:
        report.errors.append(str(exc))
        return report
    report.segments = len(reader.segments)
    listed = {segment.name for segment in reader.segments}
    if deleting is None:
        deleting = pending_deletions(root) | pending_erase_segments(root)
    pending = {name for t, p, name in deleting if (t, p) == (topic, partition)}
    for files in list_segment_files(topic_dir, partition):
        name = files.records.name[: -len(RECORDS_SUFFIX)]
        if name in pending:
            report.notes.append(
                f"segment {name} is being deleted or written by an unfinished prune, merge or erase "
                "(run that command again to finish it; a backup starting finishes an erase)"
            )
        elif name not in listed:
            if max(file_size(path) or 0 for path in (files.records, files.index)) > 1:
                report.errors.append(f"extra segment {name}: not in the partition index")
            else:
                report.notes.append(
                    f"empty segment {name} is not in the partition index yet (being created, or left by a crash: "
                    "the next backup removes it)"
                )
    previous_last = -1
    for number, segment in enumerate(reader.segments):
        records_path, index_path = reader.segment_paths(segment)
        missing = [path.name for path in (records_path, index_path) if not exists(path)]
        if missing:
            report.errors.append(f"missing segment file(s): {', '.join(missing)}")
            continue
        try:
            with SegmentIndexFile(index_path, legacy=legacy) as index:
                count = index.count
                first = index.entry(0).offset if count else None
                last = index.entry(count - 1).offset if count else None
                end = index.entry(count - 1).end if count else 1
                tail = index.torn_tail
            report.records += count
            if tail and number < len(reader.segments) - 1:
                report.errors.append(f"{index_path.name}: ends in a partial entry ({tail} bytes)")
            records = open_records(records_path, reader.keys)  # a compressed file's frame table is checked here
            size = records.size  # plain bytes: index positions are plain positions
            records.close()
            if size < end:
                report.errors.append(f"{records_path.name}: truncated: {size} bytes, its index needs {end}")
            elif size > end and number < len(reader.segments) - 1:
                report.errors.append(f"{records_path.name}: {size - end} bytes after the last indexed record")
            if first is not None and first <= previous_last:
                report.errors.append(f"{segment.name}: offsets go back ({first} after {previous_last})")
            if last is not None:
                previous_last = last
            if deep:
                for _ in iter_segment(records_path, index_path, legacy=legacy, keys=reader.keys):
                    pass
        except SparkKafkaBackupError as exc:
            report.errors.append(str(exc))
    _check_catalog(root, reader, report, pending)
    if keys is not None and keys.keys:
        report.errors.extend(seal_problems(root, topic, partition, reader, keys, unrecorded_ok=unrecorded_ok))
    try:
        read_consumer_offsets(topic_dir, partition)
    except SparkKafkaBackupError as exc:
        report.errors.append(str(exc))
    try:
        lost = read_gaps(root, topic, partition)
    except SparkKafkaBackupError as exc:
        report.errors.append(f"the record of offsets lost at the source is unreadable: {exc}")
        lost = []
    for gap in lost:
        report.notes.append(
            f"offsets {gap.first}..{gap.last} were deleted at the source before the backup read them ({gap.count} "
            f"offsets){HOW.get(gap.how, '')}: lost at the source, not damage to the backup"
        )
        if _holds(reader, gap.first, gap.last):
            report.errors.append(
                f"the record of offsets {gap.first}..{gap.last} lost at the source covers records the backup holds: "
                "it is wrong (tampered with, or written by something else)"
            )
    _check_erased(root, reader, report)
    return report


def _check_erased(root: Location, reader: PartitionReader, report: PartitionReport) -> None:
    """The offsets recorded as erased on purpose: a note, and an error for each record the backup still holds there
    (an erase that did not finish, or a record written back since)."""
    try:
        unfinished = pending_erase(root)
        erased, records = read_erasure(root, report.topic, report.partition)
    except SparkKafkaBackupError as exc:
        report.errors.append(f"the record of erased offsets is unreadable: {exc}")
        return
    if unfinished is not None and (unfinished.topic, unfinished.partition) == (report.topic, report.partition):
        report.errors.append(
            f"an erase of this partition did not finish (a restore refuses the topic until it is): finish it with "
            f"spark-kafka-backup erase {root} --finish"
        )
    if not erased:
        return
    report.notes.append(f"{describe_erasure(records)}, at {count(erased.count, 'offset')}: not damage to the backup")
    held: list[int] = []
    for segment in reader.segments:
        with SegmentIndexFile(reader.segment_paths(segment)[1], legacy=reader.legacy) as index:
            for start in range(0, index.count, _ENTRIES_PER_STEP):
                step = min(_ENTRIES_PER_STEP, index.count - start)
                offsets = np.frombuffer(index.read_entries(start, step), dtype=ENTRY_DTYPE)["offset"].astype(np.int64)
                held.extend(offsets[erased.holds(offsets)][:5].tolist())
    if held:
        report.errors.append(
            f"holds records at offsets recorded as erased ({', '.join(map(str, held[:5]))}): the erase did not "
            "finish or they were written back since; run spark-kafka-backup erase again"
        )


def _holds(reader: PartitionReader, first: int, last: int) -> bool:
    """Whether the partition holds a record at an offset in ``first..last`` (by its segment indexes)."""
    for segment in reader.segments:
        if segment.start_offset > last:
            break
        with SegmentIndexFile(reader.segment_paths(segment)[1], legacy=reader.legacy) as index:
            if index.bisect(first) < index.bisect(last + 1):
                return True
    return False


def _check_catalog(root: Location, reader: PartitionReader, report: PartitionReport, pending: set[str]) -> None:
    try:
        catalog = read_catalog(root, report.topic, report.partition)
    except SparkKafkaBackupError as exc:
        report.errors.append(str(exc))
        return
    if catalog is None:
        lost = missing_catalog(root, report.topic, report.partition) if reader.segments else None
        if lost is not None:
            report.errors.append(lost)
            return
        if len(reader.segments) <= 1:
            return  # only the open newest segment: nothing a catalog rebuild would record yet
        report.notes.append(
            f"no catalog ({catalog_path(root, report.topic, report.partition)}): "
            f"build one with: spark-kafka-backup catalog rebuild {root}"
        )
        return
    names = [segment.name for segment in reader.segments]
    previous_last = -1
    for entry in catalog.segments:
        if entry.name not in names:
            if entry.name not in pending:
                report.errors.append(f"missing segment {entry.name}: named in the catalog, not in the partition index")
            continue
        segment = reader.segments[names.index(entry.name)]
        for path, expected_size, expected_crc in (
            (reader.segment_paths(segment)[0], entry.records_bytes, entry.records_crc32c),
            (reader.segment_paths(segment)[1], entry.index_bytes, entry.index_crc32c),
        ):
            if not exists(path):
                continue  # reported above
            crc, size = file_crc32c(path)
            if size != expected_size:
                report.errors.append(f"{path.name}: {size} bytes, the catalog says {expected_size}")
            elif crc != expected_crc:
                report.errors.append(
                    f"{path.name}: checksum mismatch: CRC32C {crc:#010x}, the catalog says {expected_crc:#010x}"
                )
        if entry.first_offset is not None and entry.first_offset <= previous_last:
            report.errors.append(f"catalog: {entry.name} starts at {entry.first_offset}, not after {previous_last}")
        if entry.last_offset is not None:
            previous_last = entry.last_offset
    cataloged_names = {entry.name for entry in catalog.segments}
    recorded = catalog.tail
    if (
        recorded is not None
        and recorded.records
        and recorded.name not in names
        and recorded.name not in cataloged_names
        and recorded.name not in pending
    ):
        report.errors.append(
            f"missing segment {recorded.name}: the catalog records {count(recorded.records, 'committed record')} in "
            f"it (offsets {recorded.first_offset}..{recorded.last_offset}), the partition index does not name it"
        )
    tail = catalog.tail_of(names[-1]) if names else None
    if tail is not None:
        problem = tail_problem(root / report.topic, tail, reader.keys)
        if problem is not None:
            report.errors.append(problem)
    cataloged = {entry.name for entry in catalog.segments}
    # On disk the newest segment may still grow; on an object store every segment is final.
    finished = names if isinstance(root, ObjectPath) else names[:-1]
    uncataloged = [name for name in finished if name not in cataloged]
    if uncataloged:
        report.notes.append(
            f"{count(len(uncataloged), 'finished segment')} not in the catalog yet: {', '.join(uncataloged)}"
        )


def verify_backup(
    root: Location,
    topics: list[str],
    *,
    deep: bool = False,
    legacy: bool = False,
    progress: bool = False,
    keys: KeyRing | None = None,
    unrecorded_ok: bool = False,
) -> list[PartitionReport]:
    """Verify every partition of ``topics``; ``progress`` shows a bar or lines on standard error; with ``keys``,
    also what they vouch for (:mod:`spark_kafka_backup.catalog.seals`)."""
    deleting = pending_deletions(root) | pending_erase_segments(root)
    partitions = [(topic, partition) for topic in topics for partition in list_partitions(root / topic)]
    reports = []
    with Progress("verify", len(partitions), "partitions", enabled=progress) as shown:
        for topic, partition in partitions:
            reports.append(verify_partition(root, topic, partition, deep=deep, legacy=legacy, deleting=deleting,
                                            keys=keys, unrecorded_ok=unrecorded_ok))  # fmt: skip
            shown.advance(note=f"{topic}/{partition}")
    return reports
