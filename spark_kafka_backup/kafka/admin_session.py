"""An admin client that is replaced when it stops answering.

librdkafka's admin client keeps the node the last metadata answer named as
controller, and sends DescribeCluster, DescribeConfigs and some other
requests there. In KRaft mode brokers name a random live broker as
"controller"; when that node dies, a client that learned its id goes on
waiting for it until each request times out, request after request, while
a new client asks a live node and answers at once. Measured on a 3-node
Apache Kafka 4.1.1 cluster (kill -9 of one broker): every admin request of
the old client took its full 30 s timeout for at least two and a half
minutes; a client made after the kill answered each in under 0.1 s.

:class:`AdminSession` holds one client and, on a transient failure (see
:attr:`~spark_kafka_backup.kafka.cluster.ClusterError.transient`), drops it and asks
again with a new one until its patience is spent. A refusal (authorization,
an invalid request) is raised at once. Requests are given the per-attempt
timeout, so one attempt never waits longer than that.

A replaced client is not dropped at once: a request that timed out on our
side may still be under way in librdkafka, and destroying a client under a
request is a path librdkafka's users report crashes on. It is kept for
:data:`RETIRE_SECONDS`, longer than any request of it can wait, and dropped
on the session's own thread at a later call. (A precaution: the crashes the
soak benchmark saw came from ListConsumerGroupOffsets, now read in a child
process, :mod:`spark_kafka_backup.kafka.isolated_groups`.)

Lifecycle: make it where the client is used (on the driver; never pickle
it to executors), call :meth:`AdminSession.call` as often as needed, drop it
with the job. Not thread-safe: one session per thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import admin_client

log = logging.getLogger("spark_kafka_backup.kafka")

T = TypeVar("T")


class GroupReaderError(ClusterError):
    """The child reading group offsets (:mod:`~spark_kafka_backup.kafka.isolated_groups`) failed, or the cluster did
    not answer it: the driver's own admin client is not at fault and is kept (:class:`AdminSession`). Declared here,
    beside the one place that tells it apart, so that the session's module (which executors import) does not import
    the driver's child-process machinery."""


#: How long one attempt of a request may wait for the cluster.
ATTEMPT_SECONDS = 10.0
#: How long :meth:`AdminSession.call` goes on asking, with a new client each time, after transient failures.
PATIENCE_SECONDS = 25.0
#: Pause between two attempts.
RETRY_PAUSE_SECONDS = 0.5
#: How long a replaced client is kept before it is dropped: more than any request timeout given to it (30 s at
#: most) plus librdkafka's own retries.
RETIRE_SECONDS = 120.0

#: A request: given a client and a timeout in seconds, the answer (or a :class:`ClusterError`).
Request = Callable[[Any, float], T]


class AdminSession:
    """One admin client for a series of requests, replaced whenever a request to it fails transiently."""

    def __init__(
        self,
        settings: Mapping[str, str],
        *,
        attempt_timeout: float = ATTEMPT_SECONDS,
        patience: float = PATIENCE_SECONDS,
        factory: Callable[[Mapping[str, str]], Any] = admin_client,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = dict(settings)
        self.attempt_timeout = attempt_timeout
        self.patience = patience
        self._factory = factory
        self._clock = clock
        self._sleep = sleep
        self._client: Any = None
        #: Replaced clients and when they were replaced, oldest first (module docstring).
        self._retired: list[tuple[float, Any]] = []
        #: How many clients were made (the first one included): a figure for logs and tests.
        self.clients_made = 0

    @property
    def client(self) -> Any:
        """The current client, made on first use."""
        if self._client is None:
            self._client = self._factory(self._settings)
            self.clients_made += 1
        return self._client

    def renew(self) -> None:
        """Retire the current client: the next request starts a new one."""
        now = self._clock()
        if self._client is not None:
            self._retired.append((now, self._client))
            self._client = None
        # Dropped here, on the session's thread, once nothing of theirs can still be under way.
        while self._retired and now - self._retired[0][0] >= RETIRE_SECONDS:
            del self._retired[0]

    @property
    def retired(self) -> int:
        """Replaced clients still kept."""
        return len(self._retired)

    def call(self, request: Request[T], *, patience: float | None = None) -> T:
        """``request(client, attempt_timeout)``, asked again with a new client after each transient failure.

        Raises the last :class:`ClusterError` when ``patience`` seconds (the
        session's by default; 0 = a single attempt) have passed since the
        first attempt began, and any non-transient one at once.
        """
        deadline = self._clock() + (self.patience if patience is None else patience)
        attempts = 0
        while True:
            attempts += 1
            try:
                return request(self.client, self.attempt_timeout)
            except ClusterError as exc:
                if not exc.transient:
                    raise
                if not isinstance(exc, GroupReaderError):  # that one failed in a process of its own, not here
                    self.renew()
                if self._clock() + RETRY_PAUSE_SECONDS >= deadline:
                    raise
                log.debug("attempt %d failed (%s); asking again with a new admin client", attempts, exc)
            self._sleep(RETRY_PAUSE_SECONDS)
