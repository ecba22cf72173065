"""Records and partitions as the commands show them: a record as JSON, the topics and partitions a command covers."""

from __future__ import annotations

import base64

from spark_kafka_backup.errors import BackupNotFoundError, UsageError
from spark_kafka_backup.format.record import Record, TimestampType
from spark_kafka_backup.partition.layout import STATE_DIR, list_partitions, list_topics
from spark_kafka_backup.storage import Location, storage_for

_TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
    TimestampType.CREATE_TIME_NULL: "CreateTime",
}


def record_to_json(topic: str, partition: int, record: Record) -> dict[str, object]:
    """The ``spark-kafka-backup cat`` view of a record: exactly these keys, bytes as base64."""
    return {
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestampType": _TIMESTAMP_TYPE_NAMES[TimestampType(record.timestamp_type)],
        "timestamp": record.timestamp,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [[key, _b64(value)] for key, value in record.headers],
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def chosen_topics(root: Location, only: str | None) -> list[str]:
    topics = list_topics(root)
    if not topics and list_partitions(root):
        raise UsageError(f"{root} is a topic directory; pass the backup root {root.parent} and --topic {root.name}")
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
