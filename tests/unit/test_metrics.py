"""The metrics' definitions (pure logic) and their publication (HTTP, files), without a cluster."""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from pathlib import Path

import pytest

from spark_kafka_backup.backup.metrics import BackupMetrics, BatchWritten
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.logsetup import JsonLines
from spark_kafka_backup.metrics import MetricsPublisher, Sample, parse_listen_address, render_prometheus


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def values(samples: list[Sample], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in samples if s.name == name}


def test_lag_is_last_stable_offset_minus_backed_up_and_its_age_starts_at_the_first_sample_above() -> None:
    clock = Clock(1000)
    metrics = BackupMetrics(clock=clock)
    key = ("orders", 0)
    assert metrics.lag(key) is None  # nothing known yet: no value rather than a made-up 0
    metrics.observe_last_stable_offsets({key: 100}, at=1000)
    assert metrics.lag(key) is None  # the backed-up offset is not known yet
    metrics.observe_backed_up({key: 40})
    clock.now = 1010
    assert metrics.lag(key) == (60, 10.0)
    metrics.observe_last_stable_offsets({key: 150}, at=1015)
    clock.now = 1020
    metrics.observe_backed_up({key: 100})  # reached the first sample: the second is the oldest not reached
    assert metrics.lag(key) == (50, 5.0)
    metrics.observe_backed_up({key: 150})
    assert metrics.lag(key) == (0, 0.0)
    # A complete sample without the partition: its topic was deleted; its lag is not reported for ever.
    metrics.observe_last_stable_offsets({("other", 0): 5}, at=1030)
    assert metrics.lag(key) is None
    assert {s.labels["topic"] for s in metrics.samples() if s.name == "kbackup_backup_last_stable_offset"} == {"other"}


def test_a_long_lag_keeps_its_oldest_sample_in_bounded_memory() -> None:
    from spark_kafka_backup.backup.metrics import MAX_SAMPLES_BEHIND

    clock = Clock(0)
    metrics = BackupMetrics(clock=clock)
    key = ("t", 0)
    metrics.observe_backed_up({key: 0})
    for step in range(1, 10 * MAX_SAMPLES_BEHIND):
        metrics.observe_last_stable_offsets({key: step * 10}, at=step)
    clock.now = 100_000
    assert metrics.lag(key) == (10 * (10 * MAX_SAMPLES_BEHIND - 1), 100_000 - 1)
    assert len(metrics._partitions[key].behind) <= MAX_SAMPLES_BEHIND
    # Half way: the first sample above 5000 was taken at 501; thinned, the one kept is a little later (the lag's
    # age is never overstated, and understated by at most the spacing of the samples kept).
    metrics.observe_backed_up({key: 5000})
    lag = metrics.lag(key)
    assert lag is not None and 100_000 - 501 - 64 <= lag[1] <= 100_000 - 501


def test_a_recreated_partition_starts_its_lag_over() -> None:
    clock = Clock(2000)
    metrics = BackupMetrics(clock=clock)
    key = ("t", 1)
    metrics.observe_backed_up({key: 10})
    metrics.observe_last_stable_offsets({key: 500}, at=1000)
    metrics.observe_last_stable_offsets({key: 20}, at=1990)
    assert metrics.lag(key) is None  # what was backed up is the old incarnation's: unknown until the next batch
    metrics.observe_backed_up({key: 5})
    assert metrics.lag(key) == (15, 10.0)


