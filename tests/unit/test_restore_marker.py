"""The restore's progress marker and identity (pure logic; the transactional behaviour is in test_restore.py)."""

from __future__ import annotations

from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.restore.marker import ProgressMarker, restore_identity, transactional_id


def test_a_marker_survives_its_commit_metadata() -> None:
    marker = ProgressMarker("abc", 1234, 7, 1300)
    assert ProgressMarker.from_commit(1234, marker.metadata()) == marker


def test_a_commit_kbackup_did_not_write_is_another_restores() -> None:
    for metadata in (None, "", "not json", '{"restore": "x"}', '{"restore": "x", "first": "a", "next": 1}'):
        assert ProgressMarker.from_commit(5, metadata).restore == "unknown"


def test_the_identity_names_the_records_not_the_run() -> None:
    origin = ("cluster-a", "topic-id")
    base = restore_identity("orders", 0, origin, "/backups/a", Window())
    assert restore_identity("orders", 0, origin, "/mnt/copy-of-a", Window()) == base  # same records, other path
    # Segments left out are part of it: a rerun without them must not take the marker as covering their records.
    assert restore_identity("orders", 0, origin, "/backups/a", Window(skip_segments=frozenset({"s"}))) != base
    assert restore_identity("orders", 1, origin, "/backups/a", Window()) != base
    assert restore_identity("orders", 0, ("cluster-b", "topic-id"), "/backups/a", Window()) != base
    assert restore_identity("orders", 0, origin, "/backups/a", Window(to_time=5)) != base
    # Without a recorded origin the backup's location stands for it.
    assert restore_identity("orders", 0, (None, None), "/a", Window()) != restore_identity(
        "orders", 0, (None, None), "/b", Window()
    )


def test_one_transactional_id_per_target_partition() -> None:
    assert transactional_id("orders", 3) == "kbackup-restore.orders.3"
