"""Where a restore stands on each target partition, and who may write there.

Every restore task produces through a **transactional** producer whose
``transactional.id`` is derived from the target topic and partition
(:func:`transactional_id`). Starting a producer with that id fences any other
producer holding it: a second restore of the same target partition takes the
partition over, the first one's open transaction is aborted by the cluster, and
its next write fails with ``_FENCED``. Two restores never both write a
partition.

Each transaction carries, beside its records, the restore's **progress
marker**: an offset commit of the consumer group :data:`~spark_kafka_backup.kafka.cluster.PROGRESS_GROUP` on the
target partition. Kafka makes the two one unit, so the marker always describes
exactly the committed records::

    committed offset   the next source offset to produce (records below it are in the target)
    metadata (JSON)    {"v": 1, "restore": <identity>, "first": <target offset of the first restored record>,
                        "next": <target offset after the last restored record>}

``restore`` (:func:`restore_identity`) names what is being restored into the
partition: the source topic and partition, the cluster and topic id it was
backed up from (or the backup's location when those are not recorded), the
selection window and the segments left out. A marker with another identity means the partition holds
another restore's records.

Target offsets are not dense: each committed transaction adds a commit marker
record, and an aborted transaction leaves its records (invisible to
``read_committed`` consumers) and an abort marker. The restore therefore takes
every target offset it reports from the broker (delivery reports, the marker),
never from counting.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.kafka.cluster import COORDINATOR_NOT_READY, PROGRESS_GROUP
from spark_kafka_backup.partition.selection import Window

_log = logging.getLogger("spark_kafka_backup.restore")

#: Records per transaction: a crash redoes at most this many; each commit adds one offset to the partition.
TRANSACTION_RECORDS = 50_000

#: A transaction commits after this long even when it holds fewer records (progress shows, less to redo).
TRANSACTION_SECONDS = 5.0

#: A transaction open this long is aborted by the broker: a restore that died mid-transaction holds back
#: ``read_committed`` consumers of its partition at most this long (its rerun aborts it at once).
TRANSACTION_TIMEOUT_MS = 60_000

#: How long the plan waits to read the markers: a marker left pending by a killed restore is readable once the
#: broker aborted its transaction.
PLAN_MARKER_SECONDS = TRANSACTION_TIMEOUT_MS / 1000 + 30


@dataclass(frozen=True)
class ProgressMarker:
    """A restore's committed position on one target partition."""

    restore: str
    resume_from: int
    first: int
    next: int

    def metadata(self) -> str:
        return json.dumps({"v": 1, "restore": self.restore, "first": self.first, "next": self.next}, sort_keys=True)

    @classmethod
    def from_commit(cls, offset: int, metadata: str | None) -> ProgressMarker:
        """The marker behind a committed offset; one spark-kafka-backup did not write has the identity ``"unknown"``."""
        try:
            fields = parse_document(metadata or "", file="<commit metadata>", what="restore marker")
            return cls(str(fields["restore"]), offset, int(fields["first"]), int(fields["next"]))
        except (FormatError, ValueError, TypeError, KeyError, AttributeError):
            return cls("unknown", offset, -1, -1)


#: What every restore's transactional id starts with (ACLs grant WRITE on this prefix).
TRANSACTIONAL_ID_PREFIX = "kbackup-restore."


def transactional_id(topic: str, partition: int) -> str:
    """The id every restore into this target partition produces with (so that the newest one fences the others)."""
    return f"{TRANSACTIONAL_ID_PREFIX}{topic}.{partition}"


