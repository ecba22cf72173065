"""A finished job's metrics where a scheduler's Prometheus finds them: pushed to a real Prometheus Pushgateway
(Debian's ``prometheus-pushgateway``, installed by ./dev, started here on loopback) at each interval and when the
job ends, and read back from the gateway after the job's process has exited."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.kafka_cluster import die_with_parent, free_port
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import consume_all, create_topics, run_backup
from tests.live_load import client_args
from tests.restore_helpers import Target, run_restore

PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus-pushgateway") or PUSHGATEWAY
    assert Path(binary).is_file(), "prometheus-pushgateway is missing (./dev setup installs Debian's)"
    port = free_port()
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield url
    finally:
        process.kill()
        process.wait(10)


def gateway_samples(url: str) -> dict[tuple[str, str], float]:
    """(metric name, its labels as written) -> value of every kbackup series the gateway holds."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(kbackup_\w+)(\{[^}]*\})? (\S+)", line)
        if match:
            found[(match[1], match[2] or "")] = float(match[3])
    return found


@pytest.mark.long  # two jobs started as processes of their own (the gateway must outlive them): a minute of CI
def test_a_finished_snapshots_and_restores_figures_stay_on_the_pushgateway(
    kafka: BrokerUnderTest, target: Target, pushgateway: str, tmp_path: Path
) -> None:
    topic = "pushed-metrics"
    create_topics(kafka, {topic: 2})
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings())
    for i in range(1000):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 50, partition=i % 2)
    assert producer.flush(30) == 0
    backup = tmp_path / "backup"
    done = run_backup(
        *client_args(kafka, tmp_path), "--target-dir", backup, "--topics", topic, "--snapshot",
        "--metrics-pushgateway", pushgateway, in_process=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The job's process has exited; its last figures are on the gateway, grouped by job and target.
    samples = gateway_samples(pushgateway)
    written = {
        labels: value for (name, labels), value in samples.items() if name == "kbackup_backup_records_written_total"
    }
    target_label = f'target="{backup}"'
    ours = {labels: value for labels, value in written.items() if target_label in labels}
    assert sum(ours.values()) == 1000, samples
    assert all('job="backup"' in labels for labels in ours), ours

    name = target.name(topic) + "-pushed"
    restored = run_restore(
        *target.args(tmp_path), "--source-dir", backup, "--topic-map", f"{topic}={name}",
        "--metrics-pushgateway", pushgateway, in_process=False,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    assert len(consume_all(target.broker, [name])) == 1000
    samples = gateway_samples(pushgateway)
    restore_series = {
        (name_, labels): value
        for (name_, labels), value in samples.items()
        if name_.startswith("kbackup_restore_") and f'source="{backup}"' in labels
    }
    assert restore_series, samples
    assert all('job="restore"' in labels for _, labels in restore_series)


def test_a_pushgateway_that_does_not_answer_never_fails_the_job(kafka: BrokerUnderTest, tmp_path: Path) -> None:
    topic = "pushed-nowhere"
    create_topics(kafka, {topic: 1})
    nowhere = f"http://127.0.0.1:{free_port()}"
    done = run_backup(
        *client_args(kafka, tmp_path), "--target-dir", tmp_path / "backup", "--topics", topic, "--snapshot",
        "--metrics-pushgateway", nowhere,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"metrics not pushed to {nowhere}" in done.stdout + done.stderr
