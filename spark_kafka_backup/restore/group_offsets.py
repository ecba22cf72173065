"""Committing remapped consumer group offsets on the target cluster.

Run after every restore task has succeeded, so every offset points at data the
target has acknowledged. A group is changed only when it has no active member
on the target, and an offset it already has is never moved backwards unless
forced. Every decision is reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import COORDINATOR_NOT_READY, TopicPartitionKey, _reason

log = logging.getLogger("spark_kafka_backup.restore")

T = TypeVar("T")


@dataclass(frozen=True)
class GroupDecision:
    group: str
    committed: dict[TopicPartitionKey, int]
    left_alone: dict[TopicPartitionKey, str]


def commit_group_offsets(
    admin: Any,
    client: Mapping[str, str],
    planned: Mapping[str, Mapping[TopicPartitionKey, int]],
    *,
    force: bool,
) -> list[GroupDecision]:
    """``client``: the target's client settings (a consumer reads each group's current offsets)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    decisions: list[GroupDecision] = []
    if not planned:
        return decisions
    # Read first, with a consumer: it waits out a coordinator that is still being created or
    # loaded (a new cluster's first groups), so the admin calls below meet a ready one.
    currents = {group: _current(client, group, offsets) for group, offsets in planned.items()}
    described = _with_coordinator_retries(
        lambda: {
            group: future.result(ADMIN_SECONDS + 5)
            for group, future in admin.describe_consumer_groups(list(planned), request_timeout=ADMIN_SECONDS).items()
        },
        "cannot describe consumer groups on the target",
    )
    for group, offsets in sorted(planned.items()):
        members = len(getattr(described.get(group), "members", None) or [])
        if members:
            reason = f"group has {members} active member(s) on the target"
            decisions.append(GroupDecision(group, {}, dict.fromkeys(offsets, reason)))
            continue
        current = currents[group]
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

            def alter(request: Any = request) -> list[Any]:
                futures = admin.alter_consumer_group_offsets([request], request_timeout=ADMIN_SECONDS)
                answers = [future.result(ADMIN_SECONDS + 5) for future in futures.values()]
                # Each partition has its own answer: an error there is not raised by the client.
                refused = [f"{tp.topic} partition {tp.partition}: {_error_name(tp.error)}"
                           for answer in answers for tp in answer.topic_partitions if tp.error is not None]  # fmt: skip
                if refused:
                    raise ClusterError("; ".join(refused))
                return answers

            _with_coordinator_retries(alter, f"cannot commit offsets for group {group!r}", also=_NOT_KNOWN_YET)
        decisions.append(GroupDecision(group, commit, left))
    return decisions


#: How long one admin request about groups may wait (a future without a timeout could wait for ever).
ADMIN_SECONDS = 30


#: A partition's answer to an offset commit that means "not yet" for a topic the restore has just created (the
#: group coordinator learns of it a moment later).
_NOT_KNOWN_YET = frozenset({"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_OR_PARTITION"})


def _error_name(error: Any) -> str:
    return str(error.name()) if hasattr(error, "name") else str(error)


def _with_coordinator_retries(
    call: Callable[[], T], failure: str, *, timeout: float = 60, also: frozenset[str] = frozenset()
) -> T:
    """``call()``, again while the group coordinator is not ready, or answers one of ``also`` (up to ``timeout``
    seconds); else one ClusterError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Exception as exc:
            reason = _reason(exc)
            if not any(code in reason for code in COORDINATOR_NOT_READY | also) or time.monotonic() > deadline:
                raise ClusterError(f"{failure}: {reason}") from exc
            time.sleep(0.5)


def _current(
    client: Mapping[str, str], group: str, offsets: Mapping[TopicPartitionKey, int]
) -> dict[TopicPartitionKey, int]:
    """The group's committed offsets on the target, for the partitions in ``offsets``.

    Read with a consumer of the group (it fetches offsets, it never joins),
    again while the coordinator is not ready, not with the admin API:
    librdkafka's admin ListConsumerGroupOffsets dereferences a null pointer
    when the coordinator answers NOT_COORDINATOR, which a new cluster does
    for the first group it ever sees (librdkafka issue 5040), and the process
    dies of a segmentation fault.
    """
    from confluent_kafka import Consumer, TopicPartition

    settings = {**client, "group.id": group, "enable.auto.commit": "false", "enable.auto.offset.store": "false"}

    def read() -> list[Any]:
        consumer = Consumer(settings)
        try:
            committed: list[Any] = consumer.committed([TopicPartition(t, p) for t, p in offsets], timeout=60)
            return committed
        finally:
            consumer.close()

    committed = _with_coordinator_retries(read, f"cannot read offsets of group {group!r} on the target")
    return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.error is None and tp.offset >= 0}


def current_offsets(
    client: Mapping[str, str], group: str, partitions: list[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """``group``'s committed offsets on these partitions of the target (read as :func:`commit_group_offsets` reads
    them)."""
    return _current(client, group, dict.fromkeys(partitions, 0))
