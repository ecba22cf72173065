"""What the restore needs the target cluster's ACLs to grant (``docs/operations.md`` lists the same).

Asked once the plan knows the target topics and groups, before a topic is created or a record produced
(:mod:`spark_kafka_backup.kafka.permissions`):

- CREATE on each topic the restore creates, DESCRIBE_CONFIGS on the cluster (the defaults a new topic gets, for
  the retention check);
- WRITE on each target topic, and READ (the restore reads what a target partition already holds, and its
  progress marker commits an offset for the partition);
- DESCRIBE_CONFIGS on each existing target topic (its retention and timestamp type); ALTER_CONFIGS where the
  restore sets ``message.timestamp.type`` after producing;
- READ on each consumer group it remaps and on ``kbackup-restore-progress`` (the progress markers);
- WRITE on the transactional ids ``kbackup-restore.*`` (one per target partition): Kafka cannot be asked about
  those, so a real run starts the first partition's transactional producer as the check.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import PROGRESS_GROUP
from spark_kafka_backup.kafka.permissions import CLUSTER, Permission, refuse
from spark_kafka_backup.restore.marker import TRANSACTIONAL_ID_PREFIX

_PROBE_LOG = logging.getLogger("spark_kafka_backup.restore.transaction-check")
_PROBE_LOG.propagate = False  # its one message is the refusal spark-kafka-backup prints itself

TRANSACTIONS = Permission(
    "WRITE", "TRANSACTIONAL_ID", TRANSACTIONAL_ID_PREFIX, "produce each partition in transactions", prefixed=True
)


class TargetTopic(Protocol):
    """What the permissions of one target topic depend on (a topic of the restore's plan)."""

    @property
    def target_topic(self) -> str: ...

    @property
    def create_partitions(self) -> int | None: ...

    @property
    def set_timestamp_type(self) -> str | None: ...


def restore_permissions(topics: Sequence[TargetTopic], groups: Iterable[str]) -> list[Permission]:
    """The permissions a restore into ``topics`` that remaps ``groups`` needs (the transactional ids aside, see the
    module docstring)."""
    needed: list[Permission] = []
    if any(topic.create_partitions is not None for topic in topics):
        needed.append(Permission("DESCRIBE_CONFIGS", "CLUSTER", CLUSTER, "read the defaults a new topic gets"))
    for topic in topics:
        name = topic.target_topic
        if topic.create_partitions is not None:
            needed.append(Permission("CREATE", "TOPIC", name, "create it"))
        else:
            needed.append(Permission("DESCRIBE_CONFIGS", "TOPIC", name, "check its retention and timestamp type"))
        needed.append(Permission("WRITE", "TOPIC", name, "produce its records"))
        needed.append(Permission("READ", "TOPIC", name, "read what it holds and commit the restore's progress"))
        if topic.set_timestamp_type is not None:
            needed.append(Permission("ALTER_CONFIGS", "TOPIC", name, "set message.timestamp.type after the restore"))
    needed.append(Permission("READ", "GROUP", PROGRESS_GROUP, "keep the restore's progress markers"))
    needed += [Permission("READ", "GROUP", group, "commit its remapped offsets") for group in sorted(set(groups))]
    return needed


def check_transactions(client: Mapping[str, str], transactional_id: str, *, timeout: float = 30) -> None:
    """Start (and drop) a transactional producer with ``transactional_id``: refused in one line without WRITE.

    It fences an older producer of the same id, as the partition's task does right after.
    """
    from confluent_kafka import KafkaError, KafkaException, Producer

    # A refusal is fatal to the producer, and librdkafka would log it on stderr beside spark-kafka-backup's line: its
    # log goes to a logger that keeps it (``--debug`` shows spark-kafka-backup's loggers).
    producer = Producer({**client, "transactional.id": transactional_id, "logger": _PROBE_LOG})
    try:
        producer.init_transactions(timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            refuse([TRANSACTIONS], client)
        raise ClusterError(f"cannot start a transactional producer ({transactional_id}): {error.str()}") from exc
