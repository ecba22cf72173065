"""An offset round keeps a topic only for the incarnation the backup holds (pure: the cluster's answers are given)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.backup import group_offsets
from spark_kafka_backup.backup.group_offsets import take_round
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.kafka.topics import TopicSelection

KEYS = [("t", 0), ("t", 1), ("u", 0)]


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The cluster's answers, in the order a round asks: topic ids before the groups, then after the end offsets."""
    answers: dict[str, Any] = {"ids": [{"t": "t-old", "u": "u-1"}, {"t": "t-old", "u": "u-1"}], "asked": 0}

    def ids(admin: object, topics: set[str], timeout: float) -> dict[str, str]:
        found = answers["ids"][min(answers["asked"], 1)]
        answers["asked"] += 1
        return {topic: found[topic] for topic in topics if topic in found}

    monkeypatch.setattr(group_offsets, "topic_ids", ids)
    monkeypatch.setattr(group_offsets, "selected_partitions", lambda admin, selection, timeout: KEYS)
    monkeypatch.setattr(group_offsets, "list_offsets", lambda admin, keys, **kwargs: dict.fromkeys(keys, 50))
    groups = {"g1": {("t", 0): 40, ("t", 1): 40}, "g2": {("u", 0): 30}}
    monkeypatch.setattr(group_offsets, "committed_group_offsets", lambda admin, timeout: (groups, True))
    return answers


def _round(target: Path, recorded: dict[str, str] | None = None) -> Any:
    return take_round(object(), TopicSelection(topics=("t", "u")), target=target, recorded_ids=recorded)


def test_the_backed_up_incarnation_is_kept(cluster: dict[str, Any], tmp_path: Path) -> None:
    record_topic(tmp_path, "t", 2, {}, cluster_id="c", topic_id="t-old")
    taken = _round(tmp_path)
    assert taken.groups == {"g1": {("t", 0): 40, ("t", 1): 40}, "g2": {("u", 0): 30}}
    assert taken.topic_ids == {"t": "t-old", "u": "u-1"} and not taken.other_incarnations


def test_another_incarnation_is_left_out_and_the_round_does_not_wait_for_it(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    record_topic(tmp_path, "t", 6, {}, cluster_id="c", topic_id="t-old")
    cluster["ids"] = [{"t": "t-new", "u": "u-1"}, {"t": "t-new", "u": "u-1"}]
    recorded: dict[str, str] = {}
    taken = _round(tmp_path, recorded)
    assert taken.groups == {"g2": {("u", 0): 30}} and set(taken.ends) == {("u", 0)}
    assert taken.other_incarnations == {"t": ("t-old", "t-new")}
    assert recorded == {"t": "t-old"}  # read once, kept by the caller for the next rounds


def test_a_topic_recreated_during_the_round_waits_for_the_next_one(cluster: dict[str, Any], tmp_path: Path) -> None:
    cluster["ids"] = [{"t": "t-old", "u": "u-1"}, {"t": "t-new", "u": "u-1"}]
    taken = _round(tmp_path)
    assert taken.groups == {"g2": {("u", 0): 30}} and set(taken.ends) == {("u", 0)}
    # Created during the round (no id before): the commits read are of the incarnation there after.
    cluster["ids"] = [{"u": "u-1"}, {"t": "t-new", "u": "u-1"}]
    cluster["asked"] = 0
    assert set(_round(tmp_path).ends) == set(KEYS)
