"""The merge intent file: where ``spark-kafka-backup merge`` writes down what it is about to do, both sides of it
(see :mod:`spark_kafka_backup.catalog.merge` for the protocol; the partition index rebuild reads it too).

``STATE/merge-intent.json``, one JSON object::

    {"topic": "orders", "partition": 0, "segments": ["segment_partition_000_from_offset_0000000000_records", ...],
     "merged": "segment_partition_000_from_offset_0000000000_records"}

``segments`` are the finished segments being replaced, in offset order; ``merged`` the segment replacing them."""

from __future__ import annotations

import json
from dataclasses import dataclass

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.naming import check_partition, check_segment_name, check_topic_name
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, exists, read_document, write_whole


def intent_path(root: Location) -> Location:
    """Where an unfinished merge's intent is written down."""
    return state_dir(root) / "merge-intent.json"


def erase_intent_path(root: Location) -> Location:
    """Where an unfinished erase's intent is written down (:mod:`spark_kafka_backup.catalog.erase` reads and writes
    it; an index rebuild refuses to run beside it)."""
    return state_dir(root) / "erase-intent.json"


@dataclass(frozen=True)
class MergeIntent:
    """What an unfinished merge was doing: replacing ``segments`` of a partition by ``merged``."""

    topic: str
    partition: int
    segments: tuple[str, ...]
    merged: str

    def encode(self) -> bytes:
        document = {"topic": self.topic, "partition": self.partition, "segments": list(self.segments)}
        return json.dumps({**document, "merged": self.merged}).encode()


#: The largest intent read back (one name per segment replaced).
MAX_INTENT_BYTES = 64 << 20


def write_intent(root: Location, intent: MergeIntent) -> None:
    """Write down (durably) what a merge is about to do, before it does any of it."""
    write_whole(intent_path(root), intent.encode())


def pending_intent(root: Location) -> MergeIntent | None:
    """The unfinished merge of the backup under ``root``, if any."""
    path = intent_path(root)
    if not exists(path):
        return None
    file = str(path)
    intent = read_document(path, MAX_INTENT_BYTES, what="merge intent")
    try:
        return MergeIntent(
            check_topic_name(intent["topic"], file=file),
            check_partition(intent["partition"], file=file),
            tuple(check_segment_name(name, file=file) for name in intent["segments"]),
            check_segment_name(intent["merged"], file=file),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"not a valid merge intent ({type(exc).__name__}: {exc})", file=file) from exc


def pending_merge(root: Location) -> set[tuple[str, int, str]]:
    """The segments an unfinished merge is replacing, and the merged one it is writing."""
    intent = pending_intent(root)
    if intent is None:
        return set()
    return {(intent.topic, intent.partition, name) for name in (*intent.segments, intent.merged)}
