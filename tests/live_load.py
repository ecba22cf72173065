"""Live load for tests of running jobs: a producer thread, the job log's batch lines, polling."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import client_config_file

BATCH_LINE = re.compile(r"batch (\d+): (\d+) records read in")


class Producer(threading.Thread):
    """Writes records with keys, values and headers until stopped; idempotent, so a leader change adds no copy.

    ``stop()`` flushes and raises unless every record was acknowledged.
    """

    def __init__(self, kafka: BrokerUnderTest, topic: str, partitions: int, rate: float = 400) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.partitions, self.rate = kafka, topic, partitions, rate
        self.sent = 0
        self.failed: list[str] = []
        self.unflushed = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import KafkaError
        from confluent_kafka import Producer as KafkaProducer

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                self.failed.append(str(error))

        settings = {"enable.idempotence": "true", "linger.ms": "20", "message.timeout.ms": "300000", "log_level": "0"}
        producer = KafkaProducer(self.kafka.client_settings(**settings))
        while not self._stop_event.is_set():
            for _ in range(20):
                i = self.sent
                producer.produce(
                    self.topic,
                    key=None if i % 9 == 0 else f"k{i}".encode(),
                    value=f"value-{i}".encode() * (1 + i % 5),
                    headers=[("n", str(i).encode()), ("n", None)] if i % 4 == 0 else None,
                    partition=i % self.partitions,
                    on_delivery=delivered,
                )
                self.sent += 1
            producer.poll(0)
            time.sleep(20 / self.rate)
        self.unflushed = producer.flush(180)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(240)
        assert not self.is_alive(), "the producer did not stop"
        assert self.unflushed == 0 and not self.failed, f"{self.unflushed} unflushed, failed: {self.failed[:3]}"


def batches(log: Path) -> list[tuple[int, int]]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [(int(batch), int(rows)) for batch, rows in BATCH_LINE.findall(text)]


def wait_for(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    *,
    job: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll ``condition`` until it holds. A costly condition (reading a whole backup) is polled less often: it
    sleeps three times as long as it took, so polling takes at most a quarter of a core from the jobs under test.

    ``job``: the process expected to bring it about; its exit ends the wait at once. ``log``: its output, whose
    end the failure shows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = time.monotonic()
        if condition():
            return
        if job is not None and job.poll() is not None:
            raise AssertionError(f"the job exited ({job.returncode}) before {what}{_tail(log)}")
        time.sleep(max(0.2, 3 * (time.monotonic() - asked)))
    raise AssertionError(f"timed out waiting for {what}{_tail(log)}")


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    return "; the job's output ends:\n" + log.read_text(errors="replace")[-6000:]


def client_args(kafka: BrokerUnderTest, tmp_path: Path) -> list[str]:
    config = tmp_path / "client.properties"
    client_config_file(config, kafka.extra_settings)
    return ["--bootstrap-server", kafka.bootstrap_servers, "--command-config", str(config)]


def more_batches(log: Path, than: int) -> Callable[[], bool]:
    """A condition for :func:`wait_for`: the log shows more than ``than`` batch lines."""
    return lambda: len(batches(log)) > than
