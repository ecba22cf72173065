"""The end of the soak: what each restore brought back, compared record by record with what the source held.

The truth is the shadow reader's (:mod:`benchmarks.soak.shadow`): every committed record each partition had, by its
offset at the source. A restore of a partition must bring back a **contiguous run** of it, in order, each record once:

- ending exactly at the end asked for: the last record below a checkpoint's cut, or the partition's last record for
  the latest state (a topic deleted at the source included: the backup caught up with it before it was deleted);
- starting no later than the first record still needed: for a checkpoint, the lowest offset its groups had committed
  on the partition (or its cut when none had); for the latest state, the newest retained checkpoint's need (what
  ``prune`` may delete comes before it), or the partition's first record when no checkpoint has the partition.
  Records before the start are counted as pruned.

Consumer groups: for every group and partition the restore set, the next record the group reads in the restored
cluster must be the one it read next at the source (the source's committed offsets at the end for the latest state,
the cut's for a checkpoint, among the records below the cut).
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from benchmarks.soak.shadow import Truth, record_name

#: Per partition of a cluster: (offset, record name) in offset order.
Restored = dict[tuple[str, int], list[tuple[int, bytes]]]
#: group -> (topic, partition) -> committed offset.
GroupOffsets = dict[str, dict[tuple[str, int], int]]

END = b"<end>"


@dataclass
class Comparison:
    label: str
    partitions: int = 0
    records: int = 0
    #: Records the source held before a restored partition's start: let go by prune (allowed by the need).
    pruned: int = 0
    #: Records that should have been restored and were not: must be 0.
    missing: int = 0
    duplicates: int = 0
    #: Restored records the source never held: must be 0.
    foreign: int = 0
    groups_checked: int = 0
    groups_wrong: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicates or self.foreign or self.groups_wrong or self.problems)


def read_all(settings: dict[str, str], *, quiet_seconds: float = 15) -> Restored:
    """Every committed record of every topic but Kafka's own, per partition in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "soak-compare", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "log_level": "0"})  # fmt: skip
    found: Restored = {}
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment, ends = [], {}
        for topic, described in metadata.topics.items():
            if topic.startswith("__"):
                continue
            for partition in described.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                found[(topic, partition)] = []
                if high > low:
                    assignment.append(TopicPartition(topic, partition, low))
                    ends[(topic, partition)] = high
        consumer.assign(assignment)
        quiet_since = time.monotonic()
        while ends and time.monotonic() - quiet_since < quiet_seconds:
            for message in consumer.consume(1000, 1.0):
                if message.error() is not None:
                    continue
                quiet_since = time.monotonic()
                key = (message.topic(), message.partition())
                found[key].append((message.offset(), record_name(message.value())))
                if message.offset() + 1 >= ends.get(key, 0):
                    ends.pop(key, None)
    finally:
        consumer.close()
    return found


