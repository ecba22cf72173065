"""What both Kafka readers of a ``kbackup_kafka`` task check while they read: a cluster that stops answering (a stall,
then a failure after the range's ``read_timeout``), a topic that changed incarnation under the task, and offsets
deleted at the source before the task read them (an event, never a silent jump: recorded as lost at the source, or
the task ends with ``failOnDataLoss``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from spark_kafka_backup.catalog.source_gaps import DROPPED, READ, record_gap
from spark_kafka_backup.errors import ClusterError, SparkKafkaBackupError
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.cluster import TopicIdAsker
from spark_kafka_backup.spark.kafka_ranges import KafkaRange
from spark_kafka_backup.storage import parse_location
from spark_kafka_backup.text import count

log = logging.getLogger("spark_kafka_backup.source")

#: A task that has had no data for this long says so (again after as long), until ``read_timeout`` fails it.
STALL_WARNING_SECONDS = 30.0


class Stall:
    """The warning of a task whose fetches bring nothing: the cluster stopped answering (its planned offsets exist,
    so no data means no answer). The planner cannot say it: Spark does not plan while a batch is being read."""

    def __init__(self) -> None:
        self.last_progress = time.monotonic()
        self._warned = self.last_progress

    def progressed(self) -> None:
        self.last_progress = self._warned = time.monotonic()

    def waited(self, what: str, read_timeout: float) -> float:
        """Seconds without data; a warning every :data:`STALL_WARNING_SECONDS` of them, naming ``what``."""
        now = time.monotonic()
        waited = now - self.last_progress
        if now - self._warned >= STALL_WARNING_SECONDS and waited < read_timeout:
            self._warned = now
            log.warning(
                "source cluster not answering for %.0f s: no data for %s; the task waits up to %.0f s in all",
                waited, what, read_timeout,
            )  # fmt: skip
        return waited


def no_data(stall: Stall, item: KafkaRange, unread: int = 0) -> None:
    """A fetch brought nothing: fail once the range ``item`` (a packed task's first unread one, of ``unread``) has had
    no data for its ``read_timeout``."""
    where = f"topic {item.topic!r} partition {item.partition}"
    if stall.waited(where + (f" ({count(unread, 'partition')} unread)" if unread else ""), item.read_timeout) > (
        item.read_timeout
    ):
        raise ClusterError(
            f"{where}: no data for {item.read_timeout:.0f} s while reading offsets {item.start}..{item.end - 1} from "
            f"{redact(item.client).get('bootstrap.servers')}"
            + (f" ({count(unread, 'partition')} of this task unread)" if unread else "")
        )


class Incarnations:
    """Confirms, after records are fetched and before they are handed on, that each topic still has the id its ranges
    were planned with.

    A topic deleted and created again starts at offset 0 again: a consumer reading on at its position would hand on
    the new incarnation's records as if they followed the old one's. Fetched before a check that still finds the
    planned id, records are the planned incarnation's (an id never comes back). A topic whose id changed (or that is
    gone: which incarnation was fetched cannot be told) is refused: its records are dropped, one error line says
    why, and the planner refuses it from the next trigger on.
    """

    def __init__(self, ranges: tuple[KafkaRange, ...]) -> None:
        self._planned = {r.topic: r.topic_id for r in ranges if r.topic_id is not None}
        # As long as fetching may wait for a cluster that stopped answering.
        self._asker = TopicIdAsker(ranges[0].client if ranges else {}, patience=ranges[0].read_timeout if ranges else 0)
        self._gaps_root = ranges[0].gaps_root if ranges else None
        self._gone: set[str] = set()  # refused because deleted: what was dropped of them is lost at the source
        self.refused: set[str] = set()

    def confirm(self) -> set[str]:
        """Ask the cluster now; the topics refused so far."""
        checked = sorted(set(self._planned) - self.refused)
        if not checked:
            return self.refused
        found = self._asker.ask(checked)
        for topic in checked:
            if found.get(topic) != self._planned[topic]:
                self.refused.add(topic)
                now = found.get(topic)
                if now is None:
                    self._gone.add(topic)
                log.error(
                    "topic %r changed while it was read: it was planned as topic id %s and %s; its records read "
                    "since the last check are dropped and it is no longer backed up here",
                    topic, self._planned[topic], f"now has {now}" if now else "no longer exists",
                )  # fmt: skip
        return self.refused

    def confirmed(self, batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The batches whose topic still has its planned id (one check for all of them)."""
        if not batches:
            return
        refused = self.confirm() if self._planned else set()
        for batch in batches:
            topic = batch.column("topic")[0].as_py()
            if topic not in refused:
                yield batch
            elif topic in self._gone and self._gaps_root is not None:
                # Deleted while read: the source no longer has what was dropped, and the backup does not either.
                offsets = batch.column("offset")
                first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
                record_gap(parse_location(self._gaps_root), topic, batch.column("partition")[0].as_py(), first, last,
                           how=DROPPED)  # fmt: skip


#: librdkafka's event for a fetch position the broker no longer has (``auto.offset.reset=error``).
AUTO_OFFSET_RESET = -140


def deleted_under(watermarks: Callable[[], tuple[int, int]], task: KafkaRange, position: int) -> int:
    """The partition's offsets from ``position`` on are gone at the source: record that, and return where the
    range goes on (its log start now). The source's earliest offset must have moved past ``position``; an offset
    out of range above the log's end is a truncated or re-created partition, which ends the task.
    ``watermarks``: the partition's log start and end now (a client error if they cannot be read)."""
    from confluent_kafka import KafkaException

    where = f"topic {task.topic!r} partition {task.partition}"
    if position >= task.end:
        return position  # past the range: not its gap (the range holding those offsets records it)
    try:
        low, high = watermarks()
    except (KafkaException, RuntimeError) as exc:
        raise ClusterError(f"{where}: offset {position} is gone and the log start cannot be read: {exc}") from exc
    if low <= position:
        raise ClusterError(
            f"{where}: offset {position} is out of range on {redact(task.client).get('bootstrap.servers')}, whose log "
            f"holds offsets {low}..{high - 1}: the partition was truncated (an unclean leader election) or the topic "
            "deleted and created again"
        )
    last = min(low, task.end) - 1
    message = (
        f"{where}: offsets {position}..{last} "
        "were deleted at the source (retention or deleted records) before the backup read them"
    )
    if task.fail_on_data_loss:
        raise SparkKafkaBackupError(message + " (set failOnDataLoss=false to go on)")
    if task.gaps_root is not None:
        record_gap(parse_location(task.gaps_root), task.topic, task.partition, position, last, how=READ)
        log.info("%s: recorded as lost at the source", message)
    else:
        log.warning("%s", message)
    return int(low)
