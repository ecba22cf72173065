"""The consumer offset history: appended per round, read as of a time, repaired after a torn append."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup.catalog.offset_history import append_round, history_file, offsets_as_of, read_history
from spark_kafka_backup.storage import as_local

DAY = 1_795_334_400_000  # 2026-11-22T08:00:00Z


def test_rounds_are_appended_and_read_back_in_order(tmp_path: Path) -> None:
    append_round(tmp_path, DAY + 1000, {"g": {("t", 0): 5, ("t", 1): 7}, "h": {("t", 0): 1}})
    append_round(tmp_path, DAY + 2000, {"g": {("t", 0): 9}})
    append_round(tmp_path, DAY + 3000, {})  # nothing to keep
    entries = [(e.round_time, e.group, e.topic, e.partition, e.offset) for e in read_history(tmp_path)]
    assert entries == [
        (DAY + 1000, "g", "t", 0, 5),
        (DAY + 1000, "g", "t", 1, 7),
        (DAY + 1000, "h", "t", 0, 1),
        (DAY + 2000, "g", "t", 0, 9),
    ]
    expected = tmp_path / "kbackup~state" / "offsets-history" / "offsets-2026-11-22.avro"
    assert history_file(tmp_path, DAY + 1000) == expected


def test_offsets_as_of_a_time(tmp_path: Path) -> None:
    append_round(tmp_path, DAY + 1000, {"g": {("t", 0): 5}, "h": {("t", 0): 1}})
    append_round(tmp_path, DAY + 86_400_000 + 5, {"g": {("t", 0): 9}})  # the next day's file
    assert offsets_as_of(tmp_path, DAY) is None
    assert offsets_as_of(tmp_path, DAY + 1000) == (DAY + 1000, {"g": {("t", 0): 5}, "h": {("t", 0): 1}})
    assert offsets_as_of(tmp_path, DAY + 90_000_000) == (DAY + 86_400_005, {"g": {("t", 0): 9}})


@pytest.mark.parametrize("cut", [1, 7, 20])
def test_a_torn_append_is_dropped_and_repaired(tmp_path: Path, cut: int) -> None:
    append_round(tmp_path, DAY + 1000, {"g": {("t", 0): 5}})
    path = as_local(history_file(tmp_path, DAY))
    whole_first = path.stat().st_size
    append_round(tmp_path, DAY + 2000, {"g": {("t", 0): 6}})
    path.write_bytes(path.read_bytes()[:-cut])  # the second append died half-way
    assert [e.offset for e in read_history(tmp_path)] == [5]
    append_round(tmp_path, DAY + 3000, {"g": {("t", 0): 7}})
    assert [(e.round_time, e.offset) for e in read_history(tmp_path)] == [(DAY + 1000, 5), (DAY + 3000, 7)]
    assert path.stat().st_size > whole_first
