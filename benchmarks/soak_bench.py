"""A day in the life: a continuous backup through everything a cluster does, measured (``./dev bench soak``).

A 3-node Apache Kafka cluster and a Spark standalone cluster of 2 workers on this machine; a load across dozens of
topics (:mod:`benchmarks.soak.load`), read as it is written by a plain consumer group, the truth the backup is held
to (:mod:`benchmarks.soak.shadow`); a continuous backup with ``--compression zstd`` on the standalone cluster;
meanwhile the events of :mod:`benchmarks.soak.events` in rotation (each at least twice in a run of the default
length); every 10 s the figures of :mod:`benchmarks.soak.samples`. One topic has two replicas (the reassignment
moves them), one is retained by time (its head goes every minute after six). At the end the load stops, the backup
catches up and is stopped as an operator stops it (SIGTERM to its Python driver), then the latest state and every
completed checkpoint are each restored into a fresh Kafka cluster and compared record by record and group by group
(:mod:`benchmarks.soak.compare`). Writes ``samples.csv``, ``native-memory.csv``, ``events.csv``, ``soak.svg``,
``summary.json`` and the jobs' logs into ``--out``.

With ``--standby``, a standby cluster is fed from the live backup meanwhile (:mod:`benchmarks.soak.standby`: a
follower killed now and then), failed over at the end and compared with the source like the latest state's restore;
its lag and exits go into ``summary.json`` under ``standby``.

Not part of CI: a run takes ``--minutes`` plus about 3 minutes of set-up and a few minutes per restore.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import resource
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from benchmarks.soak.chart import render
from benchmarks.soak.compare import GroupOffsets, Restored, compare, group_offsets, read_all
from benchmarks.soak.events import Chaos
from benchmarks.soak.figures import figures
from benchmarks.soak.load import LoadGenerator, LoadShape
from benchmarks.soak.native_memory import TRACKING
from benchmarks.soak.samples import Sampler
from benchmarks.soak.service import BackupService
from benchmarks.soak.shadow import ShadowReader, Truth
from benchmarks.soak.standby import Standby
from devkit.kafka_cluster import KafkaCluster
from devkit.spark_cluster import SparkCluster
from spark_kafka_backup.catalog.checkpoints import Checkpoint, list_checkpoints
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command
from spark_kafka_backup.storage import parse_location

REPLICATED = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # A producer's queued records to a topic just deleted would create it again (another incarnation, which the
    # backup rightly refuses to mix in): topics are created by the soak alone.
    "auto.create.topics.enable": "false",
    "log.retention.check.interval.ms": "20000",
}
#: The topic the reassignment moves, and the one retention by time deletes the head of.
MOVED_TOPIC, RETAINED_TOPIC = "soak-00", "soak-03"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--topics", type=int, default=24)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=400, help="records per second in all, between bursts")
    parser.add_argument("--out", type=Path, default=Path("soak-results"))
    parser.add_argument("--standby", action="store_true",
                        help="also feed a standby cluster from the live backup (restore --follow), fail it over at the "
                        "end and compare it")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kbackup-soak-"))
    backup_dir, log_file, metrics_file = work / "backup", args.out / "backup.log", work / "metrics.json"
    log_file.write_bytes(b"")
    with contextlib.ExitStack() as clusters:
        kafka = clusters.enter_context(KafkaCluster(3, broker_config=REPLICATED))
        spark = clusters.enter_context(SparkCluster(workers=2, cores=1))
        standby_kafka = clusters.enter_context(KafkaCluster(1)) if args.standby else None
        print(f"soak: {kafka.describe()} at {kafka.bootstrap_servers}; {spark.describe()}", flush=True)
        settings = kafka.client_settings()
        topics = [f"soak-{n:02d}" for n in range(args.topics)]
        _create(kafka, topics, args.partitions)
        shadow = ShadowReader(settings)
        shadow.start()
        load = LoadGenerator(settings, topics, LoadShape(rate=args.rate))
        load.start()
        sampler = Sampler(args.out / "samples.csv", driver_pid=0,
                          worker_pids=lambda: [node.process.pid for node in spark.nodes if node.process is not None],
                          metrics_file=metrics_file, backup_dir=backup_dir, log_file=log_file,
                          native_csv=args.out / "native-memory.csv")  # fmt: skip
        backup = BackupService(lambda: _start_backup(kafka, spark, backup_dir, metrics_file, log_file, work),
                               log_file, on_restart=sampler.follow)  # fmt: skip
        sampler.follow(backup.process.pid)
        _wait_first_batch(metrics_file, backup.process, 600)
        backup.start()
        started = backup.began = time.monotonic()
        sampler.start()
        standby = None
        if standby_kafka is not None:
            standby = Standby(standby_kafka.bootstrap_servers, backup_dir, args.out, work,
                              kill_every=max(120.0, args.minutes * 60 / 4))  # fmt: skip
            standby.start()
        chaos = Chaos(kafka, spark, load, backup_dir, metrics_file, args.partitions, moved_topic=MOVED_TOPIC)
        # Every event of the rotation twice in a run (from 20 s apart); checkpoints every 5 minutes, prunes every 10
        # (or 4 and 2 of them in shorter runs).
        every = max(20.0, args.minutes * 60 / (2 * len(chaos.rotation()) + 1))
        checkpoint_every = min(300.0, args.minutes * 15)
        # On this thread: a broker or worker started again by another thread would die with it (the devkit's
        # processes die with the thread that started them).
        stop = threading.Event()
        threading.Timer(args.minutes * 60, stop.set).start()
        chaos.run(stop, every, started, checkpoint_every=checkpoint_every, prune_every=2 * checkpoint_every)
        load.stop()
        caught_up = _wait_caught_up(sampler, 300)
        shadow.quiet_for(20, 300)
        shadow.stop()  # its group's last commit, then it leaves
        _wait_offset_round(metrics_file, after=time.time() + 1, timeout=180)
        source_groups = group_offsets(settings)
        now_held = read_all(settings)
        unseen = _merge_into_truth(shadow.truth, now_held)
        heads = {key: records[0][0] for key, records in now_held.items() if records}
        backup_code = backup.stop(300)
        sampler.stop()
        completed = [c for c in list_checkpoints(parse_location(str(backup_dir))) if c.status == "completed"]
        positions = BackedUpPositions.of(backup_dir, chaos.held_from)
        results = []
        standby_summary: dict[str, object] | None = None
        if standby is not None and standby_kafka is not None:
            standby_summary = _fail_over_and_compare(standby, standby_kafka, shadow.truth, completed, source_groups,
                                                     set(now_held), positions)  # fmt: skip
        for checkpoint in [None, *completed]:
            label = "latest" if checkpoint is None else f"checkpoint {checkpoint.id}"
            with KafkaCluster(1) as target:
                began = time.monotonic()
                code = _restore(target, spark, backup_dir, args.out / f"restore-{label.replace(' ', '-')}.log",
                                checkpoint=None if checkpoint is None else checkpoint.id)  # fmt: skip
                took = time.monotonic() - began
                restored = read_all(target.client_settings())
                restored_groups = group_offsets(target.client_settings())
            if checkpoint is None:
                placed = positions.groups(source_groups, label)
                needs = _latest_needs(shadow.truth, completed, placed, set(now_held), positions)
                result = compare(label, shadow.truth, restored, ends=None, needed_from=needs, source_groups=placed,
                                 restored_groups=restored_groups)  # fmt: skip
            else:
                placed = positions.groups(checkpoint.groups, label)
                result = compare(label, shadow.truth, restored, ends=checkpoint.ends,
                                 needed_from=_checkpoint_needs(checkpoint, placed), source_groups=placed,
                                 restored_groups=restored_groups)  # fmt: skip
                beyond = sorted(k for k, records in restored.items() if records and k not in checkpoint.ends)
                if beyond:
                    result.problems.append(f"{label}: partitions restored that the cut does not have: {beyond[:5]}")
            results.append({"restore_exit": code, "restore_s": round(took, 1), **asdict(result), "exact": result.exact})
            print(f"soak: {label}: {json.dumps(results[-1])[:600]}", flush=True)
    rows = [asdict(row) for row in sampler.rows]
    summary = {
        "minutes": args.minutes,
        "kafka": kafka.describe(),
        "spark": spark.describe(),
        "backup_exit": backup_code,
        "backup_exits_unasked": [asdict(e) for e in backup.exits],
        "caught_up": caught_up,
        "restores": results,
        "source_records_seen": shadow.records(),
        "source_records_the_shadow_missed": unseen,
        "shadow_error": shadow.error,
        "retention_heads": {f"{t}/{p}": o for (t, p), o in sorted(heads.items()) if t == RETAINED_TOPIC},
        "sent": sum(load.counts.sent.values()),
        "failed_sends": sum(load.counts.failed.values()),
        "failed_sends_by_error": dict(load.counts.failed_kinds),
        "load_error": load.error,
        "aborted_transactions": sum(load.counts.aborted.values()),
        "transactional_producers_replaced": load.counts.fatal_producers,
        "events": dict(Counter(h.name for h in chaos.happened)),
        "group_positions_before_the_backup": sorted(set(positions.raised)),
        "event_failures": chaos.failures,
        "figures": figures(
            rows,
            warm_up_s=min(600.0, args.minutes * 60 / 6),
            until_s=args.minutes * 60,
            restarts=[e.at_s for e in backup.exits],
        ),
        "log_kinds": dict(sampler.kinds.most_common(30)),
        "samples_lost": {"count": sampler.failures, "last": sampler.last_failure},
    }
    if standby_summary is not None:
        summary["standby"] = standby_summary
    summary["cores"] = [str(core) for core in work.glob("core*")]
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    with open(args.out / "events.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["at_s", "took_s", "event", "detail"])
        writer.writerows([h.at_s, h.took_s, h.name, h.detail] for h in chaos.happened)
    title = f"soak: {args.minutes:g} min, {kafka.describe()}, {spark.describe()}"
    (args.out / "soak.svg").write_text(render(rows, [(h.at_s, h.name) for h in chaos.happened], title))
    print(json.dumps(summary, indent=1), flush=True)


def _fail_over_and_compare(
    standby: Standby,
    cluster: KafkaCluster,
    truth: Truth,
    completed: list[Checkpoint],
    source_groups: GroupOffsets,
    alive: set[tuple[str, int]],
    positions: BackedUpPositions,
) -> dict[str, object]:
    """The standby once the backup has stopped: its follower caught up and stopped as an operator stops it, the
    failover, and the standby compared with the source as the latest state's restore is."""
    caught_up = standby.caught_up(after=time.time(), timeout=900)
    follower_code = standby.stop(300)
    failover_code, report = standby.failover()
    restored = read_all(cluster.client_settings())
    restored_groups = group_offsets(cluster.client_settings())
    placed = positions.groups(source_groups, "standby")
    needs = _latest_needs(truth, completed, placed, alive, positions)
    result = compare("standby", truth, restored, ends=None, needed_from=needs, source_groups=placed,
                     restored_groups=restored_groups)  # fmt: skip
    print(f"soak: standby: {json.dumps(asdict(result))[:600]}", flush=True)
    return {
        "caught_up": caught_up,
        "follower_exit": follower_code,
        "failover_exit": failover_code,
        "failover_report_lines": len(report.splitlines()),
        **asdict(result),
        "exact": result.exact,
        **standby.figures(),
    }


