"""Behind Spark's Kafka source, what the ``kbackup_v1`` sink checks before it writes (executor side).

Spark's source (``failOnDataLoss=false``) skips offsets deleted at the source and reads a topic deleted and created
again at the old incarnation's offsets. :class:`SourceCheck` records each gap below the partition's log start as
lost at the source, and refuses records of another incarnation; see :mod:`spark_kafka_backup.spark.v1_sink`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from spark_kafka_backup.catalog.source_gaps import INFERRED, record_gap
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.client_settings import consumer_settings
from spark_kafka_backup.kafka.cluster import TopicIdAsker
from spark_kafka_backup.storage import Location

log = logging.getLogger("spark_kafka_backup.sink")

#: How long the sink asks a cluster that stopped answering for a topic's id before its task fails.
SOURCE_CHECK_PATIENCE = 120.0


class SourceCheck:
    """Behind Spark's Kafka source: gaps below the log start, and topics of another incarnation (module docstring)."""

    def __init__(self, root: Location, client: Mapping[str, str]) -> None:
        self._root = root
        self._client = dict(client)
        self._consumer: Any = None
        self._ids = TopicIdAsker(client, patience=SOURCE_CHECK_PATIENCE)
        self._recorded: dict[str, str | None] = {}
        self._refused: set[str] = set()
        #: Topics confirmed since the batch being written arrived: one answer covers all its runs of a topic.
        self._confirmed: set[str] = set()

    def new_batch(self) -> None:
        """A batch arrived: its records were fetched before now, so an id asked from here on covers them all."""
        self._confirmed.clear()

    def same_incarnation(self, topic: str) -> bool:
        """Whether ``topic`` still has the id the backup recorded (asked after its records were fetched)."""
        if topic in self._refused:
            return False
        if topic in self._confirmed:
            return True
        if topic not in self._recorded:
            record = read_topic_record(self._root, topic)
            self._recorded[topic] = record.topic_id if record is not None else None
        recorded = self._recorded[topic]
        if recorded is None:
            return True  # nothing recorded yet (a topic new to the backup): the job records it and checks it
        now = self._ids.ask([topic]).get(topic)
        if now == recorded:
            self._confirmed.add(topic)
            return True
        self._refused.add(topic)
        log.error(
            "topic %r is not the one backed up here: the backup holds topic id %s, the cluster %s; its records are "
            "not written (it was deleted and created again)",
            topic, recorded, f"now has {now}" if now else "no longer has it",
        )  # fmt: skip
        return False

    def gaps(self, topic: str, partition: int, stored: int | None, offsets: npt.NDArray[np.int64]) -> None:
        """Look at the gaps before and between ``offsets`` (a partition's next records; ``stored``: its last)."""
        fresh = offsets[offsets > stored] if stored is not None else offsets
        if not len(fresh):
            return
        ends = np.flatnonzero(np.diff(fresh) > 1)
        gaps = [(int(fresh[i]) + 1, int(fresh[i + 1]) - 1) for i in ends]
        if stored is not None and fresh[0] > stored + 1:
            gaps.insert(0, (stored + 1, int(fresh[0]) - 1))
        if not gaps:
            return
        start = self._log_start(topic, partition)
        for first, last in gaps:
            if first < start:
                gap = record_gap(self._root, topic, partition, first, min(last, start - 1), how=INFERRED)
                log.info("%s: lost at the source (below its log start %d when read)", gap.describe(), start)

    def _log_start(self, topic: str, partition: int) -> int:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if self._consumer is None:
            self._consumer = Consumer(
                consumer_settings(self._client), logger=logging.getLogger("spark_kafka_backup.librdkafka")
            )
        try:
            low, _ = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        except KafkaException as exc:
            raise ClusterError(
                f"topic {topic!r} partition {partition}: the log start offset cannot be read to tell a gap in the "
                f"offsets read from records lost at the source: {exc}"
            ) from exc
        return int(low)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
