"""Whether the records a restore put into the target are still there: checked when a rerun counts records as already
restored, and at the end of every restore before it commits the groups' offsets and exits 0.

A restore's progress marker (:mod:`spark_kafka_backup.restore.marker`) says which target offsets hold its records:
``first`` (the target offset of its first record) up to ``next`` (the offset after its last). While the cluster is
alive someone may delete records (``kafka-delete-records``, the Admin API's ``delete_records``), retention may take
them, or the topic may be deleted (and created again) under a running restore. A restore that said "N records
restored" with some of them gone would be a false promise, and a rerun that counted lost records as "already in the
target" would skip them for good. So per target partition holding records of this restore:

- its marker must still be there (a deleted topic takes its markers with it);
- the partition's log start must be at or below ``first``, and its end at or above ``next``.

Otherwise the restore names the partition, the offsets missing and the likely cause, and exits 1 (the groups are
not moved). What it cannot see: records deleted after this check, before the process exits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from spark_kafka_backup.restore.marker import ProgressMarker

log = logging.getLogger("spark_kafka_backup.restore")


def missing_records(
    expected: Iterable[tuple[str, int]],
    markers: Mapping[tuple[str, int], ProgressMarker],
    identities: Mapping[tuple[str, int], str],
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
    *,
    head_loss: list[str] | None = None,
) -> list[str]:
    """One line per target partition of ``expected`` (each holds records of this restore) whose records are not all
    there. Pure: the cluster's answers are given: the markers, the restore's identity per partition, the partitions'
    first and end offsets (a partition missing from them no longer exists). With ``head_loss`` (the restore accepted
    retention deleting restored records: ``--accept-retention-loss``), a log start past restored records is said
    there instead of being a problem."""
    problems = []
    for key in expected:
        where = f"{key[0]}/{key[1]}"
        marker = markers.get(key)
        ours = marker is not None and marker.restore == identities.get(key)
        if key not in earliest or key not in latest:
            problems.append(f"{where}: the partition is gone (the topic was deleted while the restore ran)")
            continue
        if marker is None or not ours:
            problems.append(
                f"{where}: this restore's progress marker is gone (the topic was deleted, or deleted and created "
                "again, while the restore ran; or, for a restore running longer than the target's "
                "offsets.retention.minutes, the marker expired)"
            )
            continue
        first, after = marker.first, marker.next  # where the tasks left this restore's records
        if first >= after:
            continue
        start, end = earliest[key], latest[key]
        if start > first:
            lost = min(start, after) - first
            (head_loss if head_loss is not None else problems).append(
                f"{where}: offsets {first}..{min(start, after) - 1} of this restore ({lost} offsets) are no longer in "
                f"the target: its log now starts at {start} (records deleted with delete_records, or by retention)"
            )
        elif end < after:
            problems.append(
                f"{where}: its log ends at offset {end}: offsets {end}..{after - 1} of this restore are gone (the "
                "topic was truncated, or deleted and created again)"
            )
    return problems


def verify_held(
    client: Mapping[str, str],
    admin: object,
    identities: Mapping[tuple[str, int], str],
    *,
    head_loss: list[str] | None = None,
) -> list[str]:
    """:func:`missing_records` for the target partitions of ``identities`` (each holding records of the restore of
    that identity), asked of the cluster now."""
    from spark_kafka_backup.kafka.cluster import list_offsets, partition_counts
    from spark_kafka_backup.restore.marker import marker_consumer, read_markers

    counts = partition_counts(admin)
    present = [key for key in identities if key[1] < counts.get(key[0], 0)]
    earliest = list_offsets(admin, present, latest=False)
    latest = list_offsets(admin, present, latest=True, read_committed=False)
    consumer = marker_consumer(client)
    try:
        markers = read_markers(consumer, present)
    finally:
        consumer.close()
    return missing_records(sorted(identities), markers, identities, earliest, latest, head_loss=head_loss)


def changed_targets(produced_into: Mapping[str, str], client: Mapping[str, str]) -> list[str]:
    """What happened to the target topics the tasks produced into (``produced_into``: each one's topic id then), asked
    with a new client after a failure: deleted, or deleted and created again. Empty when nothing can be told (the
    cluster does not answer either)."""
    from spark_kafka_backup.errors import ClusterError
    from spark_kafka_backup.kafka.cluster import admin_client, topic_ids

    try:
        now = topic_ids(admin_client({**client, "socket.timeout.ms": "10000"}), produced_into, timeout=15)
    except ClusterError:
        return []
    changed = []
    for topic, before in sorted(produced_into.items()):
        found = now.get(topic)
        if found is None:
            changed.append(f"target topic {topic!r} was deleted while the restore ran")
        elif found != before:
            changed.append(
                f"target topic {topic!r} was deleted and created again while the restore ran (topic id {before}, "
                f"now {found}; a broker with auto.create.topics.enable creates a deleted topic again, with its "
                "default partition count, when a producer writes to it)"
            )
    return changed


def refuse_lost(lost: list[str], head_loss: list[str] | None, *, what: str, then: str) -> None:
    """Say each record range retention took that the restore accepted (``head_loss``), then refuse ``lost``: one
    :class:`~spark_kafka_backup.errors.TargetChangedError` that begins with ``what`` and ends with ``then``."""
    from spark_kafka_backup.errors import TargetChangedError

    for line in head_loss or ():
        log.warning("%s (accepted with --accept-retention-loss)", line)
    if lost:
        raise TargetChangedError(f"{what}: {'; '.join(lost)} ({then})")