def test_samples_carry_labels_counters_rates_and_times() -> None:
    clock = Clock(5000)
    metrics = BackupMetrics(clock=clock)
    metrics.observe_last_stable_offsets({("a", 0): 7, ("b", 2): 3}, at=4990)
    metrics.observe_backed_up({("a", 0): 7, ("b", 2): 1})
    metrics.observe_trigger(4995)
    metrics.observe_batch(4)
    metrics.observe_written(BatchWritten(4, {"a": (7, 700), "b": (1, 100)}, at=4995))
    metrics.observe_written(BatchWritten(4, {"a": (7, 700)}, at=4996))  # the batch again after a crash: once
    metrics.observe_round_stored(4996)
    clock.now = 5000
    samples = metrics.samples()
    assert values(samples, "kbackup_backup_lag_records") == {
        (("partition", "0"), ("topic", "a")): 0,
        (("partition", "2"), ("topic", "b")): 2,
    }
    assert values(samples, "kbackup_backup_records_written_total") == {(("topic", "a"),): 7, (("topic", "b"),): 1}
    assert values(samples, "kbackup_backup_bytes_written_total") == {(("topic", "a"),): 700, (("topic", "b"),): 100}
    assert values(samples, "kbackup_backup_last_batch_id") == {(): 4}
    assert values(samples, "kbackup_backup_last_batch_timestamp_seconds") == {(): 4995}
    assert values(samples, "kbackup_backup_last_offsets_round_timestamp_seconds") == {(): 4996}
    assert values(samples, "kbackup_backup_up") == {(): 1}
    fresh = BackupMetrics(clock=Clock(77))  # no trigger completed yet: stalled since the job's start
    assert values(fresh.samples(), "kbackup_backup_last_batch_timestamp_seconds") == {(): 77}
    fresh.observe_checkpoints(waiting=0, completed_at=50)  # seeded from the catalog
    fresh.observe_checkpoints(waiting=1, completed_at=40)  # never older than what is known
    assert values(fresh.samples(), "kbackup_backup_last_checkpoint_timestamp_seconds") == {(): 50}
    metrics.observe_stopped(5001, finished=True)
    after = metrics.samples()
    assert values(after, "kbackup_backup_up") == {(): 0}
    assert values(after, "kbackup_backup_last_success_timestamp_seconds") == {(): 5001}


def test_rates_count_the_last_minute_only() -> None:
    clock = Clock(0)
    metrics = BackupMetrics(clock=clock)
    metrics.observe_written(BatchWritten(1, {"a": (6000, 60_000)}, at=10))
    clock.now = 60
    assert values(metrics.samples(), "kbackup_backup_records_per_second") == {(): 100}
    clock.now = 200
    assert values(metrics.samples(), "kbackup_backup_records_per_second") == {(): 0}


def test_prometheus_text_escapes_labels_and_groups_each_metric() -> None:
    text = render_prometheus(
        [
            Sample("m_total", 3, "a counter", {"topic": 'we"ird\\name'}, "counter"),
            Sample("g", 1.5, "a gauge"),
            Sample("m_total", 4, "a counter", {"topic": "b"}, "counter"),
        ]
    )
    assert text == (
        "# HELP g a gauge\n# TYPE g gauge\ng 1.5\n"
        "# HELP m_total a counter\n# TYPE m_total counter\n"
        'm_total{topic="we\\"ird\\\\name"} 3\nm_total{topic="b"} 4\n'
    )


