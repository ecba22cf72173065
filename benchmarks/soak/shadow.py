"""What the source held: every committed record the soak's topics ever had, read as it was written.

The backup is compared with what a plain ``read_committed`` consumer saw, not with what the source holds at the end:
by then retention and the soak's deletions have taken the heads of some partitions and whole topics. The shadow
reader is an ordinary consumer group (``soak-shadow``, committing as it goes, so the backup also has a group that
moves all the time) subscribed to every ``soak-`` topic, new ones and new partitions included. Per partition it keeps
each record's offset and name (the ``topic:seq`` its value starts with, :mod:`benchmarks.soak.load`); a record read
twice (a rebalance) is kept once, by offset.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: Per partition: offset -> the record's name.
Truth = dict[tuple[str, int], dict[int, bytes]]

GROUP = "soak-shadow"


def record_name(value: bytes | None) -> bytes:
    """``topic:seq`` of a soak record's value (the padding after it dropped)."""
    if not value:
        return b""
    return b":".join(value.split(b":", 2)[:2])


class ShadowReader(threading.Thread):
    def __init__(self, settings: dict[str, str]) -> None:
        super().__init__(daemon=True, name="soak-shadow")
        self.settings = settings
        self.truth: Truth = {}
        self.last_read_at = time.monotonic()
        self.error: str | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            self._read()
        except Exception as exc:  # in the summary: a truth with a hole would blame the backup
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def _read(self) -> None:
        from confluent_kafka import Consumer

        consumer: Any = Consumer({**self.settings, "group.id": GROUP, "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": "true",
                                  "auto.commit.interval.ms": "5000", "topic.metadata.refresh.interval.ms": "5000",
                                  "log_level": "0"})  # fmt: skip
        consumer.subscribe(["^soak-.*"])
        try:
            while not self._halt.is_set():
                for message in consumer.consume(500, 1.0):
                    if message.error() is not None:
                        continue
                    key = (message.topic(), message.partition())
                    self.truth.setdefault(key, {})[message.offset()] = record_name(message.value())
                    self.last_read_at = time.monotonic()
        finally:
            consumer.close()  # commits what was read, leaves the group

    def quiet_for(self, seconds: float, timeout: float) -> bool:
        """Wait until nothing new was read for ``seconds`` (the load stopped and everything was read)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if time.monotonic() - self.last_read_at >= seconds:
                return True
            time.sleep(1)
        return False

    def stop(self) -> None:
        self._halt.set()
        self.join(120)

    def records(self) -> int:
        return sum(len(offsets) for offsets in self.truth.values())