def _merge_into_truth(truth: Truth, held: Restored) -> int:
    """Add what the source holds at the end to the shadow's records; how many the shadow had not seen (0 unless the
    shadow fell behind: a record it missed is still compared)."""
    unseen = 0
    for key, records in held.items():
        known = truth.setdefault(key, {})
        for offset, name in records:
            if offset not in known:
                unseen += 1
                known[offset] = name
    return unseen


#: Each prune's end (unix time), and each partition's first offset held before and after it (``Chaos.held_from``).
PruneMarks = list[tuple[float, dict[tuple[str, int], int], dict[tuple[str, int], int]]]


class BackedUpPositions:
    """Where the backup can put a group back: at its committed offset, unless a prune that had **ended** before the
    offset was first read (so could not have seen it) had let go of that offset (it lay between the partition's first
    offset held before and after that prune): then at the first record the backup held after the last prune before
    it. Strict where unsure: an offset the backup never held, or read while a prune ran, is not moved. The second
    hour-long run met it: a group read a partition from its start and committed 7 minutes after a prune had let go of
    that start.

    ``first_read``: when each (group, topic, partition, offset) was first read by a stored offset round (the backup's
    offset history), unix time."""

    def __init__(self, prunes: PruneMarks, first_read: dict[tuple[str, str, int, int], float]) -> None:
        self.prunes, self.first_read = prunes, first_read
        self.raised: list[str] = []

    @classmethod
    def of(cls, backup_dir: Path, prunes: PruneMarks) -> BackedUpPositions:
        from spark_kafka_backup.catalog.offset_history import read_history

        first: dict[tuple[str, str, int, int], float] = {}
        for entry in read_history(parse_location(str(backup_dir))):
            key = (entry.group, entry.topic, entry.partition, entry.offset)
            first[key] = min(first.get(key, float("inf")), entry.round_time / 1000)
        return cls(prunes, first)

    def groups(self, groups: GroupOffsets, label: str) -> GroupOffsets:
        """``groups`` with each offset a prune had let go before it was read moved to what the backup held then."""
        placed: GroupOffsets = {}
        for group, offsets in groups.items():
            for key, offset in offsets.items():
                at = self.first_read.get((group, key[0], key[1], offset))
                held = offset
                if at is not None:
                    earlier = [(before, after) for ended, before, after in self.prunes if ended <= at]
                    if any(before.get(key, 0) <= offset < after.get(key, 0) for before, after in earlier):
                        held = max(offset, earlier[-1][1].get(key, 0))
                if held > offset:
                    self.raised.append(f"{label}: {group} on {key[0]}/{key[1]} committed {offset}, let go by a prune "
                                       f"before it was read; the backup held the partition from {held}")  # fmt: skip
                placed.setdefault(group, {})[key] = held
        return placed


