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


def test_each_offset_keeps_the_topic_incarnation_it_was_read_for_and_a_restore_takes_only_the_backed_up_one(
    tmp_path: Path,
) -> None:
    append_round(tmp_path, DAY + 1000, {"g": {("t", 0): 100, ("u", 0): 100}}, {"t": "old-id", "u": "u-id"})
    # A round read after t was deleted and created again (a backup before offset rounds checked the incarnation).
    append_round(tmp_path, DAY + 2000, {"g": {("t", 0): 180, ("u", 0): 900}}, {"t": "new-id", "u": "u-id"})
    assert [e.topic_id for e in read_history(tmp_path)] == ["old-id", "u-id", "new-id", "u-id"]
    backed_up = {"t": "old-id", "u": "u-id"}
    assert offsets_as_of(tmp_path, DAY + 5000, topic_ids=backed_up) == (DAY + 2000, {"g": {("u", 0): 900}})
    assert offsets_as_of(tmp_path, DAY + 5000) == (DAY + 2000, {"g": {("t", 0): 180, ("u", 0): 900}})


def test_a_day_file_written_without_topic_ids_is_rewritten_with_the_field_before_an_append(tmp_path: Path) -> None:
    import fastavro

    old_schema = fastavro.parse_schema(
        {"type": "record", "name": "GroupOffset", "namespace": "kbackup",
         "fields": [{"name": n, "type": t} for n, t in (("roundTimeMs", "long"), ("group", "string"),
                                                        ("topic", "string"), ("partition", "int"), ("offset", "long"))]}
    )  # fmt: skip
    path = history_file(tmp_path, DAY + 1000)
    assert isinstance(path, Path)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:  # as spark-kafka-backup wrote it before topic ids
        fastavro.writer(handle, old_schema, [{"roundTimeMs": DAY + 1000, "group": "g", "topic": "t", "partition": 0,
                                              "offset": 5}])  # fmt: skip
    append_round(tmp_path, DAY + 2000, {"g": {("t", 0): 9}}, {"t": "id-1"})
    assert [(e.offset, e.topic_id) for e in read_history(tmp_path)] == [(5, None), (9, "id-1")]
