"""``python -m devkit kafka --port PORT``: the README's way to a Kafka of one's own, on the port asked for."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from devkit.kafka_cluster import free_port
from tests.conftest import REPO
from tests.kafka_helpers import job_env


def test_the_devkit_runs_kafka_on_the_port_asked_for_and_refuses_a_taken_one() -> None:
    from confluent_kafka.admin import AdminClient

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "devkit", "kafka", "--port", str(port)], cwd=REPO,
                               env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the node answers
        assert line.startswith("Apache Kafka ") and f"at 127.0.0.1:{port}; Ctrl-C stops it" in line, line
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=30)
        assert len(metadata.brokers) == 1
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        started = time.monotonic()
        refused = subprocess.run([sys.executable, "-m", "devkit", "kafka", "--port", str(busy)], cwd=REPO,
                                 env=job_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.strip() == f"spark-kafka-backup devkit: error: port {busy} is taken: give another, or none"
    assert time.monotonic() - started < 30  # before any JVM starts
    out_of_range = subprocess.run([sys.executable, "-m", "devkit", "kafka", "--port", "70000"], cwd=REPO,
                                  env=job_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out_of_range.returncode == 1
    assert out_of_range.stderr.strip() == "spark-kafka-backup devkit: error: port 70000: expected 1 to 65535"