def _checkpoint_needs(checkpoint: Checkpoint, groups: GroupOffsets | None = None) -> dict[tuple[str, int], int]:
    """What a checkpoint's restore must start at or before: its groups' lowest committed offset (``groups``: as
    :class:`BackedUpPositions` places them), or its cut."""
    needs = dict(checkpoint.ends)
    for offsets in (checkpoint.groups if groups is None else groups).values():
        for key, offset in offsets.items():
            if key in needs:
                needs[key] = min(needs[key], offset)
    return needs


def _latest_needs(
    truth: Truth,
    completed: list[Checkpoint],
    groups: GroupOffsets,
    alive: set[tuple[str, int]],
    positions: BackedUpPositions | None = None,
) -> dict[tuple[str, int], int]:
    """What the latest state's restore must start at or before (prune keeps it: the module docs of
    spark_kafka_backup.catalog.prune): every retained checkpoint's need, everything after the newest cut, and what
    the groups had not consumed. A partition the newest checkpoint does not have is kept whole if it is still at the
    source (it came after); one deleted at the source since has no need left: earlier prunes let go of what the
    checkpoints of their time did not need (the first hour's run counted 1,061 such records as missing)."""
    needs = {
        key: completed[-1].ends.get(key, 0) if completed else 0
        for key in truth
        if not completed or key in completed[-1].ends or key in alive
    }
    for checkpoint in completed:
        placed = None if positions is None else positions.groups(checkpoint.groups, f"checkpoint {checkpoint.id}")
        for key, need in _checkpoint_needs(checkpoint, placed).items():
            if key in needs and need < checkpoint.ends[key]:
                needs[key] = min(needs[key], need)
    for offsets in groups.values():
        for key, offset in offsets.items():
            if key in needs:
                needs[key] = min(needs[key], offset)
    return needs


