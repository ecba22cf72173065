"""The backup's captures of the cluster around its topics (:mod:`spark_kafka_backup.catalog.cluster_metadata`).

:meth:`MetadataKeeper.keep` is called where the backup records its topics' configuration: at the start, about once a
minute from a continuous backup's cluster watch, and at the end. It reads the cluster
(:mod:`spark_kafka_backup.kafka.cluster_metadata`) and keeps a new version when anything changed. A section the
principal may not describe is said once per job, as a warning naming the permission; a capture that fails for
another reason is a warning too, and the next one tries again: the records are never held up by it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from spark_kafka_backup.catalog.cluster_metadata import (
    ClusterMetadata,
    NotCaptured,
    changes,
    keep_if_changed,
    metadata_as_of,
)
from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import partition_counts
from spark_kafka_backup.kafka.cluster_metadata import SECOND_CONNECTION_FAILED, capture_metadata
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.storage import Location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.backup")

#: After the second connection (client quotas, cluster-wide defaults) failed, how long until it is tried again, and
#: how many failed tries a run makes at most.
SECOND_CONNECTION_RETRY_SECONDS = 3600.0
SECOND_CONNECTION_TRIES = 5


class MetadataKeeper:
    def __init__(self, target: Location, selection: TopicSelection, client: Mapping[str, str]) -> None:
        self.target = target
        self.selection = selection
        self.client = client
        #: Why the second connection failed, and when: tried again an hour later, at most
        #: :data:`SECOND_CONNECTION_TRIES` times a run (each failed try leaves kafka-python's thread behind).
        self._second_connection: NotCaptured | None = None
        self._second_failed_at = 0.0
        self._second_failures = 0
        self._last: ClusterMetadata | None = None
        self._read = False
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def keep(self, admin: Any, timeout: float) -> None:
        """Capture and keep (module docstring); a transient cluster error propagates (the caller's session asks
        again), any other failure is a warning. One capture at a time (the watch's thread and the job's end)."""
        with self._lock:
            self._keep(admin, timeout)

    def _keep(self, admin: Any, timeout: float) -> None:
        try:
            if not self._read:
                self._last, self._read = metadata_as_of(self.target), True
            topics = self.selection.select(partition_counts(admin, timeout=timeout))
            skip = self._second_connection
            if (
                skip is not None
                and self._second_failures < SECOND_CONNECTION_TRIES
                and (time.monotonic() - self._second_failed_at >= SECOND_CONNECTION_RETRY_SECONDS)
            ):
                skip = None  # an hour on: once more
            metadata = capture_metadata(admin, topics, client=self.client, timeout=timeout, second_connection=skip)
            if (
                skip is None
                and isinstance(metadata.quotas, NotCaptured)
                and (metadata.quotas.reason.startswith(SECOND_CONNECTION_FAILED))
            ):
                self._second_connection, self._second_failed_at = metadata.quotas, time.monotonic()
                self._second_failures += 1
            elif skip is None:
                self._second_connection = None
            kept = keep_if_changed(self.target, metadata, self._last)
        except ClusterError as exc:
            if exc.transient:
                raise
            self._once(f"cluster metadata not captured: {exc}")
            return
        except Exception as exc:  # whatever it is, the records go on: said once, tried again next time
            self._once(f"cluster metadata not kept: {exc}")
            return
        for what, section in (("ACLs", metadata.acls), ("client quotas", metadata.quotas),
                              ("SCRAM users", metadata.scram_users),
                              ("broker configurations", metadata.broker_configs)):  # fmt: skip
            if isinstance(section, NotCaptured):
                self._once(f"cluster metadata: {what} not captured: {section.describe()}")
        if kept is not None:
            if self._last is None:
                log.info("cluster metadata captured: %s", kept.summary())
            else:
                lines = changes(self._last, kept)
                log.info("cluster metadata changed (%s): %s", count(len(lines), "change"), "; ".join(lines[:5])
                         + ("; ..." if len(lines) > 5 else ""))  # fmt: skip
            self._last = kept

    def _once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.warning("%s", line)
