"""The soak's load: keyed records with headers across many topics, steady with bursts, some in transactions.

Every record's value names it (``topic:seq``), so whatever comes back from a restore can be told apart: a record
that is not one of these, or one that comes twice, is a defect whatever the offsets say. Topics come and go while it
runs (:meth:`LoadGenerator.add_topic`, :meth:`LoadGenerator.drop_topic`); records to a topic being deleted may fail,
and are counted as such.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoadShape:
    """Records per second in all, the burst (``burst_factor`` times the rate for ``burst_seconds`` every
    ``burst_every`` seconds), the value size, and every ``transactional_every``-th topic written in transactions (one
    in ``abort_every`` of them aborted)."""

    rate: float = 400.0
    burst_factor: float = 5.0
    burst_seconds: float = 10.0
    burst_every: float = 120.0
    value_size: int = 200
    transactional_every: int = 4
    abort_every: int = 20


@dataclass
class LoadCounts:
    sent: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    #: Failed sends by Kafka's error name.
    failed_kinds: Counter[str] = field(default_factory=Counter)
    #: Transactional producers replaced after a fatal error.
    fatal_producers: int = 0
    aborted: Counter[str] = field(default_factory=Counter)


class LoadGenerator(threading.Thread):
    """Writes to every current topic in turn until stopped (idempotent producers: a leader change adds no copy)."""

    def __init__(self, settings: dict[str, str], topics: list[str], shape: LoadShape) -> None:
        super().__init__(daemon=True, name="soak-load")
        self.settings, self.shape = settings, shape
        self.counts = LoadCounts()
        #: Why the load stopped before it was told to (``None``: it did not).
        self.error: str | None = None
        self._topics = list(topics)
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._began = time.monotonic()
        self._seq: Counter[str] = Counter()

    def add_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.append(topic)

    def drop_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.remove(topic)

    def topics(self) -> list[str]:
        with self._lock:
            return list(self._topics)

    def current_rate(self) -> float:
        elapsed = time.monotonic() - self._began
        bursting = elapsed % self.shape.burst_every < self.shape.burst_seconds
        return self.shape.rate * (self.shape.burst_factor if bursting else 1.0)

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # noted in the summary: a soak whose load stopped measures less than it says
            self.error = f"{type(exc).__name__}: {exc}"
            raise

    def _produce(self) -> None:
        from confluent_kafka import KafkaError, KafkaException, Producer

        base = {"linger.ms": "20", "message.timeout.ms": "300000", "log_level": "0", **self.settings}
        plain = Producer({**base, "enable.idempotence": "true"})
        transactional = self._transactional(base)

        def delivered(topic: str) -> object:
            def report(error: KafkaError | None, _message: object) -> None:
                if error is not None:
                    self.counts.failed[topic] += 1
                    self.counts.failed_kinds[error.name()] += 1

            return report

        transactions = 0
        budget = 0.0
        turn = 0
        last = time.monotonic()
        while not self._halt.is_set():
            step = time.monotonic()
            topics = self.topics()
            # By the time passed, not by steps: a slow step (a commit waiting for a restarted broker) is made up for.
            budget += self.current_rate() * min(1.0, step - last)
            last = step
            # This step's records, spread over the topics in turn; one transaction carries the step's records of
            # every transactional topic (a commit per topic and step would cap the rate at a few commits a step).
            count, budget = int(budget), budget - int(budget)
            chosen = [topics[(turn + n) % len(topics)] for n in range(count)] if topics else []
            turn += count
            in_transaction = [t for t in chosen if topics.index(t) % self.shape.transactional_every == 0]
            if in_transaction:
                transactional.begin_transaction()
            for topic in chosen:
                producer = transactional if topic in in_transaction else plain
                seq = self._seq[topic]
                self._seq[topic] += 1
                value = f"{topic}:{seq}:".encode().ljust(self.shape.value_size, b".")
                headers = [("seq", str(seq).encode()), ("empty", None)] if seq % 3 == 0 else None
                producer.produce(topic, key=b"key-%d" % (seq % 97), value=value, headers=headers,
                                 on_delivery=delivered(topic))  # fmt: skip
                self.counts.sent[topic] += 1
            if in_transaction:
                transactions += 1
                abort = transactions % self.shape.abort_every == 0
                try:
                    committed = _end_transaction(transactional, abort=abort)
                except KafkaException as exc:
                    if not exc.args[0].fatal():
                        raise
                    # The producer is unusable (seen: INVALID_TXN_STATE from an abort during a rolling restart,
                    # librdkafka 2.16 and Kafka 4.1.1): a new one with the same id fences it, and its open
                    # transaction is aborted by Kafka.
                    self.counts.fatal_producers += 1
                    transactional = self._transactional(base)
                    committed = False
                if not committed or abort:
                    self.counts.aborted["transactions"] += 1
            plain.poll(0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - step)))
        plain.flush(180)
        transactional.flush(180)

    @staticmethod
    def _transactional(base: dict[str, str]) -> Any:
        from confluent_kafka import Producer

        producer = Producer({**base, "transactional.id": "soak-load-tx", "transaction.timeout.ms": "300000"})
        producer.init_transactions(60)
        return producer

    def stop(self) -> None:
        self._halt.set()
        self.join(300)


def _end_transaction(producer: Any, *, abort: bool) -> bool:
    """Commit (or abort) the open transaction through broker restarts: retried while Kafka says the error is
    retriable, aborted when it says the transaction must be; whether it was committed."""
    from confluent_kafka import KafkaError, KafkaException

    for _ in range(30):
        try:
            if abort:
                producer.abort_transaction(60)
                return False
            producer.commit_transaction(60)
            return True
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                abort = True
            elif not error.retriable() and error.code() != KafkaError._CONFLICT:  # _CONFLICT: the call timed out
                raise
            time.sleep(1)
    raise TimeoutError("a transaction could not be ended in 30 tries")