def _create(kafka: KafkaCluster, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    def new(topic: str) -> NewTopic:
        if topic == MOVED_TOPIC:  # two replicas: a reassignment then copies a replica to the third broker
            return NewTopic(topic, partitions, 2, config={"min.insync.replicas": "1"})
        if topic == RETAINED_TOPIC:  # retention by time deletes its head every minute after the first six
            return NewTopic(topic, partitions, 3, config={"retention.ms": "360000", "segment.ms": "60000"})
        return NewTopic(topic, partitions, 3)

    admin = AdminClient(kafka.client_settings())
    for future in admin.create_topics([new(t) for t in topics]).values():
        future.result(60)


def _start_backup(kafka: KafkaCluster, spark: SparkCluster, backup_dir: Path, metrics_file: Path, log_file: Path,
                  work: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    command = spark_submit_command(
        "backup", "--bootstrap-server", kafka.bootstrap_servers, "--topics-regex", "soak-.*",
        "--target-dir", backup_dir, "--checkpoint-location", work / "spark-checkpoint", "--compression", "zstd",
        "--trigger-interval", "5", "--offsets-interval", "30", "--metrics-file", metrics_file,
        "--metrics-interval", "5", "--max-segment-size", str(256 << 10),
        master=spark.master_url,
        # The executors account for their native memory (benchmarks.soak.native_memory).
        conf=[f"spark.executor.extraJavaOptions={TRACKING}"],
    )  # fmt: skip
    env = job_environment(master=spark.master_url)
    with open(log_file, "ab") as log:
        # A crash of the driver's native code leaves a core in ``work`` (gdb then shows where: the soak found two).
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=work, preexec_fn=_allow_core_dumps)  # fmt: skip


def _allow_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def _wait_first_batch(metrics_file: Path, backup: subprocess.Popen[bytes], timeout: float) -> None:
    """Until the backup has written its first batch (the events start then: a checkpoint needs a running backup)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if backup.poll() is not None:
            raise SystemExit(f"soak: the backup exited ({backup.returncode}) before its first batch: see backup.log")
        try:
            metrics = json.loads(metrics_file.read_text()).get("metrics", [])
        except (OSError, ValueError):
            metrics = []
        if any(m["name"] == "kbackup_backup_last_batch_timestamp_seconds" and m["value"] for m in metrics):
            return
        time.sleep(2)
    raise SystemExit("soak: no batch from the backup in time: see backup.log")


def _wait_caught_up(sampler: Sampler, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    seen = len(sampler.rows)
    while time.monotonic() < deadline:
        # The sampler's own rows (a take() here would read the log beside the sampler's thread and count twice).
        if len(sampler.rows) > seen:
            row = sampler.rows[-1]
            if row.lag_records == 0 and row.batch_age_s >= 0:
                return True
        time.sleep(2)
    return False


def _wait_offset_round(metrics_file: Path, *, after: float, timeout: float) -> bool:
    """Until the backup has stored a consumer offset round read after ``after`` (unix time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            metrics = json.loads(metrics_file.read_text())["metrics"]
        except (OSError, ValueError, KeyError):
            metrics = []
        stored = [m["value"] for m in metrics if m["name"] == "kbackup_backup_last_offsets_round_timestamp_seconds"]
        if stored and stored[0] > after + 30:  # stored after a round that began after ``after`` (rounds: 30 s)
            return True
        time.sleep(3)
    return False


def _restore(target: KafkaCluster, spark: SparkCluster, backup_dir: Path, log_file: Path, *,
             checkpoint: int | None) -> int:  # fmt: skip
    command = spark_submit_command(
        "restore", "--bootstrap-server", target.bootstrap_servers, "--source-dir", backup_dir,
        # The records the soak's source kept for minutes (retention by time) or deleted are restored for good.
        "--drop-topic-config", "retention.ms", "--drop-topic-config", "segment.ms",
        *(["--checkpoint", str(checkpoint)] if checkpoint is not None else []),
        master=spark.master_url,
    )  # fmt: skip
    with open(log_file, "wb") as log:
        env = job_environment(master=spark.master_url)
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=3600).returncode


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
