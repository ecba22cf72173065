"""Restored records keep their timestamps, also for topics backed up with ``LogAppendTime``.

A topic with ``message.timestamp.type=LogAppendTime`` makes the broker stamp
every record it appends with the append time, so a restore into such a topic
gives every record the restore's time. spark-kafka-backup therefore creates a target
topic whose backed-up configuration says ``LogAppendTime`` with
``CreateTime`` (records keep the timestamps they were backed up with), and
sets ``LogAppendTime`` once every record is acknowledged, so that new records
are stamped as before. Records already in the topic keep their original
timestamps; a consumer sees them with the ``CreateTime`` type, the type of the
batches the restore wrote.

Crash safety: the topic name is noted in the restore state directory before
the topic is created and removed once the type is set, so a restore killed in
between and run again sets it at its end. An **existing** target topic with
``LogAppendTime`` is refused (spark-kafka-backup does not change a topic it did not
create), unless ``--restamp`` accepts new timestamps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from spark_kafka_backup.errors import ClusterError, SparkKafkaBackupError
from spark_kafka_backup.storage import Location, exists, read_document, write_whole

TIMESTAMP_TYPE = "message.timestamp.type"
LOG_APPEND_TIME = "LogAppendTime"
CREATE_TIME = "CreateTime"


def creation_config(config: Mapping[str, str], *, restamp: bool) -> tuple[dict[str, str], str | None]:
    """The configuration to create a topic with, and the timestamp type to set after the restore (if any)."""
    wanted = config.get(TIMESTAMP_TYPE)
    if wanted != LOG_APPEND_TIME or restamp:
        return dict(config), None
    return {**config, TIMESTAMP_TYPE: CREATE_TIME}, wanted


class PendingTimestampTypes:
    """Target topics whose timestamp type is still to be set, per target cluster (a small JSON file)."""

    def __init__(self, path: Location) -> None:
        self.path = path
        self.data: dict[str, str] = {}
        if exists(self.path):
            try:
                loaded = read_document(self.path, 1 << 24, what="restore state")
                self.data = {str(topic): str(kind) for topic, kind in loaded.items()}
            except (ValueError, AttributeError) as exc:  # a FormatError names the file itself
                raise SparkKafkaBackupError(f"{self.path}: unreadable restore state ({exc})") from exc

    def add(self, types: Mapping[str, str]) -> None:
        updated = {**self.data, **types}
        if updated != self.data:
            self._write(updated)

    def done(self, topics: Iterable[str]) -> None:
        updated = {topic: kind for topic, kind in self.data.items() if topic not in set(topics)}
        if updated != self.data:
            self._write(updated)

    def _write(self, data: dict[str, str]) -> None:
        write_whole(self.path, json.dumps(data, sort_keys=True, indent=1).encode())
        self.data = data


def set_timestamp_types(admin: Any, types: Mapping[str, str], *, timeout: float = 30) -> None:
    """Set ``message.timestamp.type`` on each topic (an incremental change: nothing else is touched)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    if not types:
        return
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[ConfigEntry(TIMESTAMP_TYPE, kind, incremental_operation=AlterConfigOpType.SET)],
        )
        for topic, kind in sorted(types.items())
    ]
    try:
        for future in admin.incremental_alter_configs(resources).values():
            future.result(timeout)
    except Exception as exc:
        reason = str(exc.args[0]) if exc.args else type(exc).__name__
        raise ClusterError(
            f"cannot set {TIMESTAMP_TYPE} on topic(s) {', '.join(sorted(types))}: {reason}; the records are "
            "restored with their original timestamps, set it by hand or run the restore again"
        ) from exc
