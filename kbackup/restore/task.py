"""Restoring one backed-up partition into one target partition (runs on a Spark executor).

The task reads the selected records of its partition in offset order, skips
the first ``skip`` of them (already in the target, see :mod:`kbackup.restore.plan`),
and produces the rest with an idempotent producer to the target partition,
keeping key, value, headers (order and duplicates) and timestamp. An
idempotent producer keeps a partition's records in order and never writes one
twice, so after any crash the target holds a prefix of the selected records:
that is what makes the restore resumable by counting.

Memory: the reader's 1 MiB chunks plus the producer's queue (bounded by
``queue.buffering.max.kbytes``), whatever the partition's size.

In the same pass it counts, for each consumer group's committed offset C on
the source partition, the selected records below C: the group's new offset is
``baseline + that count`` (the target offset of the first restored record at
or after C, or the end of the restored data).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kbackup.catalog.integrity import ChecksumError, bad_segments
from kbackup.errors import KbackupError
from kbackup.partition.reader import PartitionReader
from kbackup.restore.selection import BelowCounter, Window, selected_records
from kbackup.storage import parse_location


@dataclass(frozen=True)
class PartitionTask:
    """Everything a restore task needs (picklable)."""

    source_dir: str
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    window: Window
    skip: int
    baseline: int
    groups: dict[str, int]
    client: dict[str, str]
    batch_size: int
    legacy: bool = False


@dataclass
class PartitionResult:
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    selected: int = 0
    produced: int = 0
    produced_bytes: int = 0
    started_at: float = 0.0  # wall clock, seconds since the epoch
    ended_at: float = 0.0
    end_offset: int = 0
    group_offsets: dict[str, int] = field(default_factory=dict)


class DeliveryError(KbackupError):
    """The target cluster refused records."""


def producer_settings(client: dict[str, str], batch_size: int) -> dict[str, object]:
    return {
        **client,
        "enable.idempotence": "true",
        "acks": "all",
        "max.in.flight.requests.per.connection": "5",
        "batch.size": str(batch_size),
        "linger.ms": "20",
        "queue.buffering.max.kbytes": str(max(64 * 1024, 4 * batch_size // 1024)),
        "delivery.report.only.error": True,
    }


def restore_partition(task: PartitionTask) -> PartitionResult:
    """Produce the task's records; return what was done and the groups' new offsets."""
    from confluent_kafka import KafkaException, Producer

    result = PartitionResult(task.source_topic, task.source_partition, task.target_topic, task.target_partition)
    result.started_at = time.time()
    failures: list[str] = []

    def on_delivery(error: object, message: object) -> None:
        if error is not None and len(failures) < 5:
            failures.append(str(error))

    reader = PartitionReader(parse_location(task.source_dir), task.source_partition, legacy=task.legacy)
    _check_segments(task)
    producer = Producer({**producer_settings(task.client, task.batch_size), "on_delivery": on_delivery})
    counter = BelowCounter(list(task.groups.values()))
    produce = producer.produce
    topic, partition = task.target_topic, task.target_partition
    index = 0
    for record in selected_records(reader, task.window):
        counter.add(record.offset)
        if index >= task.skip:
            timestamp = record.timestamp if record.timestamp is not None and record.timestamp > 0 else 0
            headers = list(record.headers) if record.headers else None
            while True:
                try:
                    produce(topic, record.value, record.key, partition, timestamp=timestamp, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as exc:  # e.g. _UNKNOWN_PARTITION: the target changed since the plan
                    raise DeliveryError(
                        f"topic {topic!r} partition {partition}: cannot produce source offset {record.offset}: "
                        f"{exc.args[0].str() if exc.args else exc}"
                    ) from None
            result.produced += 1
            result.produced_bytes += (len(record.key or b"")) + len(record.value or b"")
            if result.produced % 10_000 == 0:
                producer.poll(0)
                if failures:
                    break
        index += 1
    remaining = producer.flush(300)
    if failures or remaining:
        problem = "; ".join(failures) or f"{remaining} records not acknowledged within 300 s"
        raise DeliveryError(f"topic {topic!r} partition {partition}: {problem}")
    result.selected = index
    result.end_offset = task.baseline + index
    below = counter.below()
    result.group_offsets = {group: task.baseline + below[offset] for group, offset in task.groups.items()}
    result.ended_at = time.time()
    return result


def _check_segments(task: PartitionTask) -> None:
    """Refuse to produce from a partition whose cataloged segments fail their checksums.

    Segments the plan chose to leave out (``--skip-bad-segments``) are not checked.
    """
    topic_dir = parse_location(task.source_dir)
    for bad in bad_segments(topic_dir.parent, task.source_topic, task.source_partition):
        if bad.name in task.window.skip_segments:
            continue
        raise ChecksumError(
            f"topic {task.source_topic!r} partition {task.source_partition}: segment {bad.name} "
            f"(offsets {bad.first_offset}..{bad.last_offset}) is damaged: {bad.reason}; nothing was produced "
            "from this partition (--skip-bad-segments restores the rest and reports what was left out)"
        )
