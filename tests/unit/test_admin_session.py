"""Asking a cluster that lost a node: new clients, outage lines, the offset rounds' thread (pure logic).

The cluster is a stand-in here; the same paths run against a 3-node Apache Kafka cluster with nodes killed in
``tests/test_broker_failures.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_kafka_backup.backup import cluster_watch, group_offsets
from spark_kafka_backup.backup.cluster_watch import ClusterWatch
from spark_kafka_backup.backup.group_offsets import OffsetRound
from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka import admin_session, cluster
from spark_kafka_backup.kafka.admin_session import AdminSession
from spark_kafka_backup.kafka.cluster import list_offsets, topic_configs
from spark_kafka_backup.kafka.outage import OutageReport
from spark_kafka_backup.kafka.topics import TopicSelection

TRANSIENT = ClusterError("cannot read the cluster id: Timed out waiting for controller", transient=True)
REFUSED = ClusterError("cannot list topics: Broker: Cluster authorization failed")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def session(clock: Clock, **kwargs: Any) -> AdminSession:
    counter = iter(range(1, 1000))
    return AdminSession(
        {"bootstrap.servers": "k:9092"},
        factory=lambda settings: f"client-{next(counter)}",
        clock=clock,
        sleep=clock.sleep,
        **kwargs,
    )


def test_a_transient_failure_is_asked_again_with_a_new_client() -> None:
    clock = Clock()
    used: list[tuple[str, float]] = []

    def request(client: str, timeout: float) -> str:
        used.append((client, timeout))
        clock.now += timeout  # each failing attempt waits its whole timeout, as a stale client does
        if len(used) < 3:
            raise TRANSIENT
        return f"answer from {client}"

    asking = session(clock, attempt_timeout=4, patience=20)
    assert asking.call(request) == "answer from client-3"
    assert used == [("client-1", 4), ("client-2", 4), ("client-3", 4)]
    assert asking.clients_made == 3
    assert asking.call(lambda client, timeout: client) == "client-3"  # a client that answers is kept


def test_a_replaced_client_is_kept_until_nothing_of_it_can_be_under_way() -> None:
    """Destroying a client while librdkafka still holds one of its requests can crash the process: a replaced client
    is dropped only after RETIRE_SECONDS, at a later renewal on the session's thread."""
    clock = Clock()
    asking = session(clock)
    first = asking.client
    asking.renew()
    assert asking.retired == 1 and asking.client != first
    clock.now += admin_session.RETIRE_SECONDS / 2
    asking.renew()
    assert asking.retired == 2  # the first may still have a request under way
    assert asking.client
    clock.now += admin_session.RETIRE_SECONDS / 2
    asking.renew()
    assert asking.retired == 2  # the first goes; the second and third stay
    assert asking.client
    clock.now += admin_session.RETIRE_SECONDS
    asking.renew()
    assert asking.retired == 1 and asking.clients_made == 4


def test_a_refusal_is_raised_at_once_and_patience_ends_with_the_last_error() -> None:
    clock = Clock()
    calls = 0

    def refused(client: str, timeout: float) -> str:
        nonlocal calls
        calls += 1
        raise REFUSED

    with pytest.raises(ClusterError, match="authorization failed"):
        session(clock).call(refused)
    assert calls == 1

    def down(client: str, timeout: float) -> str:
        nonlocal calls
        calls += 1
        clock.now += timeout
        raise TRANSIENT

    calls = 0
    started = clock.now
    with pytest.raises(ClusterError, match="waiting for controller") as raised:
        session(clock, attempt_timeout=10, patience=25).call(down)
    assert raised.value.transient
    assert calls == 3 and clock.now - started < 25 + 10 + 1  # never an attempt begun after the patience

    calls = 0
    with pytest.raises(ClusterError):
        session(clock).call(down, patience=0)
    assert calls == 1


class Futures:
    """An admin client whose DescribeConfigs answers with futures that never resolve."""

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
        return {resource: Future() for resource in resources}


