"""Where a partition's files are in a backup root, found by listing directories.

A backup root holds one directory per topic; see :mod:`spark_kafka_backup.format.naming`
for the file names inside. Listing never reads file contents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spark_kafka_backup.errors import BackupNotFoundError, UsageError
from spark_kafka_backup.format.naming import (
    INDEX_SUFFIX,
    RECORDS_SUFFIX,
    check_segment_name,
    consumer_offsets_file_name,
    is_topic_name,
    parse_consumer_offsets_file_name,
    parse_partition_index_file_name,
    parse_segment_file_name,
    partition_index_file_name,
    segment_prefix,
)
from spark_kafka_backup.format.partition_index import PartitionIndexEntry
from spark_kafka_backup.storage import Location, ObjectPath, confine_root, prepare_root, storage_for


@dataclass(frozen=True)
class SegmentFiles:
    """The two files of one segment; either may be absent on disk."""

    partition: int
    start_offset: int
    records: Location
    index: Location
    #: > 0 for a segment written by ``spark-kafka-backup merge`` (see :mod:`spark_kafka_backup.format.naming`).
    generation: int = 0

    @property
    def name(self) -> str:
        """The name the partition index gives the segment."""
        return self.records.name[: -len(RECORDS_SUFFIX)]


def segment_files(topic_dir: Location, partition: int, start_offset: int, generation: int = 0) -> SegmentFiles:
    """The canonical paths of a segment (spark-kafka-backup's own naming)."""
    prefix = segment_prefix(partition, start_offset, generation)
    return SegmentFiles(
        partition, start_offset, topic_dir / (prefix + RECORDS_SUFFIX), topic_dir / (prefix + INDEX_SUFFIX), generation
    )


def check_segment_names(entries: list[PartitionIndexEntry], *, file: str) -> None:
    """Refuse partition index names that are not plain file names in the topic directory
    (:func:`~spark_kafka_backup.format.naming.is_segment_name`): a name with a path separator would make a reader open
    files elsewhere."""
    for number, entry in enumerate(entries):
        check_segment_name(entry.name, file=file, what=f"partition index entry {number}")


def partition_index_path(topic_dir: Location, partition: int) -> Location:
    return topic_dir / partition_index_file_name(partition)


def consumer_offsets_path(topic_dir: Location, partition: int) -> Location:
    return topic_dir / consumer_offsets_file_name(partition)


def list_segment_files(topic_dir: Location, partition: int) -> list[SegmentFiles]:
    """Every segment of ``partition`` that has at least one file, by start offset (then merge generation).

    Paths are the names as found on disk (so unusual padding is kept).
    """
    found: dict[tuple[int, int], dict[str, Location]] = {}
    for entry in _scan(topic_dir):
        parsed = parse_segment_file_name(entry)
        if parsed is None or parsed.partition != partition:
            continue
        found.setdefault((parsed.start_offset, parsed.generation), {})[parsed.kind] = topic_dir / entry
    result = []
    for start, generation in sorted(found):
        canonical = segment_files(topic_dir, partition, start, generation)
        kinds = found[(start, generation)]
        result.append(
            SegmentFiles(
                partition,
                start,
                kinds.get("records", canonical.records),
                kinds.get("index", canonical.index),
                generation,
            )
        )
    return result


def list_partitions(topic_dir: Location) -> list[int]:
    """Partitions that have any v1 file in ``topic_dir``."""
    partitions: set[int] = set()
    for entry in _scan(topic_dir):
        segment = parse_segment_file_name(entry)
        if segment is not None:
            partitions.add(segment.partition)
            continue
        for parse in (parse_partition_index_file_name, parse_consumer_offsets_file_name):
            number = parse(entry)
            if number is not None:
                partitions.add(number)
    return sorted(partitions)


#: spark-kafka-backup's own state under a backup root (catalog, checkpoints, Spark checkpoint, leases). Kafka topic
#: names use only ``[a-zA-Z0-9._-]``, so no topic directory can be named like it.
STATE_DIR = "kbackup~state"

#: The state directory of backups written by spark-kafka-backup before 0.x: a legal topic name. A root that has it (and
#: not :data:`STATE_DIR`) keeps using it, and there a topic called exactly this cannot be backed up.
LEGACY_STATE_DIR = ".kbackup"


_decided: dict[Location, Location] = {}


def state_dir(root: Location) -> Location:
    """The state directory of a backup root: :data:`STATE_DIR`, or :data:`LEGACY_STATE_DIR` where an older
    spark-kafka-backup made one (a directory of that name holding no partition files; one that does is a topic).

    Remembered per process once either exists (one listing of the root, not one per catalog read).
    """
    known = _decided.get(root)
    if known is not None:
        return known
    confine_root(root)
    names = storage_for(root).list_dirs(root) or []
    if STATE_DIR in names:
        _decided[root] = root / STATE_DIR
    elif LEGACY_STATE_DIR in names and not list_partitions(root / LEGACY_STATE_DIR):
        _decided[root] = root / LEGACY_STATE_DIR
    else:
        return root / STATE_DIR  # nothing yet: new state goes under the new name
    return _decided[root]


def enclosing_backup(location: Location) -> Path | None:
    """The backup root that ``location`` lies inside (a topic's directory of it, or deeper): its nearest ancestor
    whose state directory holds a catalog (symbolic links and ``..`` resolved first); ``None`` when there is none, or
    when ``location`` is a backup root itself (a backup kept inside another's folder before this check is not
    refused). Local paths only: an object store's prefixes are not walked (one listing each)."""
    if not isinstance(location, Path):
        return None
    where = location.resolve()
    if _holds_catalog(where):
        return None
    return next((ancestor for ancestor in where.parents if _holds_catalog(ancestor)), None)


def _holds_catalog(root: Path) -> bool:
    return any((root / state / "catalog").is_dir() for state in (STATE_DIR, LEGACY_STATE_DIR))


def list_topics(root: Location) -> list[str]:
    """Topic directories directly under a backup root: those holding v1 files (the state directory holds none)."""
    if isinstance(root, ObjectPath):
        prepare_root(root)  # one clear error for a missing bucket
    confine_root(root)
    names = storage_for(root).list_dirs(root)
    if names is None:
        kind = "prefix holds no objects" if isinstance(root, ObjectPath) else "is not a directory"
        raise BackupNotFoundError(f"{root}: backup root {kind}")
    return sorted(name for name in names if is_topic_name(name) and list_partitions(root / name))


def _scan(directory: Location) -> list[str]:
    names = storage_for(directory).list_files(directory)
    if names is None:
        raise BackupNotFoundError(f"{directory}: topic directory does not exist")
    return names


def chosen_topics(root: Location, only: str | None, *, option: str = "--topic") -> list[str]:
    """The topics of the backup at ``root`` (``only`` that one); ``option`` is how the caller's user names a topic."""
    topics = list_topics(root)
    if not topics and list_partitions(root) and option == "--topic":
        raise UsageError(f"{root} is a topic directory; pass the backup root {root.parent} and --topic {root.name}")
    if not topics and list_partitions(root):
        raise UsageError(f"{root} is a topic directory; pass the backup root {root.parent} and {option} {root.name}")
    if not topics and STATE_DIR not in (storage_for(root).list_dirs(root) or []):
        raise BackupNotFoundError(
            f"{root}: not a spark-kafka-backup backup: no topic directory with a partition index in it, and no "
            f"{STATE_DIR}/ "
            "(give the backup root, the directory that holds one directory per topic)"
        )
    if only is None:
        return topics
    if only not in topics:
        shown = ", ".join(topics) or "none"
        raise BackupNotFoundError(f"topic {only!r} is not in backup {root} (topics: {shown})")
    return [only]


def chosen_partitions(topic_dir: Location, only: int | None) -> list[int]:
    partitions = list_partitions(topic_dir)
    if only is None:
        return partitions
    if only not in partitions:
        raise BackupNotFoundError(
            f"partition {only} of topic {topic_dir.name!r} is not in the backup "
            f"(partitions: {', '.join(map(str, partitions)) or 'none'})"
        )
    return [only]