def group_offsets(settings: dict[str, str], groups: list[str] | None = None) -> GroupOffsets:
    """The committed offsets of ``groups`` (default: every group) in a cluster."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**settings, "log_level": "0"})
    if groups is None:
        listed = admin.list_consumer_groups(request_timeout=30).result(60)
        groups = sorted(g.group_id for g in listed.valid)
    found: GroupOffsets = {}
    for group in groups:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)
        for described in futures.values():
            result = described.result(60)
            offsets = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}
            if offsets:
                found[group] = offsets
    return found


def compare(
    label: str,
    truth: Truth,
    restored: Restored,
    *,
    ends: Mapping[tuple[str, int], int] | None,
    needed_from: Mapping[tuple[str, int], int],
    source_groups: GroupOffsets,
    restored_groups: GroupOffsets,
    renamed: Mapping[str, str] | None = None,
) -> Comparison:
    """``ends``: a checkpoint's cut (only its partitions, below it), None for the latest state. ``needed_from``: per
    partition, the offset the restore must start at or before (module docstring). ``renamed``: source topic -> the
    restored topic's name."""
    result = Comparison(label)
    renamed = renamed or {}
    for key, held in sorted(truth.items()):
        if ends is not None and key not in ends:
            continue
        offsets = sorted(o for o in held if ends is None or o < ends[key])
        target = (renamed.get(key[0], key[0]), key[1])
        got = restored.get(target, [])
        if not offsets:
            if got:
                result.foreign += len(got)
                result.problems.append(f"{label} {key[0]}/{key[1]}: {len(got)} records restored, none expected")
            continue
        result.partitions += 1
        result.records += len(got)
        names = [name for _, name in got]
        twice = [name for name, n in Counter(names).items() if n > 1]
        if twice:
            result.duplicates += sum(Counter(names)[name] - 1 for name in twice)
            result.problems.append(f"{label} {key[0]}/{key[1]}: {len(twice)} records twice, e.g. {twice[0]!r}")
        where = {held[o]: o for o in offsets}
        foreign = [name for name in names if name not in where]
        if foreign:
            result.foreign += len(foreign)
            result.problems.append(f"{label} {key[0]}/{key[1]}: {len(foreign)} records the source never held "
                                   f"(below the end asked for), e.g. {foreign[0]!r}")  # fmt: skip
            continue
        if not got:
            result.missing += len(offsets)
            result.problems.append(f"{label} {key[0]}/{key[1]}: nothing restored of {len(offsets)} records")
            continue
        first = offsets.index(where[names[0]])
        expected = [held[o] for o in offsets[first:]]
        if names != expected:
            lost = len(set(expected) - set(names))
            result.missing += lost
            at = next(n for n, (a, b) in enumerate(zip([*names, END], [*expected, END], strict=False)) if a != b)
            result.problems.append(
                f"{label} {key[0]}/{key[1]}: not the source's run from offset {offsets[first]}: {lost} of "
                f"{len(expected)} missing; first difference at restored record {at}"
            )
        result.pruned += first
        need = needed_from.get(key)  # None: any start is allowed (only the run and its end are checked)
        if need is not None and offsets[first] > need and any(need <= o < offsets[first] for o in offsets[:first]):
            short = sum(1 for o in offsets[:first] if o >= need)
            result.missing += short
            result.problems.append(f"{label} {key[0]}/{key[1]}: starts at offset {offsets[first]}, but {short} "
                                   f"records from offset {need} were still needed")  # fmt: skip
    _compare_groups(result, truth, restored, source_groups, restored_groups, ends, renamed)
    return result


def _compare_groups(
    result: Comparison,
    truth: Truth,
    restored: Restored,
    source_groups: GroupOffsets,
    restored_groups: GroupOffsets,
    ends: Mapping[tuple[str, int], int] | None,
    renamed: Mapping[str, str],
) -> None:
    """Each group's next record in the restored cluster is its next record at the source."""
    for group, offsets in sorted(source_groups.items()):
        if group == "soak-compare":
            continue
        for key, committed in sorted(offsets.items()):
            held = truth.get(key)
            if held is None or (ends is not None and key not in ends):
                continue
            target = (renamed.get(key[0], key[0]), key[1])
            result.groups_checked += 1
            # A group may have read past the cut's end (its offsets are read just after the end offsets): the
            # records between are not in the checkpoint, and the restored group goes on at the end.
            below = sorted((o, n) for o, n in held.items() if ends is None or o < ends[key])
            wanted = _next_name(below, committed)
            given = restored_groups.get(group, {}).get(target)
            got = END if given is None else _next_name(restored.get(target, []), given)
            if got != wanted and not (given is None and wanted == END):
                result.groups_wrong += 1
                result.problems.append(
                    f"{result.label} group {group} on {key[0]}/{key[1]}: reads {got!r} next after the restore "
                    f"(offset {given}), {wanted!r} at the source (offset {committed})"
                )


def _next_name(records: list[tuple[int, bytes]], offset: int) -> bytes:
    at = bisect.bisect_left(records, (offset, b""))
    return records[at][1] if at < len(records) else END