def test_a_request_that_gets_no_answer_in_time_is_transient() -> None:
    with pytest.raises(ClusterError, match=r"configuration of topic\(s\) orders: no answer in time") as raised:
        topic_configs(Futures(), ["orders"], timeout=0.01)
    assert raised.value.transient


def test_a_topic_deleted_after_the_listing_is_left_out_of_the_configurations() -> None:
    """Seen in the soak benchmark: a topic deleted between listing and DescribeConfigs failed the whole backup."""

    class Deleting:
        def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
            answers: dict[Any, Future[Any]] = {}
            for resource in resources:
                answers[resource] = Future()
                if resource.name == "gone":
                    answers[resource].set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
                else:
                    answers[resource].set_result({})
            return answers

    assert topic_configs(Deleting(), ["orders", "gone"]) == {"orders": {}}


def test_an_outage_is_one_line_then_one_a_minute_and_its_end_one_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("spark_kafka_backup.test-outage")
    report = OutageReport(logger, every=60, clock=clock)
    with caplog.at_level(logging.INFO, logger=logger.name):
        report.answered()  # nothing to end
        for _ in range(10):  # ten failures 10 s apart: lines at 0 and 60 s
            assert report.failed(clock.now, TRANSIENT, "rounds wait") == pytest.approx(clock.now - 100)
            clock.now += 10
        report.answered()
        report.answered()
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f"source cluster not answering for 0 s ({TRANSIENT}); rounds wait",
        f"source cluster not answering for 60 s ({TRANSIENT}); rounds wait",
        "source cluster answers again after 100 s",
    ]
    assert not report.ongoing


class ScriptedSession:
    """An AdminSession stand-in: each call takes the next answer (an OffsetRound or an error)."""

    attempt_timeout = 0.1

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers

    def call(self, request: Any, *, patience: float | None = None) -> Any:
        if getattr(request, "__name__", "") == "prepare":
            return 0, []  # new partitions' files: none to make here, none settled (asked about again)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def watch(tmp_path: Path, answers: list[Any], interval: float = 60, **extra: Any) -> ClusterWatch:
    return ClusterWatch(
        tmp_path,
        TopicSelection.from_list("orders"),
        ScriptedSession(answers),  # type: ignore[arg-type]
        servers="k:9092",
        interval=interval,
        seen_checkpoint=0,
        topics_recorded_at=time.monotonic(),
        **extra,
    )


def a_round(end: int) -> OffsetRound:
    return OffsetRound({"readers": {("orders", 0): end - 1}}, {("orders", 0): end}, time.time())


