"""The end of the soak: what a restore brought back, compared record by record with what the source holds.

Each record's value names it (:mod:`benchmarks.soak.load`), so the comparison needs no offsets: per partition, the
source's records now (read committed) must be the last records of the restored partition, in the same order; the
restored records before them are ones the source has deleted since (retention, deleted records) and the backup kept;
no value may come twice. Topics deleted at the source are checked for duplicates only.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Comparison:
    partitions: int = 0
    records: int = 0
    #: Restored records the source no longer has (deleted there since the backup read them).
    kept_beyond_source: int = 0
    #: Source records the restore does not end with (lost or out of order): must be 0.
    missing: int = 0
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.missing and not self.duplicates and not self.problems


def read_all(
    settings: dict[str, str], topics: list[str], *, quiet_seconds: float = 15
) -> dict[tuple[str, int], list[bytes]]:
    """Every committed record's value of ``topics``, per partition in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "soak-compare", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "log_level": "0"})  # fmt: skip
    found: dict[tuple[str, int], list[bytes]] = {}
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment = []
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            for partition in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                found[(topic, partition)] = []
                if high > low:
                    assignment.append(TopicPartition(topic, partition, low))
                    ends[(topic, partition)] = high
        consumer.assign(assignment)
        quiet_since = time.monotonic()
        while ends and time.monotonic() - quiet_since < quiet_seconds:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            quiet_since = time.monotonic()
            key = (message.topic(), message.partition())
            found[key].append(message.value())
            if message.offset() + 1 >= ends.get(key, 0):
                ends.pop(key, None)
    finally:
        consumer.close()
    return found


def compare(source: dict[tuple[str, int], list[bytes]], restored: dict[tuple[str, int], list[bytes]]) -> Comparison:
    result = Comparison()
    for key, values in sorted(restored.items()):
        result.partitions += 1
        result.records += len(values)
        twice = [value for value, n in Counter(values).items() if n > 1]
        result.duplicates += len(twice)
        if twice:
            result.problems.append(f"{key[0]}/{key[1]}: {len(twice)} records twice, e.g. {twice[0][:40]!r}")
        held = source.get(key)
        if held is None:
            continue  # a topic deleted at the source since (or a partition it no longer has)
        if held and values[len(values) - len(held) :] != held:
            at = next((n for n, value in enumerate(held) if value not in set(values)), None)
            result.missing += sum(1 for value in held if value not in set(values))
            result.problems.append(
                f"{key[0]}/{key[1]}: the restore does not end with the source's {len(held)} records"
                + (f" (the source's record {at} is not restored)" if at is not None else " (order differs)")
            )
        result.kept_beyond_source += max(0, len(values) - len(held))
    for key in sorted(set(source) - set(restored)):
        if source[key]:
            result.missing += len(source[key])
            result.problems.append(f"{key[0]}/{key[1]}: not restored ({len(source[key])} records at the source)")
    return result