def test_publisher_serves_http_and_replaces_files(tmp_path: Path) -> None:
    prom, document = tmp_path / "backup.prom", tmp_path / "backup.json"
    samples = [Sample("kbackup_backup_up", 1, "up", {"x": "y"})]
    with_port = MetricsPublisher("backup", file=prom, listen=("127.0.0.1", 0))
    with_port.start()
    try:
        with_port.publish(samples)
        with urllib.request.urlopen(f"http://127.0.0.1:{with_port.port}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert answer.read().decode() == render_prometheus(samples)
    finally:
        with_port.close()
    assert prom.read_text() == render_prometheus(samples)
    to_json = MetricsPublisher("backup", file=document)
    to_json.publish(samples, now=12.5)
    assert json.loads(document.read_text()) == {
        "job": "backup",
        "updated_at": 12.5,
        "metrics": [{"name": "kbackup_backup_up", "labels": {"x": "y"}, "value": 1}],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.json", "backup.prom"]  # no temporary file left


def test_a_port_in_use_or_malformed_is_one_usage_error() -> None:
    first = MetricsPublisher("backup", listen=("127.0.0.1", 0))
    first.start()
    try:
        second = MetricsPublisher("backup", listen=("127.0.0.1", first.port or 0))
        with pytest.raises(UsageError, match=r"--metrics-port: cannot listen on 127\.0\.0\.1:\d+"):
            second.start()
    finally:
        first.close()
    assert parse_listen_address("9108") == ("127.0.0.1", 9108)  # loopback unless told
    assert parse_listen_address("9108", "0.0.0.0") == ("0.0.0.0", 9108)
    assert parse_listen_address("9108", "[::]") == ("::", 9108)
    assert parse_listen_address("127.0.0.1:9108") == ("127.0.0.1", 9108)
    assert parse_listen_address("10.0.0.5:9108", "10.0.0.5") == ("10.0.0.5", 9108)
    with pytest.raises(UsageError, match=re.escape("names host '10.0.0.5' and --metrics-bind '0.0.0.0': give one")):
        parse_listen_address("10.0.0.5:9108", "0.0.0.0")
    with pytest.raises(UsageError, match="expected PORT or HOST:PORT"):
        parse_listen_address("localhost:http")


def test_json_log_lines_are_one_object_each() -> None:
    record = logging.LogRecord(
        "spark_kafka_backup.backup", logging.INFO, __file__, 1, "batch %d: %s", (3, 'a "b"\nc'), None
    )
    record.created, record.msecs = 0.25, 250
    entry = json.loads(JsonLines().format(record))
    assert entry == {
        "time": "1970-01-01T00:00:00.250Z",
        "level": "INFO",
        "logger": "spark_kafka_backup.backup",
        "message": 'batch 3: a "b"\nc',
    }


def test_restore_progress_follows_its_own_markers_and_ends_exact() -> None:
    from spark_kafka_backup.partition.selection import Window
    from spark_kafka_backup.restore.marker import ProgressMarker
    from spark_kafka_backup.restore.metrics import RestoreMetrics
    from spark_kafka_backup.restore.plan import PartitionPlan

    parts = [
        PartitionPlan("src", 0, "dst", 0, Window(), selected=100, groups={}, identity="mine", resume_from=0),
        PartitionPlan("src", 1, "dst", 1, Window(from_offset=50), selected=30, groups={}, identity="mine", skip=10,
                      resume_from=20),
    ]  # fmt: skip
    clock = Clock(100)
    metrics = RestoreMetrics(parts, clock=clock)
    metrics.observe_markers(
        {
            ("dst", 0): ProgressMarker("mine", 40, 0, 41),
            ("dst", 1): ProgressMarker("another restore", 90, 0, 1),  # not this restore's: ignored
        }
    )
    assert metrics.remaining() == 60 + 20
    metrics.observe_markers({("dst", 1): ProgressMarker("mine", 65, 0, 16)})  # 15 source offsets past 50
    metrics.observe_markers({("dst", 0): ProgressMarker("mine", 30, 0, 31)})  # an older marker: no step back
    assert metrics.remaining() == 60 + 5
    metrics.observe_markers({("dst", 1): ProgressMarker("mine", 500, 0, 100)})  # capped at the plan
    assert metrics.remaining() == 60
    metrics.observe_results({("dst", 0): 98, ("dst", 1): 20})  # done: the tasks' own counts
    metrics.observe_stopped(120, succeeded=True)
    samples = metrics.samples()
    assert values(samples, "kbackup_restore_records_remaining") == {
        (("partition", "0"), ("topic", "dst")): 0,
        (("partition", "1"), ("topic", "dst")): 0,
    }
    assert values(samples, "kbackup_restore_partitions_done") == {(): 2}
    assert values(samples, "kbackup_restore_last_success_timestamp_seconds") == {(): 120}
    assert values(samples, "kbackup_restore_up") == {(): 0}


def test_the_pushgateway_group_is_the_job_and_its_labels_each_one_path_segment() -> None:
    import base64

    from spark_kafka_backup.metrics import pushgateway_url

    url = pushgateway_url("http://gw:9091/", "backup", {"target": "s3://b/prod/a b", "z": ""})
    assert url.startswith("http://gw:9091/metrics/job@base64/")
    parts = url.removeprefix("http://gw:9091/metrics/").split("/")
    assert parts[0::2] == ["job@base64", "target@base64", "z@base64"]
    decoded = [base64.urlsafe_b64decode(part).decode() for part in parts[1::2]]
    assert decoded == ["backup", "s3://b/prod/a b", ""]
    with pytest.raises(UsageError, match="not a Prometheus label name"):
        pushgateway_url("http://gw:9091", "backup", {"bad-name": "x"})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gw:9091", "expected http://HOST:PORT"),
        ("ftp://gw:9091", "expected http://HOST:PORT"),
        ("http://user:secret@gw:9091", "credentials do not belong in the URL"),
        ("http://gw:9091/?a=b", "expected no query or fragment"),
        ("http://gw:abc", "Port could not be cast to integer value"),
    ],
)
def test_a_pushgateway_url_that_cannot_be_one_is_refused(url: str, message: str) -> None:
    from spark_kafka_backup.metrics import check_pushgateway

    with pytest.raises(UsageError, match=re.escape(message)):
        check_pushgateway(url)
    assert check_pushgateway("https://gw.example:9091/prefix") == "https://gw.example:9091/prefix"


