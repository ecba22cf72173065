"""Recording consumer group offsets beside the backed-up data.

A **round** reads, in this order, (1) every consumer group's committed offsets
and (2) the end offset of every backed-up partition. Since a group can only
have committed what existed, each committed offset of (1) is at most the end
offset of (2). The round's offsets are **stored only once the backup holds
every partition up to the round's end offsets**, so a stored group offset
never points past data that is in the backup, even after a crash.

Stored offsets are merged into each partition's ``consumer_offsets_partition_PPP``
(replaced atomically): groups that disappear from the cluster stay in the file
unless pruning is asked for, as in the original tool. Each stored round is also
appended to the offset history (:mod:`spark_kafka_backup.catalog.offset_history`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_kafka_backup.backup.origin import Recreated, check_origin
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.offset_history import append_round
from spark_kafka_backup.catalog.store import mark_cataloged
from spark_kafka_backup.catalog.topics import read_topic_record, record_topic
from spark_kafka_backup.errors import PlacementError
from spark_kafka_backup.fsutil import sync_filesystem
from spark_kafka_backup.kafka.cluster import (
    PROGRESS_GROUP,
    TopicPartitionKey,
    cluster_identity,
    committed_group_offsets,
    list_offsets,
    partition_counts,
    topic_configs,
    topic_ids,
)
from spark_kafka_backup.kafka.isolated_groups import IsolatedGroupOffsets
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.layout import partition_index_path
from spark_kafka_backup.partition.object_writer import open_partition_writer
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets, write_consumer_offsets
from spark_kafka_backup.storage import Location, exists

log = logging.getLogger("spark_kafka_backup.offsets")


@dataclass(frozen=True)
class OffsetRound:
    """One consistent reading of group offsets (see module docstring)."""

    groups: dict[str, dict[TopicPartitionKey, int]]
    ends: dict[TopicPartitionKey, int]
    taken_at: float
    #: False when a node did not answer the group listing: a group missing from ``groups`` may still exist.
    complete: bool = True
    #: The topic id (incarnation) each topic's offsets were read for, the same before and after they were read.
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    #: Topics left out of the round because the cluster's incarnation is not the one the target backed up:
    #: topic -> (the backed-up topic id, the cluster's).
    other_incarnations: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def reached_by(self, backed_up: Mapping[TopicPartitionKey, int]) -> bool:
        """Whether a backup that holds offsets below ``backed_up`` covers this round."""
        return all(backed_up.get(key, 0) >= end for key, end in self.ends.items() if end > 0)


def selected_partitions(admin: Any, selection: TopicSelection, *, timeout: float = 30) -> list[TopicPartitionKey]:
    counts = partition_counts(admin, timeout=timeout)
    return [(topic, partition) for topic in selection.select(counts) for partition in range(counts[topic])]


def last_stable_offsets(
    admin: Any, selection: TopicSelection, *, timeout: float = 30
) -> tuple[float, dict[TopicPartitionKey, int]]:
    """(unix time, the selected partitions' last stable offsets): what a ``read_committed`` consumer can read."""
    keys = selected_partitions(admin, selection, timeout=timeout)
    taken_at = time.time()
    return taken_at, list_offsets(admin, keys, latest=True, read_committed=True, timeout=timeout)


def take_round(
    admin: Any,
    selection: TopicSelection,
    *,
    target: Location | None = None,
    read_committed: bool = True,
    timeout: float = 30,
    group_reader: IsolatedGroupOffsets | None = None,
    recorded_ids: dict[str, str] | None = None,
) -> OffsetRound:
    """Read a round (module docstring); ``timeout``: of each request to the cluster. ``group_reader``: where the groups'
    committed offsets are read (a child process of the job's: :mod:`spark_kafka_backup.kafka.isolated_groups`);
    ``admin`` itself when None.

    Group offsets are committed by topic name: a topic deleted and created again takes commits under the same name.
    So the topics' ids are read before the groups and again after the end offsets, and a topic is in the round only
    when both say the same incarnation (a topic recreated in between is in the next round; one that did not exist
    before is the incarnation read after: a deleted topic's commits go with it). With ``target``, a topic
    whose incarnation is not the one the target backed up is left out (named in ``other_incarnations``): its groups'
    offsets are never stored against the backed-up partitions, and the round does not wait for its end offsets.
    ``recorded_ids``: the target's recorded topic ids read so far, kept by the caller across rounds (a recorded id
    never changes: a target holds one incarnation of a topic), so that a round does not read every topic record."""
    counted = selected_partitions(admin, selection, timeout=timeout)
    before = topic_ids(admin, {topic for topic, _ in counted}, timeout=timeout)
    # The restore's progress markers (spark_kafka_backup.restore.marker) are not a consumer's position.
    committed, complete = (
        group_reader(timeout=timeout) if group_reader else committed_group_offsets(admin, timeout=timeout)
    )
    groups = {group: offsets for group, offsets in committed.items() if group != PROGRESS_GROUP}
    keys = selected_partitions(admin, selection, timeout=timeout)
    ends = list_offsets(admin, keys, latest=True, read_committed=read_committed, timeout=timeout)
    after = topic_ids(admin, {topic for topic, _ in keys}, timeout=timeout)
    # Missing before: created (again) since, so the commits read in between are the incarnation now there.
    settled = {topic: found for topic, found in after.items() if before.get(topic, found) == found}
    others: dict[str, tuple[str, str]] = {}
    if target is not None:
        known = recorded_ids if recorded_ids is not None else {}
        for topic, found in settled.items():
            if topic not in known:
                record = read_topic_record(target, topic)
                if record is None or record.topic_id is None:
                    continue
                known[topic] = record.topic_id
            if known[topic] != found:
                others[topic] = (known[topic], found)
    ends = {key: end for key, end in ends.items() if key[0] in settled and key[0] not in others}
    kept = {group: {key: offset for key, offset in offsets.items() if key in ends} for group, offsets in groups.items()}
    return OffsetRound(
        {group: offsets for group, offsets in kept.items() if offsets},
        ends,
        time.time(),
        complete,
        topic_ids={topic: found for topic, found in settled.items() if topic not in others},
        other_incarnations=others,
    )


def store_round(target: Location, round_: OffsetRound, *, prune: bool, live_groups: set[str] | None = None) -> int:
    """Merge the round into the partitions' offset files; return how many files changed."""
    changed = 0
    for topic, partition in sorted(round_.ends):
        topic_dir = target / topic
        if not exists(partition_index_path(topic_dir, partition)):
            continue
        fresh = {
            group: offsets[(topic, partition)]
            for group, offsets in round_.groups.items()
            if (topic, partition) in offsets
        }
        stored = read_consumer_offsets(topic_dir, partition)
        merged = {**stored, **fresh}
        if prune and (round_.complete or live_groups is not None):
            alive = live_groups if live_groups is not None else set(round_.groups)
            merged = {group: offset for group, offset in merged.items() if group in alive}
        if merged != stored:
            write_consumer_offsets(topic_dir, partition, merged)
            changed += 1
    append_round(target, int(round_.taken_at * 1000), round_.groups, round_.topic_ids)
    return changed


@dataclass(frozen=True)
class RecordedTopics:
    """What :func:`record_topics` did: records changed, and topics refused for another incarnation."""

    changed: int
    cluster_id: str
    recreated: list[Recreated]


def record_topics(
    target: Location, admin: Any, selection: TopicSelection, *, servers: str, timeout: float = 30
) -> RecordedTopics:
    """Keep the catalog's record of each selected topic (origin, partition count, configuration).

    Raises :class:`~spark_kafka_backup.backup.origin.OriginError` first when the target
    holds another cluster's backup; a topic the target holds from another
    incarnation is left as recorded and returned. ``timeout``: of each request to the cluster.
    """
    counts = partition_counts(admin, timeout=timeout)
    topics = selection.select(counts)
    cluster_id, topic_ids = cluster_identity(admin, topics, timeout=timeout)
    recreated = check_origin(target, cluster_id, topic_ids, servers=servers, warn=False)  # the preflight warned
    refused = {item.topic for item in recreated}
    topics = [topic for topic in topics if topic not in refused]
    configs = topic_configs(admin, topics, timeout=timeout)
    changed = sum(
        record_topic(
            target,
            topic,
            counts[topic],
            configs.get(topic, {}),
            cluster_id=cluster_id,
            topic_id=topic_ids.get(topic),
        )
        for topic in topics
        if topic in configs  # not one deleted since it was listed
    )
    return RecordedTopics(changed, cluster_id, recreated)


def ensure_partitions(
    target: Location,
    admin: Any,
    selection: TopicSelection,
    *,
    max_segment_size: int,
    only: Iterable[TopicPartitionKey] | None = None,
) -> int:
    """Give every selected partition (of ``only``, when given) that has no files yet its partition index and an empty
    segment.

    The empty segment is named after the partition's log-start offset, so the
    original tool can read the partition too. Returns how many were created.
    """
    candidates = selected_partitions(admin, selection) if only is None else list(only)
    keys = [key for key in candidates if not exists(partition_index_path(target / key[0], key[1]))]
    if not keys:
        return 0
    earliest = list_offsets(admin, keys, latest=False)
    created: list[TopicPartitionKey] = []
    # On disk the files, their catalogs and markers included, are written without one fsync each and made durable
    # by one file system sync at the end (10,000 new partitions took 120 s with the nine fsyncs each of a writer and
    # its catalog, 2026-12-02). A power loss before it leaves empty or missing placeholder files, which the next
    # writer of the partition repairs or creates, and empty catalogs, read as none (catalog.store.read_catalog).
    local = target if isinstance(target, Path) else None
    ledger = CatalogLedger(target, sync=local is None)
    for topic, partition in keys:
        try:
            with open_partition_writer(
                target / topic,
                topic,
                partition,
                max_segment_size=max_segment_size,
                ledger=ledger,
                fsync=local is None,
            ) as writer:
                writer.ensure_segment(earliest[(topic, partition)])
            created.append((topic, partition))
        except PlacementError:
            continue  # the backup is writing it right now
    if local is not None and created:
        sync_filesystem(local)  # the catalogs are durable: now their markers, durable in turn
        for topic, partition in created:
            mark_cataloged(local, topic, partition, sync=False)
        sync_filesystem(local)
    return len(created)
