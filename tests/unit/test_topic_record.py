"""The catalog's topic record keeps the partition count's history: what a restore to a cut creates. Pure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.topics import TopicRecord, read_topic_record, record_topic
from spark_kafka_backup.errors import FormatError


def test_the_partition_count_history_grows_only_when_the_count_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([1_000.0, 2_000.0, 3_000.0, 4_000.0])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    assert record_topic(tmp_path, "t", 2, {}, topic_id="A")
    assert record_topic(tmp_path, "t", 2, {"retention.ms": "5"}, topic_id="A")  # config only: no new entry
    assert record_topic(tmp_path, "t", 4, {"retention.ms": "5"}, topic_id="A")
    assert not record_topic(tmp_path, "t", 4, {"retention.ms": "5"}, topic_id="A")
    recorded = read_topic_record(tmp_path, "t")
    assert recorded is not None and recorded.partition_history == ((1_000_000, 2), (3_000_000, 4))
    assert [recorded.partitions_at(when) for when in (0, 1_000_000, 2_999_999, 3_000_000, 9_000_000)] == [2, 2, 2, 4, 4]
    # A record written before the history existed: its one count, whenever asked.
    old = TopicRecord("t", 3, {}, 5)
    assert TopicRecord.decode(old.encode(), file="x").partitions_at(0) == 3


def test_a_history_that_is_not_pairs_is_a_format_error() -> None:
    document = b'{"version": 1, "topic": "t", "partitions": 1, "config": {}, "capturedAt": 0, "partitionHistory": [5]}'
    with pytest.raises(FormatError, match="not a valid topic record"):
        TopicRecord.decode(document, file="topic.json")


def test_numbers_out_of_range_are_a_format_error() -> None:
    document = (
        b'{"version": 1, "topic": "t", "partitions": 1, "config": {}, "capturedAt": 0, '
        b'"partitionHistory": [[Infinity, 2]]}'
    )
    with pytest.raises(FormatError, match="not a valid topic record"):
        TopicRecord.decode(document, file="topic.json")


def test_a_regex_selection_without_some_topics_keeps_its_inline_flags() -> None:
    from spark_kafka_backup.kafka.topics import TopicSelection

    left = TopicSelection(pattern="(?i)orders.*").without(["orders2"])
    assert left is not None and left.matches("ORDERS-1") and not left.matches("orders2")
    assert TopicSelection.from_list("a,b").without(["a"]) == TopicSelection.from_list("b")
    assert TopicSelection.from_list("a").without(["a"]) is None
