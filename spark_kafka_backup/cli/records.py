"""Records as the commands show them: a record as JSON (and the topics and partitions a command covers, from
:mod:`spark_kafka_backup.partition.layout`)."""

from __future__ import annotations

import base64

from spark_kafka_backup.format.record import Record, TimestampType
from spark_kafka_backup.partition.layout import chosen_partitions, chosen_topics

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


__all__ = ["chosen_partitions", "chosen_topics", "record_to_json"]
