"""Where ``spark-kafka-backup merge`` writes down what it is about to do, and reading it back (see
:mod:`spark_kafka_backup.catalog.merge` for the protocol; this layer only reads it, for the partition index rebuild)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.naming import check_partition, check_segment_name, check_topic_name
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, exists, read_document


def intent_path(root: Location) -> Location:
    """Where an unfinished merge's intent is written down."""
    return state_dir(root) / "merge-intent.json"


@dataclass(frozen=True)
class MergeIntent:
    """What an unfinished merge was doing: replacing ``segments`` of a partition by ``merged``."""

    topic: str
    partition: int
    segments: tuple[str, ...]
    merged: str


def pending_intent(root: Location) -> MergeIntent | None:
    """The unfinished merge of the backup under ``root``, if any."""
    path = intent_path(root)
    if not exists(path):
        return None
    file = str(path)
    intent = read_document(path, 64 << 20, what="merge intent")
    try:
        return MergeIntent(
            check_topic_name(intent["topic"], file=file),
            check_partition(intent["partition"], file=file),
            tuple(check_segment_name(name, file=file) for name in intent["segments"]),
            check_segment_name(intent["merged"], file=file),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"not a valid merge intent ({type(exc).__name__}: {exc})", file=file) from None
