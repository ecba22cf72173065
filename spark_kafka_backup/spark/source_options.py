"""The options of the ``kbackup_kafka`` source and the offset JSON it keeps in Spark's checkpoints.

Both sides of the source use this module: the driver parses the options once and plans with them, and executors
get them inside each task. Pure: no client is made here. The options themselves are described in
:mod:`spark_kafka_backup.spark.kafka_source`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.kafka.cluster import TopicPartitionKey
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.spark.sink_options import SinkOptions

SOURCE_NAME = "kbackup_kafka"

#: The version of the offset JSON this source writes into Spark checkpoints.
OFFSETS_VERSION = 1

_KNOWN_OPTIONS = {
    "logformat",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "maxoffsetspertrigger",
    "includeheaders",
    "failondataloss",
    "snapshotunreachableseconds",
    "readtimeoutseconds",
    "minpartitions",
    "sourcegapsroot",
    "writeto",
    "path",
}


def encode_offsets(offsets: Mapping[TopicPartitionKey, int], ids: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Canonical offset JSON: sorted topics, partitions sorted by number, string keys; ``ids``: the topic id each
    topic's offsets belong to (``"ids"``, left out when empty).

    Spark compares offsets as JSON strings, so the same offsets must always
    give the same text.
    """
    topics: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, {})[str(partition)] = offset
    document: dict[str, Any] = {"v": OFFSETS_VERSION, "topics": topics}
    if ids:
        document["ids"] = dict(sorted(ids.items()))
    return document


def decode_ids(data: Mapping[str, Any]) -> dict[str, str]:
    """The topic ids of an offset JSON (none in those written before ids were kept)."""
    ids = data.get("ids") or {}
    return {str(topic): str(topic_id) for topic, topic_id in ids.items()} if isinstance(ids, dict) else {}


def decode_offsets(data: Mapping[str, Any]) -> dict[TopicPartitionKey, int]:
    version = data.get("v")
    if version != OFFSETS_VERSION:
        raise SparkKafkaBackupError(
            f"the checkpoint holds Kafka offsets of version {version!r}; this spark-kafka-backup reads version "
            f"{OFFSETS_VERSION}"
        )
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in data["topics"].items()
        for partition, offset in partitions.items()
    }


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed and checked."""

    client: dict[str, str]
    selection: TopicSelection
    starting: str | dict[TopicPartitionKey, int]
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    read_timeout: float
    min_partitions: int = 1
    snapshot_unreachable: float = 300
    #: The job's ``--log-format`` for what the source logs on the driver (None: text).
    log_format: str | None = None
    #: Where ranges deleted at the source before they were read are recorded (``sourceGapsRoot``).
    gaps_root: str | None = None
    #: The tasks write the records into v1 files themselves, as the ``kbackup_v1`` sink with these options would
    #: (``writeTo``), and hand on one row per partition written.
    write_to: SinkOptions | None = None

    @property
    def read_committed(self) -> bool:
        return self.client.get("isolation.level", "read_committed") == "read_committed"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        client: dict[str, str] = {}
        other: dict[str, str] = {}
        for key, value in options.items():
            if key.lower().startswith("kafka."):
                client[key[len("kafka.") :]] = value
            elif key.lower() in _KNOWN_OPTIONS:
                other[key.lower()] = value
            else:
                raise UsageError(f"unknown option {key!r} for the {SOURCE_NAME} source")
        if "bootstrap.servers" not in client:
            raise UsageError("option kafka.bootstrap.servers is required")
        client.setdefault("isolation.level", "read_committed")
        if ("subscribe" in other) == ("subscribepattern" in other):
            raise UsageError("give exactly one of the options subscribe and subscribePattern")
        selection = (
            TopicSelection.from_list(other["subscribe"])
            if "subscribe" in other
            else TopicSelection(pattern=other["subscribepattern"])
        )
        return cls(
            client=client,
            selection=selection,
            starting=_parse_starting(other.get("startingoffsets", "earliest")),
            max_offsets_per_trigger=_positive_int(other, "maxoffsetspertrigger"),
            # Written to files, every record keeps its headers.
            include_headers=option_is_true(other, "includeheaders", False) or "writeto" in other,
            fail_on_data_loss=option_is_true(other, "failondataloss", True),
            read_timeout=float(_positive_int(other, "readtimeoutseconds") or 120),
            min_partitions=_positive_int(other, "minpartitions") or 1,
            snapshot_unreachable=float(_positive_int(other, "snapshotunreachableseconds") or 300),
            log_format=other.get("logformat"),
            gaps_root=other.get("sourcegapsroot") or None,
            write_to=_parse_write_to(other["writeto"]) if "writeto" in other else None,
        )


def _parse_write_to(text: str) -> SinkOptions:
    """``writeTo``: a JSON object of the ``kbackup_v1`` sink's options, ``path`` among them."""
    expected = 'option writeTo must be a JSON object of the sink\'s options as strings, like {"path": "/backups"}'
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{expected}: {exc}") from exc
    if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
        raise UsageError(f"{expected}, not {text!r}")
    return SinkOptions.parse(options)


def _parse_starting(text: str) -> str | dict[TopicPartitionKey, int]:
    if text in ("earliest", "latest"):
        return text
    try:
        parsed = json.loads(text)
        return {
            (topic, int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise UsageError(
            f'startingOffsets must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}, not {text!r}'
        ) from exc


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    if key not in options:
        return None
    try:
        value = int(options[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"option {key} must be a whole number > 0, not {options[key]!r}")
    return value


def option_is_true(options: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in options:
        return default
    value = options[key].strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"option {key} must be true or false, not {options[key]!r}")
    return value == "true"
