"""Consumer group offsets read in a child process: a crash of the Kafka client there is one transient failure of the
round, not the end of the job (spark_kafka_backup/kafka/isolated_groups.py). Real child processes; no broker."""

from __future__ import annotations

import sys

import pytest

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.isolated_groups import IsolatedGroupOffsets

ANSWERING = (
    "import sys\n"
    "from spark_kafka_backup.kafka.isolated_groups import _receive, _send\n"
    "_receive(sys.stdin.buffer)\n"
    "while True:\n"
    "    _receive(sys.stdin.buffer)\n"
    "    _send(sys.stdout.buffer, ('ok', ({'g': {('t', 0): 5}}, True)))\n"
)


def test_answers_come_back_from_one_child() -> None:
    reader = IsolatedGroupOffsets({"bootstrap.servers": "k:9092"}, command=[sys.executable, "-c", ANSWERING])
    try:
        assert reader(timeout=1) == ({"g": {("t", 0): 5}}, True)
        assert reader(timeout=1) == ({"g": {("t", 0): 5}}, True)
        assert reader.children_started == 1
    finally:
        reader.close()


def test_a_child_that_crashes_is_a_transient_failure_and_the_next_call_starts_another() -> None:
    # As librdkafka's failed assertion does (issue #3663): abort() in the middle of a request.
    crashing = [sys.executable, "-c", "import os, sys\nsys.stdin.buffer.read(4)\nos.abort()"]
    reader = IsolatedGroupOffsets({"bootstrap.servers": "k:9092"}, command=crashing)
    for started in (1, 2):
        with pytest.raises(ClusterError, match="died of SIGABRT; asked again with a new one") as raised:
            reader(timeout=1)
        assert raised.value.transient
        assert reader.children_started == started
    reader.close()


def test_the_real_child_answers_for_a_cluster_that_does_not_answer_and_lives_on() -> None:
    """The child as the backup runs it (``python -m spark_kafka_backup.kafka.isolated_groups``): a listing no node
    answered is incomplete, never "no groups" (the round then deletes nothing with --prune-groups)."""
    reader = IsolatedGroupOffsets({"bootstrap.servers": "127.0.0.1:1", "log_level": "0"})
    try:
        assert reader(timeout=1) == ({}, False)
        assert reader(timeout=1) == ({}, False)
        assert reader.children_started == 1
    finally:
        reader.close()