def test_a_pushgateway_that_never_answers_holds_up_neither_publish_nor_long_the_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import socket
    import time

    from spark_kafka_backup import metrics

    monkeypatch.setattr(metrics, "FINAL_PUSH_SECONDS", 0.5)
    monkeypatch.setattr(metrics, "PUSH_TIMEOUT_SECONDS", 3.0)  # longer than the end waits; the thread ends soon
    with socket.socket() as silent:  # takes connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        publisher = MetricsPublisher("backup", push=f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        for value in range(3):
            publisher.publish([Sample("kbackup_backup_records_written_total", float(value), "help", kind="counter")])
        assert time.monotonic() - started < 1.0  # the job's loop goes on
        with caplog.at_level(logging.WARNING, logger="spark_kafka_backup"):
            publisher.close()
        assert time.monotonic() - started < 3.0
    assert "the last metrics were not pushed to http://127.0.0.1:" in caplog.text


def test_a_pushgateway_refusal_is_said_once_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    pushed: list[tuple[str, bytes]] = []

    class Refusing(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            pushed.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            body = b"pushed metrics are invalid or inconsistent with existing metrics"
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        publisher = MetricsPublisher("restore", push=f"http://127.0.0.1:{server.server_port}", labels={"source": "/b"})
        with caplog.at_level(logging.WARNING, logger="spark_kafka_backup"):
            publisher.publish([Sample("kbackup_restore_records_total", 1.0, "help", kind="counter")])
            deadline = time.monotonic() + 10
            while not pushed and time.monotonic() < deadline:
                time.sleep(0.01)
            publisher.publish([Sample("kbackup_restore_records_total", 2.0, "help", kind="counter")])
            publisher.close()  # waits for the last push
    finally:
        server.shutdown()
    assert len(pushed) == 2 and pushed[0][0].startswith("/metrics/job@base64/")
    assert b'kbackup_restore_records_total{source="/b"} 1' in pushed[0][1]
    assert "HTTP 400 Bad Request: pushed metrics are invalid or inconsistent" in caplog.text
    # Once while it keeps refusing (another test's gateway may be said too: its push thread outlives its test).
    assert caplog.text.count(f"metrics not pushed to http://127.0.0.1:{server.server_port}:") == 1
