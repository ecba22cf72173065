"""A standby fed by the backup (``restore --follow`` and ``--failover``, docs/standby.md) on two Apache Kafka clusters:
the source (the suite's broker) and the standby (the restore target)."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import (
    commit_offsets,
    consume_all,
    create_topics,
    kill_job,
    run_backup,
    run_kbackup,
    start_backup,
    stop_driver,
)
from tests.live_load import Producer, client_args, wait_for
from tests.restore_helpers import Target, check_groups, comparable, group_offsets, run_restore, start_restore
from tests.s3_server import S3Server


def produce(kafka: BrokerUnderTest, topic: str, partitions: int, first: int, last: int) -> None:
    """Records ``first``..``last - 1``: keys (some missing), values, headers (some repeated, some without value)."""
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true", "linger.ms": "5"}))
    for i in range(first, last):
        producer.produce(
            topic,
            key=None if i % 9 == 0 else f"k{i}".encode(),
            value=f"value-{i}".encode() * (1 + i % 4),
            headers=[("n", str(i).encode()), ("n", None)] if i % 5 == 0 else None,
            partition=i % partitions,
        )
    assert producer.flush(60) == 0


def snapshot(kafka: BrokerUnderTest, tmp_path: Path, backup: Path, topic: str) -> None:
    result = run_backup(*client_args(kafka, tmp_path), "--target-dir", str(backup), "--topics", topic, "--snapshot",
                        "--max-segment-size", "4096")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def follower_args(target: Target, tmp_path: Path, backup: Path, topic: str) -> list[str]:
    return [*target.args(tmp_path), "--source-dir", str(backup), "--topic-map", f"{topic}={target.name(topic)}",
            "--follow", "--follow-interval", "1"]  # fmt: skip


def frozen_standby(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path, topic: str, records: int
) -> tuple[str, Path, list[str]]:
    """A one-partition ``topic`` of ``records`` records, a snapshot (checkpoint 1), and a follower frozen at it: the
    standby's topic, the backup, and the follower's arguments."""
    create_topics(kafka, {topic: 1})
    backup = tmp_path / "backup"
    produce(kafka, topic, 1, 0, records)
    snapshot(kafka, tmp_path, backup, topic)
    args = follower_args(target, tmp_path, backup, topic)
    assert run_restore(*args, "--until", "1").returncode == 0
    return target.name(topic), backup, args


def output(result: object) -> str:
    return str(getattr(result, "stdout", "")) + str(getattr(result, "stderr", ""))


def gauge(metrics: Path, name: str, label: str = "", *, missing: float | None = None) -> float:
    """The value of the one series of ``name`` (with ``label`` among its labels) in a Prometheus text file;
    ``missing`` when given and the file or the series is not there (yet)."""
    text = metrics.read_text() if metrics.exists() or missing is None else ""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") and label in line]  # fmt: skip
    if not values and missing is not None:
        return missing
    assert len(values) == 1, (name, label, metrics.read_text())
    return values[0]


def test_a_follower_frozen_at_a_checkpoint_holds_exactly_its_cut_goes_on_to_a_later_one_and_never_back(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    topic = "standby-freeze"
    standby = target.name(topic)
    create_topics(kafka, {topic: 2})
    backup = tmp_path / "backup"
    produce(kafka, topic, 2, 0, 400)
    commit_offsets(kafka, "freeze-readers", {(topic, 0): 51, (topic, 1): 150})
    snapshot(kafka, tmp_path, backup, topic)  # checkpoint 1
    at_first = consume_all(kafka, [topic])
    produce(kafka, topic, 2, 400, 900)
    commit_offsets(kafka, "freeze-readers", {(topic, 0): 300, (topic, 1): 449})
    snapshot(kafka, tmp_path, backup, topic)  # checkpoint 2
    listed = run_kbackup("checkpoint", "list", backup)
    assert [line.split("\t")[::2] for line in listed.stdout.splitlines()] == [["1", "completed"], ["2", "completed"]]

    metrics = tmp_path / "standby.prom"
    frozen = run_restore(*follower_args(target, tmp_path, backup, topic), "--until", "1", "--metrics-file", metrics)
    assert frozen.returncode == 0, output(frozen)[-4000:]
    assert "frozen at checkpoint 1" in output(frozen)
    # By the backup's offset rounds: the groups as of checkpoint 1's, and checkpoint 2's rounds not covered.
    assert re.search(r"groups as of the backup's offset round of \S+ \(\d+ s ago; [12] newer rounds? not yet covered\)",
                     output(frozen)), output(frozen)[-4000:]  # fmt: skip
    assert 1 <= gauge(metrics, "kbackup_standby_rounds_behind") <= 2
    # checkpoint 1 holds offsets 0..199 of each partition; the group had read to 300 by checkpoint 2
    assert gauge(metrics, "kbackup_standby_records_behind_round", 'partition="0"') == 300 - 200
    assert gauge(metrics, "kbackup_standby_round_seconds_behind") > 0
    restored = consume_all(target.broker, [standby])
    assert comparable(restored) == comparable(at_first)  # exactly the cut: nothing of checkpoint 2
    check_groups(target, standby, at_first, restored, {"freeze-readers": {0: 51, 1: 150}})

    # The same follower, told to go on to checkpoint 2: the rest, once, and the groups as of that cut.
    later = run_restore(*follower_args(target, tmp_path, backup, topic), "--until", "2", "--metrics-file", metrics)
    assert later.returncode == 0, output(later)[-4000:]
    assert gauge(metrics, "kbackup_standby_rounds_behind") == 0
    assert gauge(metrics, "kbackup_standby_records_behind_round", 'partition="1"') == 0
    everything = consume_all(kafka, [topic])
    restored = consume_all(target.broker, [standby])
    assert comparable(restored) == comparable(everything)
    check_groups(target, standby, everything, restored, {"freeze-readers": {0: 300, 1: 449}})

    # Back to checkpoint 1: the standby holds records past its cut, which cannot be taken back.
    back = run_restore(*follower_args(target, tmp_path, backup, topic), "--until", "1")
    assert back.returncode == 1, output(back)[-4000:]
    assert "already holds records past checkpoint 1's cut" in output(back)
    assert "Traceback" not in output(back)
    assert comparable(consume_all(target.broker, [standby])) == comparable(everything)
    assert group_offsets(target.broker, "freeze-readers")  # still placed
    # Looking for a failover mark at every pass and in every task created no topic for it (only --failover does).
    from confluent_kafka.admin import AdminClient

    assert "kbackup-standby" not in AdminClient(target.broker.client_settings()).list_topics(timeout=30).topics


def segment_spans(backup: Path, topic: str) -> list[tuple[int, int]]:
    from spark_kafka_backup.partition.reader import PartitionReader

    return [(s.first_offset, s.last_offset) for s in PartitionReader(backup / topic, 0).summaries()
            if s.first_offset is not None and s.last_offset is not None]  # fmt: skip


@pytest.mark.long
def test_prune_keeps_what_a_follower_has_not_restored_and_a_lapsed_hold_stops_the_follower_naming_the_gap(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    topic = "standby-prune"
    standby = target.name(topic)
    create_topics(kafka, {topic: 1})
    backup = tmp_path / "backup"
    produce(kafka, topic, 1, 0, 300)
    commit_offsets(kafka, "prune-readers", {(topic, 0): 250})
    snapshot(kafka, tmp_path, backup, topic)  # checkpoint 1: offsets 0..299
    args = [*follower_args(target, tmp_path, backup, topic), "--follower-name", "east"]
    assert run_restore(*args, "--until", "1").returncode == 0
    produce(kafka, topic, 1, 300, 900)
    snapshot(kafka, tmp_path, backup, topic)  # checkpoint 2: 0..899, of which the standby holds 0..299

    pruned = run_kbackup("prune", backup, "--keep-checkpoints", "1")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert "kept for follower east" in pruned.stdout, pruned.stdout
    spans = segment_spans(backup, topic)
    assert spans[0][0] <= 250 <= spans[0][1], spans  # from the group's record on (the follower's is after it)
    assert spans[0][0] > 0, spans  # and only that: what both have had went

    # The follower goes on exactly, the group placed again at its record (restored before the prune: counted back
    # from the standby's end); its hold now lapses after a second without a pass.
    went_on = run_restore(*args, "--until", "2", "--hold-expires", "1")
    assert went_on.returncode == 0, output(went_on)[-4000:]
    everything = consume_all(kafka, [topic])
    restored = consume_all(target.broker, [standby])
    assert comparable(restored) == comparable(everything)
    check_groups(target, standby, everything, restored, {"prune-readers": {0: 250}})

    produce(kafka, topic, 1, 900, 1500)
    commit_offsets(kafka, "prune-readers", {(topic, 0): 1400})
    snapshot(kafka, tmp_path, backup, topic)  # checkpoint 3
    time.sleep(1.5)
    lapsed = run_kbackup("prune", backup, "--keep-checkpoints", "1")
    assert lapsed.returncode == 0, lapsed.stdout + lapsed.stderr
    assert "not kept for follower east" in lapsed.stdout and "its hold expired" in lapsed.stdout, lapsed.stdout
    first_held = segment_spans(backup, topic)[0][0]
    assert first_held > 900, first_held

    gap = run_restore(*args, "--until", "3")
    assert gap.returncode == 1, output(gap)[-4000:]
    assert f"{topic}/0: source offsets 900..{first_held - 1}" in output(gap), output(gap)[-3000:]
    assert "The standby misses them; following stopped" in output(gap)
    assert "Traceback" not in output(gap)
    assert comparable(consume_all(target.broker, [standby])) == comparable(everything)  # nothing produced after it


class TransactionalWriter(threading.Thread):
    """Transactions into ``topic`` until stopped: every third one aborted (its records never reach a reader)."""

    def __init__(self, kafka: BrokerUnderTest, topic: str) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic = kafka, topic
        self.committed = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self.kafka.client_settings(**{"transactional.id": f"standby-test-{self.topic}"}))
        producer.init_transactions(60)
        round_ = 0
        while not self._stop_event.is_set():
            producer.begin_transaction()
            for i in range(10):
                producer.produce(self.topic, key=f"t{round_}".encode(), value=f"tx-{round_}-{i}".encode(),
                                 headers=[("round", str(round_).encode())])  # fmt: skip
            if round_ % 3 == 2:
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
                self.committed += 10
            round_ += 1
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(120)
        assert not self.is_alive()


class LagSampler(threading.Thread):
    """Reads the standby as a consumer would and notes, for each record as it arrives, how long after its source
    timestamp that was: the standby's lag behind the source, end to end (backup interval + follower interval + work)."""

    def __init__(self, broker: BrokerUnderTest, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.broker, self.topics = broker, topics
        self.lags: list[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.broker.client_settings())
        consumer = Consumer(self.broker.client_settings(**{"group.id": "standby-lag-sampler",
                                                           "isolation.level": "read_committed",
                                                           "enable.auto.commit": "false"}))  # fmt: skip
        assigned: set[tuple[str, int]] = set()
        listed = 0.0
        while not self._stop_event.is_set():
            if time.monotonic() - listed > 2:
                listed = time.monotonic()
                try:
                    topics = admin.list_topics(timeout=10).topics
                except KafkaException:
                    continue  # the standby busy: next time
                found = {(t, p) for t in self.topics if t in topics for p in topics[t].partitions}
                if found - assigned:
                    assigned |= found
                    consumer.assign([TopicPartition(t, p, 0) for t, p in sorted(assigned)])
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                self.lags.append(time.time() - message.timestamp()[1] / 1000)
        consumer.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)


