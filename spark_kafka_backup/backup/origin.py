"""One backup target holds one Kafka cluster's topics, each in one incarnation.

Offsets only mean something within one incarnation of one topic: a topic
deleted and created again under the same name starts at offset 0 again, and
another cluster's topic of the same name has offsets of its own. Appending
either to an existing backup would interleave two logs by offset, and the
Spark checkpoint (which skips offsets it has already read) would keep the
placement check from ever seeing the overlap. So the backup records, in each
topic's record (:mod:`spark_kafka_backup.catalog.topics`), the cluster id and the topic
id (KIP-516) it read from, and refuses, before Spark starts and at every
offset round of a continuous backup, when they differ from the cluster's.

A topic recorded without an origin (a backup made by the original tool or by
a spark-kafka-backup before origins were kept) is adopted: its origin is recorded from
the cluster and a warning says that the files could not be checked against it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import BackupNotFoundError, OriginError
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.storage import Location

log = logging.getLogger("spark_kafka_backup.backup")


@dataclass(frozen=True)
class Recreated:
    """A topic the target holds from another incarnation: ``recorded`` is the backup's id, ``found`` the cluster's."""

    topic: str
    recorded: str
    found: str

    def describe(self, target: Location, cluster_id: str) -> str:
        return (
            f"topic {self.topic!r} in {target} was backed up from topic id {self.recorded}, but on cluster "
            f"{cluster_id} it now has topic id {self.found} (deleted and created again): its offsets start over and "
            "would mix with the backed-up ones, so it is not backed up here (the other topics are); back it up into "
            "a new target directory"
        )


def check_origin(
    target: Location, cluster_id: str, topic_ids: Mapping[str, str], *, servers: str, warn: bool = True
) -> list[Recreated]:
    """Refuse a target whose recorded cluster id differs from the cluster's; return the topics it holds from
    another incarnation (module docstring).

    ``topic_ids`` holds the selected topics that exist on the cluster; every
    topic the target holds must come from ``cluster_id``. ``warn`` logs the
    topics adopted without a recorded origin.
    """
    try:
        held = list_topics(target)
    except BackupNotFoundError:
        return []  # a new target
    recreated = []
    for topic in held:
        recorded = read_topic_record(target, topic)
        if recorded is None or recorded.cluster_id is None:
            if warn and topic in topic_ids:
                log.warning(
                    "topic %s in %s has no recorded cluster or topic id (an older backup): "
                    "recording cluster %s, topic id %s; its existing files could not be checked against them",
                    topic,
                    target,
                    cluster_id,
                    topic_ids[topic],
                )
            continue
        if recorded.cluster_id != cluster_id:
            raise OriginError(
                f"{target} holds a backup of cluster {recorded.cluster_id} (topic {topic!r}, "
                f"topic id {recorded.topic_id}), but {servers} is cluster {cluster_id}: a backup target holds one "
                "cluster's topics; back up into a new target directory"
            )
        found = topic_ids.get(topic)
        if found is not None and recorded.topic_id is not None and found != recorded.topic_id:
            recreated.append(Recreated(topic, recorded.topic_id, found))
    return recreated