def restore_identity(
    source_topic: str,
    source_partition: int,
    origin: tuple[str | None, str | None],
    location: str,
    window: Window,
    spread: str | None = None,
    schema_ids: dict[str, Any] | None = None,
) -> str:
    """A short name for "these selected records of this backed-up partition".

    For a target partition of a repartitioned topic, ``source_partition`` is the target partition and ``spread``
    names the mode, the partition count and every backed-up partition's selection
    (:meth:`spark_kafka_backup.restore.repartition.Repartition.identity_part`).

    ``schema_ids``: how the records' schema ids are rewritten (the target registry and the fields,
    :meth:`spark_kafka_backup.schema_registry.wire.IdRewrite.identity_part`), when they are: a rerun that would produce
    other bytes (a restore killed and run again with or without ``--schema-registry``, or with other ``--schema-ids``)
    is another restore, refused rather than mixing both in one partition. Which id each schema gets stays fixed per
    target registry (:class:`spark_kafka_backup.schema_registry.registry_import.RegistryImportState`).

    Segments left out (``--skip-bad-segments``) are part of it: a rerun that
    would produce records below the marker (a repaired segment) must not
    take the marker as covering them. ``location`` (used only when the backup
    does not record its origin) should be the resolved path.
    """
    where: list[Any] = list(origin) if origin[0] is not None else [location]
    bounds = [window.from_offset, window.to_offset, window.from_time, window.to_time, sorted(window.skip_segments)]
    if window.matched is not None:
        bounds.append(["where", window.matched.where])  # (absent before --where: earlier identities stay the same)
    named: list[Any] = [source_topic, source_partition, where, bounds]
    if spread is not None:
        named.append(spread)
    if schema_ids is not None:
        named.append({"schemaIds": schema_ids})
    text = json.dumps(named)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def marker_consumer(client: Mapping[str, str]) -> Any:
    """A consumer of spark-kafka-backup's progress group: reads markers and lends its group to transactions (never
    joins)."""
    from confluent_kafka import Consumer

    from spark_kafka_backup.kafka.client_settings import consumer_settings

    return Consumer({**consumer_settings(client, isolation_level="read_committed"), "group.id": PROGRESS_GROUP})


def read_markers(
    consumer: Any, partitions: Iterable[tuple[str, int]], *, timeout: float = 30
) -> dict[tuple[str, int], ProgressMarker]:
    """The committed markers of these target partitions (partitions without one are left out)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from spark_kafka_backup.errors import ClusterError

    wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
    if not wanted:
        return {}
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            # A long wait (the plan's) asks first for 10 s, so that waiting for a pending marker is told (librdkafka
            # retries within a call), then for up to 30 s at a time; a short one in one call, as a consumer would.
            call = timeout if timeout <= 30 else 10.0 if not told else 30.0
            committed = consumer.committed(wanted, max(1.0, min(deadline - time.monotonic(), call)))
            break
        except KafkaException as exc:
            error = exc.args[0]
            # A new cluster's group coordinator may still be starting or loading: wait for it, as a consumer would.
            not_ready = error.name() in COORDINATOR_NOT_READY or "coordinator" in error.str().lower()
            # A restore killed between sending its marker to its transaction and committing it leaves the marker
            # pending: the broker answers UNSTABLE_OFFSET_COMMIT (librdkafka retries until it times out) until it
            # aborts that transaction, within transaction.timeout.ms.
            # (Under load the request may also time out in librdkafka's queue, before it is sent: _TIMED_OUT_QUEUE.)
            pending = error.code() in (KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE)
            if (not_ready or pending) and time.monotonic() < deadline:
                if pending and not told:
                    told = True
                    _log.info(
                        "the restore progress is not readable yet (a transaction of a stopped restore is still "
                        "open, which the broker aborts within %d s, or the group coordinator is starting): waiting",
                        TRANSACTION_TIMEOUT_MS // 1000,
                    )
                time.sleep(0.5)
                continue
            raise ClusterError(f"cannot read the restore progress (group {PROGRESS_GROUP}): {error.str()}") from exc
    found = {}
    for entry in committed:
        if entry.offset >= 0:
            found[(entry.topic, entry.partition)] = ProgressMarker.from_commit(entry.offset, entry.metadata)
    return found


def refresh_markers(client: Mapping[str, str], markers: Mapping[tuple[str, int], ProgressMarker]) -> None:
    """Commit these partitions' markers again, unchanged: Kafka deletes a group's committed offset once it is
    ``offsets.retention.minutes`` old (7 days by default), and a follower's partition that receives nothing for that
    long would lose its progress. Each through the partition's transactional id, as a task commits it: that fences
    any other producer of this restore there first, and the marker committed is the one read after fencing, never an
    older one (a partition whose marker is no longer this restore's is left alone)."""
    from confluent_kafka import Producer, TopicPartition

    from spark_kafka_backup.errors import ClusterError

    for (topic, partition), expected in sorted(markers.items()):
        producer = Producer({**client, "transactional.id": transactional_id(topic, partition),
                             "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS)})  # fmt: skip
        consumer = marker_consumer(client)
        try:
            producer.init_transactions(60)
            current = read_markers(consumer, [(topic, partition)]).get((topic, partition))
            if current is None or current.restore != expected.restore:
                continue
            producer.begin_transaction()
            offset = TopicPartition(topic, partition, current.resume_from, metadata=current.metadata())
            producer.send_offsets_to_transaction([offset], consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        except Exception as exc:
            raise ClusterError(f"cannot refresh the restore progress of {topic}/{partition}: {exc}") from exc
        finally:
            consumer.close()
            producer.flush(5)