def first_pass_after(log: Path, seen: int) -> Callable[[], bool]:
    """A condition: the log shows more follower starts' first passes than ``seen``."""
    return lambda: log.read_text(errors="replace").count("pass 1:") > seen


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@pytest.mark.long
def test_a_standby_follows_a_live_backup_through_kills_and_fails_over_with_every_record_once_and_groups_placed(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    topics = ["sb-orders", "sb-tx", "sb-late"]
    standby = {topic: target.name(topic) for topic in topics}
    create_topics(kafka, {"sb-orders": 2, "sb-tx": 1})
    backup = tmp_path / "backup"
    backup_log, follower_log = tmp_path / "backup.log", tmp_path / "follower.log"
    backup_args = [*client_args(kafka, tmp_path), "--target-dir", str(backup), "--topics-regex", "sb-.*",
                   "--trigger-interval", "1", "--offsets-interval", "2", "--max-segment-size", "16384"]  # fmt: skip
    follow = [*target.args(tmp_path), "--source-dir", str(backup), "--follow-interval", "2",
              *(f"--topic-map={t}={standby[t]}" for t in topics)]  # fmt: skip
    orders = Producer(kafka, "sb-orders", 2, rate=150)
    transactions = TransactionalWriter(kafka, "sb-tx")
    sampler = LagSampler(target.broker, list(standby.values()))
    rng = random.Random(53)
    backup_job = start_backup(*backup_args, log=backup_log)
    metrics = tmp_path / "follower.prom"
    follower = start_restore(*follow, "--follow", "--metrics-file", metrics, log=follower_log)
    jobs = [backup_job, follower]
    late_sent = 0
    try:
        orders.start()
        transactions.start()
        sampler.start()
        wait_for(lambda: re.search(r"pass \d+: [1-9]", follower_log.read_text(errors="replace")), 300,
                 "a pass that produced records", job=follower, log=follower_log)  # fmt: skip
        time.sleep(20)  # following undisturbed: the steady lag
        steady = len(sampler.lags)
        for kill in range(3):
            time.sleep(rng.uniform(1, 6))  # mid-pass or between passes
            assert follower.poll() is None, follower_log.read_text()[-4000:]
            kill_job(follower)
            if kill == 0:  # the source changes while the follower is down: a new topic, a partition added
                create_topics(kafka, {"sb-late": 2})
                produce(kafka, "sb-late", 2, 0, 200)
                late_sent = 200
                admin = AdminClient(kafka.client_settings())  # kept: a dropped client cancels its requests
                admin.create_partitions([NewPartitions("sb-orders", 3)])["sb-orders"].result(60)
                produce(kafka, "sb-orders", 3, 0, 3 * 40)  # partition 2 gets 40 of these
            if kill == 1:  # and the backup dies once too
                kill_job(backup_job)
                backup_job = start_backup(*backup_args, log=backup_log)
                jobs.append(backup_job)
            first_passes = follower_log.read_text(errors="replace").count("pass 1:")
            follower = start_restore(*follow, "--follow", "--metrics-file", metrics, log=follower_log)
            jobs.append(follower)
            wait_for(first_pass_after(follower_log, first_passes), 300, "the restarted follower's first pass",
                     job=follower, log=follower_log)  # fmt: skip
        produce(kafka, "sb-late", 2, 200, 400)
        late_sent = 400
    finally:
        orders.stop()
        transactions.stop()
    source = consume_all(kafka, topics)
    assert len([r for r in source if r["topic"] == "sb-tx"]) == transactions.committed
    assert len([r for r in source if r["topic"] == "sb-late"]) == late_sent
    ends = {(r["topic"], r["partition"]): r["offset"] + 1 for r in source}
    # Where the application's consumers stand when the source is lost: mid-partition, at the end, and inside sb-tx's
    # aborted transactions (an offset no committed record has).
    placed = {key: (end if key[1] == 0 else max(0, end - 7)) for key, end in ends.items()}
    commit_offsets(kafka, "sb-app", placed)
    groups = {topic: {p: o for (t, p), o in placed.items() if t == topic} for topic in topics}

    def standby_holds_all() -> bool:
        restored = consume_all(target.broker, list(standby.values()), timeout=30)
        return all(comparable(restored, topic=standby[t]) == comparable(source, topic=t) for t in topics)

    wait_for(standby_holds_all, 300, "the standby to hold every record", job=follower, log=follower_log)
    time.sleep(6)  # an offset round after the group's commit (2 s), then a pass that places it (2 s)
    wait_for(lambda: len(group_offsets(target.broker, "sb-app")) == len(placed), 120, "the group on the standby",
             job=follower, log=follower_log)  # fmt: skip
    # The backup's offset rounds (every 2 s, since sb-app exists) are covered as the passes go (a stalled follower's
    # figure would grow without end).
    wait_for(lambda: gauge(metrics, "kbackup_standby_round_seconds_behind", missing=float("inf")) < 60, 120,
             "the standby to cover a recent offset round", job=follower, log=follower_log)  # fmt: skip
    sampler.stop()
    assert stop_driver(follower, follower_log) == 0, follower_log.read_text()[-4000:]
    assert "following stopped by SIGTERM" in follower_log.read_text()
    assert stop_driver(backup_job, backup_log) == 0, backup_log.read_text()[-3000:]
    for job in jobs:
        kill_job(job)

    failover = run_restore(*follow, "--failover")
    assert failover.returncode == 0, output(failover)[-4000:]
    for topic in topics:
        for partition in sorted(p for t, p in ends if t == topic):
            last = ends[(topic, partition)] - 1
            line = f"{topic}/{partition} -> {standby[topic]}/{partition}: holds source offsets up to {last}"
            assert line in output(failover), output(failover)[-4000:]
    assert "past them" not in output(failover)  # nothing of the backup is missing from the standby
    again = run_restore(*follow, "--failover")
    assert again.returncode == 0, output(again)[-3000:]
    assert "was already failed over" in output(again)
    refused = run_restore(*follow, "--follow")
    assert refused.returncode == 1 and "was failed over at" in output(refused), output(refused)[-3000:]

    restored = consume_all(target.broker, list(standby.values()))
    for topic in topics:
        assert comparable(restored, topic=standby[topic]) == comparable(source, topic=topic), topic
        mine = [r for r in source if r["topic"] == topic]
        theirs = [r for r in restored if r["topic"] == standby[topic]]
        check_groups(target, standby[topic], mine, theirs, {"sb-app": groups[topic]})
    for log in (follower_log, backup_log):
        assert "Traceback" not in log.read_text(errors="replace"), log.read_text()[-4000:]
    lags = sampler.lags
    assert lags and steady
    calm = lags[:steady]
    figure = (f"standby lag behind the source, following undisturbed, over {steady} records: p50 "
              f"{percentile(calm, 0.5):.1f} s, p99 {percentile(calm, 0.99):.1f} s; over the whole run, "
              f"{len(lags)} records: p50 {percentile(lags, 0.5):.1f} s, p99 {percentile(lags, 0.99):.1f} s, max "
              f"{max(lags):.1f} s ({kafka.description} for each cluster, Spark local[2], backup trigger 1 s, follower "
              "interval 2 s, three follower kills and one backup kill)")  # fmt: skip
    print(figure)
    (tmp_path / "standby-lag.txt").write_text(figure + "\n")


@pytest.mark.long
def test_an_erase_beside_a_follower_never_reaches_the_standby_later_and_a_failover_stops_a_running_follower(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    topic = "standby-erase"
    standby, backup, args = frozen_standby(kafka, target, tmp_path, topic, 200)  # the standby holds offsets 0..199
    produce(kafka, topic, 1, 200, 400)
    snapshot(kafka, tmp_path, backup, topic)

    restored_already = run_kbackup("erase", backup, "--topic", topic, "--key", "k5")
    assert restored_already.returncode == 0, restored_already.stdout + restored_already.stderr
    assert f"had restored erased records of {topic}/0 (offsets 5..5) to its standby" in restored_already.stdout
    not_yet = run_kbackup("erase", backup, "--topic", topic, "--key", "k305")
    assert not_yet.returncode == 0 and "had restored" not in not_yet.stdout, not_yet.stdout + not_yet.stderr

    log = tmp_path / "follower.log"
    follower = start_restore(*args, log=log)
    try:
        wait_for(lambda: len(consume_all(target.broker, [standby], timeout=30)) == 399, 300,
                 "the standby to hold the rest", job=follower, log=log)  # fmt: skip
        failover = run_restore(*args[:-3], "--failover")  # the same options, without --follow
        assert failover.returncode == 0, output(failover)[-3000:]
        assert f"{topic}/0 -> {standby}/0: holds source offsets up to 399; the backup holds no more" in output(failover)
        assert follower.wait(120) == 0, log.read_text()[-3000:]
    finally:
        kill_job(follower)
    assert "the standby was failed over at" in log.read_text() and "following stopped" in log.read_text()
    source = consume_all(kafka, [topic])
    expected = [r for r in source if r["offset"] != 305]  # erased before the follower reached it; 5 was not
    assert comparable(consume_all(target.broker, [standby])) == comparable(expected)


@pytest.mark.long
def test_a_follower_started_again_refuses_a_standby_someone_wrote_into_meanwhile_and_produces_nothing(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = "standby-written"
    standby, backup, args = frozen_standby(kafka, target, tmp_path, topic, 100)
    produce(kafka, topic, 1, 100, 200)
    snapshot(kafka, tmp_path, backup, topic)
    # While the follower is stopped, an application writes into the standby (as if it had been failed over by hand).
    stray = Producer(target.broker.client_settings())
    stray.produce(standby, key=b"stray", value=b"written on the standby", partition=0)
    assert stray.flush(30) == 0
    before = consume_all(target.broker, [standby])

    refused = run_restore(*args, "--until", "2")
    assert refused.returncode == 1, output(refused)[-3000:]
    assert "already hold records that are not an earlier run of this restore" in output(refused), output(refused)
    assert f"{standby}/0" in output(refused) and "Traceback" not in output(refused)
    # The way on for a standby: a new one (records written there stay: Kafka deletes only from a partition's head).
    assert "a standby holds the backup's records alone: follow into a new standby" in output(refused), output(refused)
    assert "restore into empty partitions" not in output(refused)
    assert consume_all(target.broker, [standby]) == before  # nothing produced after the stranger's record


def highest_pass(log: Path) -> int:
    return max((int(n) for n in re.findall(r"pass (\d+):", log.read_text(errors="replace"))), default=0)


@pytest.mark.long
def test_a_follower_of_a_backup_on_an_object_store_freezes_follows_and_asks_little_of_the_store_when_idle(
    kafka: BrokerUnderTest, target: Target, s3: S3Server, tmp_path: Path
) -> None:
    topic = "standby-s3"
    standby = target.name(topic)
    create_topics(kafka, {topic: 2})
    root = f"s3://{s3.new_bucket()}/kafka/prod"

    def snapshot_to_store(state: str) -> None:
        result = run_backup(*client_args(kafka, tmp_path), "--target-dir", root, "--topics", topic, "--snapshot",
                            "--max-segment-size", "4096", "--checkpoint-location", tmp_path / state)  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    produce(kafka, topic, 2, 0, 300)
    commit_offsets(kafka, "s3-readers", {(topic, 0): 40, (topic, 1): 150})
    snapshot_to_store("spark-1")  # checkpoint 1
    at_first = consume_all(kafka, [topic])
    produce(kafka, topic, 2, 300, 700)
    commit_offsets(kafka, "s3-readers", {(topic, 0): 250, (topic, 1): 349})
    snapshot_to_store("spark-2")  # checkpoint 2
    everything = consume_all(kafka, [topic])

    follow = [*target.args(tmp_path), "--source-dir", root, "--topic-map", f"{topic}={standby}", "--follow",
              "--follow-interval", "1"]  # fmt: skip
    frozen = run_restore(*follow, "--until", "1")
    assert frozen.returncode == 0, output(frozen)[-4000:]
    restored = consume_all(target.broker, [standby])
    assert comparable(restored) == comparable(at_first)
    check_groups(target, standby, at_first, restored, {"s3-readers": {0: 40, 1: 150}})

    # Following on, unbounded: the rest, the groups as of the newest round; then idle passes, counted in requests.
    metrics, log = tmp_path / "follower.prom", tmp_path / "follower.log"
    follower = start_restore(*follow, "--metrics-file", metrics, log=log)
    try:
        wait_for(lambda: comparable(consume_all(target.broker, [standby], timeout=20)) == comparable(everything),
                 300, "the standby to hold every record", job=follower, log=log)  # fmt: skip
        wait_for(lambda: gauge(metrics, "kbackup_standby_rounds_behind", missing=1) == 0, 120,
                 "the standby to cover the newest offset round", job=follower, log=log)  # fmt: skip
        first_pass, first_request = highest_pass(log), s3.requests()
        time.sleep(20)
        last_pass, last_request = highest_pass(log), s3.requests()
    finally:
        assert stop_driver(follower, log) == 0, log.read_text()[-4000:]
    restored = consume_all(target.broker, [standby])
    assert comparable(restored) == comparable(everything)
    check_groups(target, standby, everything, restored, {"s3-readers": {0: 250, 1: 349}})
    assert "Traceback" not in log.read_text(errors="replace")
    assert last_pass > first_pass, log.read_text()[-3000:]
    if first_request is not None and last_request is not None:  # moto's log tells them; another server's may not
        idle = last_request[len(first_request) :]
        passes = last_pass - first_pass
        print(f"\nFIGURE idle passes of a follower of 1 topic x 2 partitions on S3 (moto): {len(idle) / passes:.1f} "
              f"requests each ({passes} passes)")  # fmt: skip
        # A pass with nothing to restore reads the catalogs, partition indexes, offsets and its hold: no segment
        # (each partition has several here; a pass that counted from the backup's first record opened them all).
        assert not [request for request in idle if "segment_partition_" in request], idle
