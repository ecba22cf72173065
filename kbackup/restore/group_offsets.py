"""Committing remapped consumer group offsets on the target cluster.

Run after every restore task has succeeded, so every offset points at data the
target has acknowledged. A group is changed only when it has no active member
on the target, and an offset it already has is never moved backwards unless
forced. Every decision is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbackup.kafka.cluster import ClusterError, TopicPartitionKey, _reason

log = logging.getLogger("kbackup.restore")


@dataclass(frozen=True)
class GroupDecision:
    group: str
    committed: dict[TopicPartitionKey, int]
    left_alone: dict[TopicPartitionKey, str]


def commit_group_offsets(
    admin: Any, planned: Mapping[str, Mapping[TopicPartitionKey, int]], *, force: bool
) -> list[GroupDecision]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    decisions: list[GroupDecision] = []
    if not planned:
        return decisions
    try:
        described = {group: future.result() for group, future in admin.describe_consumer_groups(list(planned)).items()}
    except Exception as exc:
        raise ClusterError(f"cannot describe consumer groups on the target: {_reason(exc)}") from None
    for group, offsets in sorted(planned.items()):
        members = len(getattr(described.get(group), "members", None) or [])
        if members:
            reason = f"group has {members} active member(s) on the target"
            decisions.append(GroupDecision(group, {}, dict.fromkeys(offsets, reason)))
            continue
        current = _current(admin, group, offsets)
        commit: dict[TopicPartitionKey, int] = {}
        left: dict[TopicPartitionKey, str] = {}
        for key, offset in sorted(offsets.items()):
            now = current.get(key)
            if now is not None and now > offset and not force:
                left[key] = f"would move back from {now} to {offset} (--force-offsets allows it)"
            elif now == offset:
                left[key] = f"already at {offset}"
            else:
                commit[key] = offset
        if commit:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in commit.items()])
            try:
                for future in admin.alter_consumer_group_offsets([request]).values():
                    future.result()
            except Exception as exc:
                raise ClusterError(f"cannot commit offsets for group {group!r}: {_reason(exc)}") from None
        decisions.append(GroupDecision(group, commit, left))
    return decisions


def _current(admin: Any, group: str, offsets: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in offsets])
    try:
        result: dict[TopicPartitionKey, int] = {}
        for future in admin.list_consumer_group_offsets([request]).values():
            for tp in future.result().topic_partitions:
                if tp.error is None and tp.offset >= 0:
                    result[(tp.topic, tp.partition)] = tp.offset
        return result
    except Exception as exc:
        raise ClusterError(f"cannot read offsets of group {group!r} on the target: {_reason(exc)}") from None
