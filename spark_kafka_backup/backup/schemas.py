"""The backup's captures of its schema registry (``--schema-registry``), beside the records.

Lifecycle: :meth:`RegistryWatch.check` before anything is written (an unreachable registry or a wrong password
stops the job with one line); :meth:`RegistryWatch.capture_now` before the query starts and when a snapshot has
read everything; :meth:`RegistryWatch.poll` from the driver's loop of a continuous backup, which starts a capture
on a thread of its own every ``--schema-registry-interval`` (default: ``--offsets-interval``; a registry that hangs
never holds up the loop or the records) and logs a failed one as a warning, to be tried again;
:meth:`RegistryWatch.stop` at the end.
"""

from __future__ import annotations

import logging
import threading
import time

from spark_kafka_backup.errors import SchemaRegistryError, SparkKafkaBackupError
from spark_kafka_backup.schema_registry.capture import (
    capture_into,
    deferred_line,
    missing_ids_line,
    registry_copy_path,
)
from spark_kafka_backup.schema_registry.client import RegistryAddress, RegistryClient
from spark_kafka_backup.schema_registry.registry_copy import RegistryCopy
from spark_kafka_backup.storage import Location

log = logging.getLogger("spark_kafka_backup.backup")


#: How long a stop waits for a capture under way.
WAIT_SECONDS = 120.0


class RegistryWatch:
    def __init__(self, target: Location, address: RegistryAddress, *, interval: float) -> None:
        self.target = target
        self.address = address
        self.interval = interval
        self._thread: threading.Thread | None = None
        self._started_at = float("-inf")
        self._failure: str | None = None
        #: Ids records name that the registry answered 404 for: not asked again by this job.
        self._absent: set[int] = set()

    def check(self) -> None:
        """One request, so that a registry that is not there or refuses the login stops the job before it starts."""
        try:
            RegistryClient(self.address).get("/subjects")
        except SchemaRegistryError as exc:
            raise SchemaRegistryError(f"--schema-registry: {exc}") from exc

    def capture_now(self, *, when: str) -> RegistryCopy:
        """Capture on this thread (after any capture under way, waited for at most :data:`WAIT_SECONDS`); errors
        propagate."""
        self.stop()
        if self._thread is not None:
            raise SchemaRegistryError(
                f"schema registry {self.address.shown}: a capture started {time.monotonic() - self._started_at:.0f} s "
                "ago has not ended (the registry does not answer)"
            )
        self._started_at = time.monotonic()
        return self._capture(when)

    def poll(self) -> None:
        """Start a capture when one is due and none runs."""
        if self._thread is not None and self._thread.is_alive():
            return
        if time.monotonic() - self._started_at < self.interval:
            return
        self._started_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._capture_logged, name="spark-kafka-backup-schema-registry", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Wait for a capture under way, at most :data:`WAIT_SECONDS` (it goes on, on its daemon thread, after)."""
        if self._thread is not None:
            self._thread.join(WAIT_SECONDS)
            if not self._thread.is_alive():
                self._thread = None

    def _capture_logged(self) -> None:
        try:
            self._capture(f"every {self.interval:.0f} s")
            if self._failure is not None:
                log.info("schema registry %s answers again", self.address.shown)
            self._failure = None
        except SparkKafkaBackupError as exc:
            if str(exc) != self._failure:
                log.warning("schema registry not captured (tried again in %.0f s): %s", self.interval, exc)
            self._failure = str(exc)

    def _capture(self, when: str) -> RegistryCopy:
        captured = capture_into(self.target, self.address, absent=self._absent)
        copy, changed = captured.copy, captured.changed
        if captured.missing:  # asked once: such ids are mostly data that only looks like the wire format
            self._absent |= set(captured.missing)
            log.warning("%s", missing_ids_line(captured.missing, self.address.shown))
        if captured.deferred:
            log.warning("%s", deferred_line(captured.deferred))
        if not changed:
            log.debug("schema registry %s captured (%s): unchanged", self.address.shown, when)
        else:
            log.info(
                "schema registry %s captured (%s): %s in %s",
                self.address.shown,
                when,
                copy.describe(),
                registry_copy_path(self.target),
            )
        return copy
