"""The catalog's record of each backed-up topic: origin, partition count (and its history) and configuration.

``ROOT/kbackup~state/catalog/<topic>/topic.json``, replaced atomically, written by
the backup when it starts and at every consumer offset round (only when
something changed). The restore creates missing topics from it. The origin is
the Kafka cluster id and the topic id (one incarnation of the topic): the
backup refuses to add records of another cluster or incarnation (see
:mod:`spark_kafka_backup.backup.origin`). Records written before spark-kafka-backup kept the origin
have none.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from spark_kafka_backup.catalog.store import catalog_dir
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.format.naming import check_topic_name
from spark_kafka_backup.storage import Location, exists, read_limited, write_whole

TOPIC_RECORD_VERSION = 1


@dataclass(frozen=True)
class TopicRecord:
    topic: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    captured_at: int = 0  # epoch ms
    cluster_id: str | None = None
    topic_id: str | None = None
    #: (epoch ms, partition count) from the first record on, one entry per change: partitions added while the
    #: backup ran are known with the time they were first seen (a restore to a cut creates the count then).
    partition_history: tuple[tuple[int, int], ...] = ()

    def partitions_at(self, when: int) -> int:
        """The partition count recorded at epoch ms ``when`` (the first one known, for a time before it)."""
        history = self.partition_history or ((self.captured_at, self.partitions),)
        count = history[0][1]
        for at, partitions in history:
            if at > when:
                break
            count = partitions
        return count

    def encode(self) -> bytes:
        document: dict[str, object] = {
            "version": TOPIC_RECORD_VERSION,
            "topic": self.topic,
            "partitions": self.partitions,
            "config": dict(sorted(self.config.items())),
            "capturedAt": self.captured_at,
        }
        if self.cluster_id is not None:
            document["clusterId"] = self.cluster_id
        if self.topic_id is not None:
            document["topicId"] = self.topic_id
        if self.partition_history:
            document["partitionHistory"] = [list(entry) for entry in self.partition_history]
        return json.dumps(document, indent=1).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> TopicRecord:
        try:
            document = parse_document(data, file=file, what="topic record")
            if document.get("version") != TOPIC_RECORD_VERSION:
                raise FormatError("unsupported topic record version", file=file, found=repr(document.get("version")))
            config = {str(k): str(v) for k, v in document["config"].items()}
            cluster_id, topic_id = document.get("clusterId"), document.get("topicId")
            history = tuple(sorted((int(at), int(count)) for at, count in document.get("partitionHistory", ())))
            return cls(
                check_topic_name(document["topic"], file=file),
                int(document["partitions"]),
                config,
                int(document["capturedAt"]),
                None if cluster_id is None else str(cluster_id),
                None if topic_id is None else str(topic_id),
                history,
            )
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
            raise FormatError(f"not a valid topic record ({exc})", file=file) from exc


def topic_record_path(root: Location, topic: str) -> Location:
    return catalog_dir(root, topic) / "topic.json"


def read_topic_record(root: Location, topic: str) -> TopicRecord | None:
    path = topic_record_path(root, topic)
    if not exists(path):
        return None
    return TopicRecord.decode(read_limited(path, 1 << 24), file=str(path))


def record_topic(
    root: Location,
    topic: str,
    partitions: int,
    config: dict[str, str],
    *,
    cluster_id: str | None = None,
    topic_id: str | None = None,
) -> bool:
    """Store the topic's origin, partition count and configuration if they changed; return whether they did."""
    current = read_topic_record(root, topic)
    wanted = (partitions, config, cluster_id, topic_id)
    if current is not None and (current.partitions, current.config, current.cluster_id, current.topic_id) == wanted:
        return False
    now = int(time.time() * 1000)
    if current is None:
        history: tuple[tuple[int, int], ...] = ((now, partitions),)
    else:
        history = current.partition_history or ((current.captured_at, current.partitions),)
        if history[-1][1] != partitions:
            history += ((now, partitions),)
    record = TopicRecord(topic, partitions, config, now, cluster_id, topic_id, history)
    write_whole(topic_record_path(root, topic), record.encode())
    return True
