"""The restore's last look at its target, on the cluster's answers: every record it restored must still be there."""

from __future__ import annotations

from spark_kafka_backup.restore.marker import ProgressMarker
from spark_kafka_backup.restore.target_check import missing_records

KEY = ("orders", 0)
OURS = {KEY: "restore-a"}


def _check(marker: ProgressMarker | None, start: int | None, end: int | None, **kwargs: list[str]) -> list[str]:
    markers = {KEY: marker} if marker is not None else {}
    earliest = {KEY: start} if start is not None else {}
    latest = {KEY: end} if end is not None else {}
    return missing_records([KEY], markers, OURS, earliest, latest, **kwargs)


def test_records_still_there_pass_whatever_came_before_or_after_them() -> None:
    # Records at 10..99 (the transaction's commit marker at 100), other records before and after.
    assert _check(ProgressMarker("restore-a", 500, 10, 100), 0, 160) == []
    assert _check(ProgressMarker("restore-a", 500, 10, 100), 10, 101) == []
    assert _check(ProgressMarker("restore-a", 0, 0, 0), 7, 7) == []  # nothing restored there yet


def test_a_log_start_past_restored_records_names_the_offsets_and_the_cause() -> None:
    said = _check(ProgressMarker("restore-a", 500, 10, 100), 40, 101)
    assert said == [
        "orders/0: offsets 10..39 of this restore (30 offsets) are no longer in the target: its log now starts at "
        "40 (records deleted with delete_records, or by retention)"
    ]
    everything = _check(ProgressMarker("restore-a", 500, 10, 100), 150, 150)
    assert "offsets 10..99 of this restore (90 offsets)" in everything[0]


def test_retention_accepted_says_the_head_lost_without_failing() -> None:
    accepted: list[str] = []
    assert _check(ProgressMarker("restore-a", 500, 10, 100), 40, 101, head_loss=accepted) == []
    assert len(accepted) == 1 and "offsets 10..39" in accepted[0]


def test_a_truncated_log_a_missing_marker_or_partition_fail_naming_the_partition() -> None:
    assert (
        "its log ends at offset 60: offsets 60..99 of this restore are gone"
        in _check(ProgressMarker("restore-a", 500, 10, 100), 0, 60)[0]
    )
    assert "progress marker is gone" in _check(None, 0, 100)[0]
    assert "progress marker is gone" in _check(ProgressMarker("restore-b", 500, 10, 100), 0, 100)[0]
    assert "the partition is gone" in _check(ProgressMarker("restore-a", 500, 10, 100), None, None)[0]