class Lines(logging.Handler):
    """The messages a logger emitted (whether or not "spark-kafka-backup" propagates, which depends on earlier
    tests)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_the_watch_hands_over_rounds_and_cuts_and_goes_on_through_an_outage(tmp_path: Path) -> None:
    requested = checkpoints.request(tmp_path)
    rounds = watch(tmp_path, [TRANSIENT, TRANSIENT, a_round(5), a_round(7), a_round(9)])
    logger = logging.getLogger("spark_kafka_backup.backup")
    lines = Lines()
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        rounds.ask_once()
        rounds.ask_once()
        assert rounds.collect().rounds == []  # missing rounds, no failure
        rounds.ask_once()  # a round, then the cut of the waiting request
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    found = rounds.collect()
    assert [r.ends for r in found.rounds] == [{("orders", 0): 5}]
    assert [(c.id, c.status, c.ends) for c in found.cuts] == [(requested.id, "pending", {("orders", 0): 7})]
    assert checkpoints.read_checkpoint(tmp_path, requested.id).status == "pending"
    assert len([m for m in lines.messages if m.startswith("source cluster not answering")]) == 1
    assert len([m for m in lines.messages if m.startswith("source cluster answers again")]) == 1
    rounds.ask_once()  # the request was served: no second cut
    assert [r.ends for r in rounds.collect().rounds] == [{("orders", 0): 9}]
    # Between rounds (every --offsets-interval) only new requests are served: a cut each, no round.
    second = checkpoints.request(tmp_path)
    rounds = watch(tmp_path, [a_round(11)])
    rounds.ask_once(with_round=False)
    found = rounds.collect()
    assert found.rounds == [] and [(c.id, c.ends) for c in found.cuts] == [(second.id, {("orders", 0): 11})]


def test_a_refusal_stops_the_watch_and_is_raised_in_the_jobs_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_session, "RETRY_PAUSE_SECONDS", 0.0)
    rounds = watch(tmp_path, [a_round(3), REFUSED, a_round(4)], interval=0.01)
    rounds.start()
    deadline = time.monotonic() + 10
    collected: list[OffsetRound] = []
    failure: ClusterError | None = None
    while failure is None and time.monotonic() < deadline:
        try:
            collected += rounds.collect().rounds
        except ClusterError as exc:
            failure = exc
        time.sleep(0.01)
    assert failure is not None and "authorization failed" in str(failure)
    # Round 3 may come before the refusal or in the same collect, which raises (the job stops: nothing is lost);
    # nothing the watch would have asked after the refusal ever comes.
    assert [r.ends for r in collected] in ([], [{("orders", 0): 3}])
    rounds.stop()
    assert not any(t.name == "spark-kafka-backup-cluster-watch" and t.is_alive() for t in threading.enumerate())


def test_stop_does_not_wait_for_a_round_stuck_on_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    class Stuck(ScriptedSession):
        def call(self, request: Any, *, patience: float | None = None) -> Any:
            release.wait(30)
            raise TRANSIENT

    stuck = ClusterWatch(
        tmp_path,
        TopicSelection.from_list("orders"),
        Stuck([]),  # type: ignore[arg-type]
        servers="k:9092",
        interval=0.01,
        seen_checkpoint=0,
        topics_recorded_at=time.monotonic(),
    )
    monkeypatch.setattr(cluster_watch, "STOP_GRACE_SECONDS", 0.4)
    stuck.start()
    time.sleep(0.1)
    began = time.monotonic()
    stuck.stop()  # one attempt timeout (0.1 s) and the grace at most
    assert 0.4 <= time.monotonic() - began < 2
    release.set()


class Offsets:
    """An admin client whose ListOffsets answers ``answers.pop(0)`` for partitions 0 and 1 of ``orders``: an offset,
    or an exception the partition's future raises."""

    def __init__(self, answers: list[tuple[int | Exception, int | Exception]]) -> None:
        self.answers = answers

    def list_offsets(self, request: dict[Any, Any], isolation_level: Any, request_timeout: float) -> dict[Any, Any]:
        offsets = self.answers.pop(0)
        futures = {}
        for tp in request:
            future: Future[Any] = Future()
            answer = offsets[tp.partition]
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(type("Info", (), {"offset": answer})())
            futures[tp] = future
        return futures


def unknown_partition() -> Exception:
    from confluent_kafka import KafkaError, KafkaException

    error: Exception = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return error


