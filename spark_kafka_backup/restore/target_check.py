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

from collections.abc import Iterable, Mapping

from spark_kafka_backup.restore.marker import ProgressMarker


def missing_records(
    expected: Iterable[tuple[str, int]],
    markers: Mapping[tuple[str, int], ProgressMarker],
    identities: Mapping[tuple[str, int], str],
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
) -> list[str]:
    """One line per target partition of ``expected`` (each holds records of this restore) whose records are not all
    there. Pure: the cluster's answers are given: the markers, the restore's identity per partition, the partitions'
    first and end offsets (a partition missing from them no longer exists)."""
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
                "again, while the restore ran)"
            )
            continue
        first, after = marker.first, marker.next  # where the tasks left this restore's records
        if first >= after:
            continue
        start, end = earliest[key], latest[key]
        if start > first:
            lost = min(start, after) - first
            problems.append(
                f"{where}: offsets {first}..{min(start, after) - 1} of this restore ({lost} offsets) are no longer in "
                f"the target: its log now starts at {start} (records deleted with delete_records, or by retention)"
            )
        elif end < after:
            problems.append(
                f"{where}: the partition ends at {end}, before offset {after - 1}, this restore's last record "
                "(the topic was truncated, or deleted and created again)"
            )
    return problems


def verify_held(client: Mapping[str, str], admin: object, identities: Mapping[tuple[str, int], str]) -> list[str]:
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
    return missing_records(sorted(identities), markers, identities, earliest, latest)
