"""Whether a partition's segments are all there: the partition index checked against every other witness.

Readers follow the partition index, so a segment it does not name is silently
left out of every read. Two other sources say which segments exist, and each
disagreement with the partition index is a lost segment:

- **the files**: a segment whose files hold records (more than the magic
  byte) but which the partition index does not name. A partition index cut
  short, or an entry lost, hides it. (An empty unnamed segment is a backup
  creating it right now, or a crash the next writer cleans up: nothing lost.)
- **the catalog**: a finished segment the catalog names (with its offsets)
  that the partition index does not name.

Segments an unfinished prune is deleting (or a merge replacing or writing) are expected to go and are not
reported, and a segment a running backup names after the caller read the
partition index is not lost (both are looked at again before reporting).
Checksums of the segments the index does name are
:mod:`spark_kafka_backup.catalog.integrity`'s job.
"""

from __future__ import annotations

from spark_kafka_backup.catalog.integrity import BadSegment, bad_segments
from spark_kafka_backup.catalog.prune import pending_deletions
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.format.naming import RECORDS_SUFFIX
from spark_kafka_backup.partition.layout import list_segment_files
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.storage import Location, storage_for
from spark_kafka_backup.text import count


def lost_segments(
    root: Location,
    topic: str,
    partition: int,
    reader: PartitionReader,
    *,
    deleting: set[tuple[str, int, str]] | None = None,
) -> list[BadSegment]:
    """Segments that hold (or held) records of the partition but are not in its partition index."""
    if deleting is None:
        deleting = pending_deletions(root)
    pending = {name for t, p, name in deleting if (t, p) == (topic, partition)}
    named = {segment.name for segment in reader.segments}
    lost: dict[str, BadSegment] = {}
    topic_dir = root / topic
    for files in list_segment_files(topic_dir, partition):
        name = files.records.name[: -len(RECORDS_SUFFIX)]
        if name in named or name in pending:
            continue
        sizes = [storage_for(path).size(path) or 0 for path in (files.records, files.index)]
        if max(sizes) <= 1:
            continue  # only magic bytes: a segment being created
        first, last = _offsets(files.index)
        lost[name] = BadSegment(
            name,
            first,
            last,
            f"its files hold {sizes[0]} bytes of records but the partition index does not name it "
            f"(spark-kafka-backup index rebuild {topic_dir} --partition {partition} adds it back)",
        )
    catalog = read_catalog(root, topic, partition)
    for entry in catalog.segments if catalog is not None else ():
        if entry.name in named or entry.name in pending or entry.name in lost:
            continue
        lost[entry.name] = BadSegment(
            entry.name,
            entry.first_offset,
            entry.last_offset,
            f"the catalog names it ({count(entry.records, 'record')}) but the partition index does not",
        )
    if lost:
        # ``reader`` may predate what was listed: a running backup names a new segment in the partition index
        # before it writes records there, and a prune records its intent before it drops one. So what the
        # partition index and the prune intent say now decides (a segment lost for real stays lost).
        named = {segment.name for segment in PartitionReader(topic_dir, partition).segments}
        pending = {name for t, p, name in pending_deletions(root) if (t, p) == (topic, partition)}
        lost = {name: bad for name, bad in lost.items() if name not in named and name not in pending}
    return sorted(lost.values(), key=lambda bad: (bad.first_offset is None, bad.first_offset or 0, bad.name))


def _offsets(index_path: Location) -> tuple[int | None, int | None]:
    """First and last offset a (possibly damaged) segment index names, ``None`` when unreadable or empty."""
    try:
        with SegmentIndexFile(index_path) as index:
            if not index.count:
                return None, None
            return index.entry(0).offset, index.entry(index.count - 1).offset
    except (SparkKafkaBackupError, OSError):
        return None, None


def damaged_segments(
    root: Location,
    topic: str,
    partition: int,
    reader: PartitionReader,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
) -> list[BadSegment]:
    """Lost segments and segments failing their checksums (those that may hold offsets in the range)."""
    return lost_segments(root, topic, partition, reader) + bad_segments(
        root, topic, partition, from_offset=from_offset, to_offset=to_offset, legacy=reader.legacy, keys=reader.keys
    )