def test_a_partition_the_answering_broker_does_not_know_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions added a moment ago, on a cluster of several brokers: UNKNOWN_TOPIC_OR_PART from a broker that has
    not learned them is asked again within the retry time; after it, raised as before (a deleted topic says so too)."""
    keys = [("orders", 0), ("orders", 1)]
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 5.0)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    answers = Offsets([(40, unknown_partition()), (41, 17)])
    assert list_offsets(answers, keys, latest=False) == {("orders", 0): 41, ("orders", 1): 17}
    assert answers.answers == []
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 0.0)
    with pytest.raises(ClusterError, match="UNKNOWN_TOPIC_OR_PART") as raised:
        list_offsets(Offsets([(40, unknown_partition())]), keys, latest=False)
    assert not raised.value.transient


def test_planning_leaves_out_a_partition_not_known_yet_but_not_a_topic_that_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = [("orders", 0), ("orders", 1)]
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 0.0)
    assert list_offsets(Offsets([(40, unknown_partition())]), keys, latest=True, partial=True) == {("orders", 0): 40}
    with pytest.raises(ClusterError, match="UNKNOWN_TOPIC_OR_PART") as raised:
        list_offsets(Offsets([(unknown_partition(), unknown_partition())]), keys, latest=True, partial=True)
    assert not raised.value.transient


def test_an_offset_listing_without_an_answer_for_a_partition_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka answers -1001 (no error) for a partition whose leader just died: never taken as an offset."""
    keys = [("orders", 0), ("orders", 1)]
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 0.0)
    with pytest.raises(ClusterError, match=r"no offset for orders/1 \(its leader did not answer\)") as raised:
        list_offsets(Offsets([(40, -1001)]), keys, latest=True)
    assert raised.value.transient
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 5.0)
    answers = Offsets([(40, -1001), (41, 17)])
    assert list_offsets(answers, keys, latest=True) == {("orders", 0): 41, ("orders", 1): 17}


class Counted:
    """ListOffsets answering each partition's number as its offset (-1001, no answer, for those in ``silent``),
    keeping the size of each call."""

    def __init__(self, silent: frozenset[int] = frozenset()) -> None:
        self.sizes: list[int] = []
        self.silent = silent

    def list_offsets(self, request: dict[Any, Any], isolation_level: Any, request_timeout: float) -> dict[Any, Any]:
        self.sizes.append(len(request))
        futures = {}
        for tp in request:
            future: Future[Any] = Future()
            future.set_result(type("Info", (), {"offset": -1001 if tp.partition in self.silent else tp.partition})())
            futures[tp] = future
        return futures


def test_many_partitions_are_asked_in_calls_of_a_bounded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's time grows with the square of one call's partitions (cluster.OFFSETS_PER_CALL): every partition
    is asked once, in calls of at most that many, and answered as from one call."""
    keys = [("orders", partition) for partition in range(1_201)]
    counted = Counted()
    assert list_offsets(counted, keys, latest=True) == {key: key[1] for key in keys}
    assert counted.sizes == [500, 500, 201]
    monkeypatch.setattr(cluster, "OFFSETS_RETRY_SECONDS", 0.0)
    silent = Counted(silent=frozenset({700}))  # in the second call: planning leaves it out, the others are there
    assert list_offsets(silent, keys, latest=True, partial=True) == {key: key[1] for key in keys if key[1] != 700}
    with pytest.raises(ClusterError, match=r"no offset for orders/700 \(its leader did not answer\)"):
        list_offsets(Counted(silent=frozenset({700})), keys, latest=True)


def test_the_watch_reads_group_offsets_through_the_isolated_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offset rounds and checkpoint cuts read groups through the job's child process
    (spark_kafka_backup.kafka.isolated_groups), never with the driver's own client (librdkafka #3663, #5040)."""

    def in_process(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("group offsets read in the driver's process")

    monkeypatch.setattr(group_offsets, "committed_group_offsets", in_process)
    monkeypatch.setattr(group_offsets, "selected_partitions", lambda admin, selection, timeout: [("orders", 0)])
    monkeypatch.setattr(group_offsets, "list_offsets", lambda admin, keys, **kwargs: {("orders", 0): 10})
    monkeypatch.setattr(group_offsets, "topic_ids", lambda admin, topics, timeout: dict.fromkeys(topics, "id-1"))
    asked: list[float] = []

    def reader(*, timeout: float) -> tuple[dict[str, dict[tuple[str, int], int]], bool]:
        asked.append(timeout)
        return {"readers": {("orders", 0): 7}}, True

    taken = watch(tmp_path, [], groups=reader)._take_round(object(), 2.0)
    assert taken.groups == {"readers": {("orders", 0): 7}} and taken.ends == {("orders", 0): 10}
    assert asked == [2.0]
