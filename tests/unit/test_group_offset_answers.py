"""A consumer group offset commit answers per partition: an error there is not raised by the client, so the restore
reads each (spark_kafka_backup.restore.group_offsets). Stand-ins for the admin client's answers (pure logic)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.restore import group_offsets


class Admin:
    """Answers each commit with the next of ``errors`` for partition 0 (``None``: committed)."""

    def __init__(self, errors: list[Any]) -> None:
        self.errors = errors
        self.commits = 0

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
        return {g: SimpleNamespace(result=lambda timeout: SimpleNamespace(members=[])) for g in groups}

    def alter_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Any]:
        error = self.errors[min(self.commits, len(self.errors) - 1)]
        self.commits += 1
        partitions = [SimpleNamespace(topic="orders", partition=0, error=error)]
        answer = SimpleNamespace(topic_partitions=partitions)
        return {"readers": SimpleNamespace(result=lambda timeout: answer)}


class Error:
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name


@pytest.fixture(autouse=True)
def no_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_offsets, "_current", lambda client, group, offsets: {})
    monkeypatch.setattr("spark_kafka_backup.restore.group_offsets.time.sleep", lambda seconds: None)


def test_a_partition_the_coordinator_does_not_know_yet_is_committed_again_then_reported_committed() -> None:
    admin = Admin([Error("UNKNOWN_TOPIC_OR_PART"), None])
    decisions = group_offsets.commit_group_offsets(admin, {}, {"readers": {("orders", 0): 50}}, force=False)
    assert admin.commits == 2 and decisions[0].committed == {("orders", 0): 50}


def test_a_partition_refused_is_an_error_naming_it_never_reported_committed() -> None:
    admin = Admin([Error("GROUP_AUTHORIZATION_FAILED")])
    with pytest.raises(ClusterError, match="cannot commit offsets for group 'readers': orders partition 0: "
                                           "GROUP_AUTHORIZATION_FAILED"):  # fmt: skip
        group_offsets.commit_group_offsets(admin, {}, {"readers": {("orders", 0): 50}}, force=False)
    assert admin.commits == 1
