"""What the backup needs the cluster's ACLs to grant (``docs/operations.md`` lists the same).

Asked before the backup writes anything (:mod:`spark_kafka_backup.kafka.permissions`):

- DESCRIBE on the cluster: the list of consumer groups is then complete (without it Kafka lists only the groups
  the principal may describe, and the others would be left out of the stored offsets without a word);
- READ on each topic backed up (DESCRIBE comes with it): its records and offsets;
- DESCRIBE_CONFIGS on each topic: its configuration, recorded for the restore;
- DESCRIBE on each consumer group: its committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spark_kafka_backup.kafka.cluster import consumer_group_ids
from spark_kafka_backup.kafka.permissions import CLUSTER, Permission


def backup_permissions(admin: Any, topics: Iterable[str], *, timeout: float = 15) -> list[Permission]:
    """The permissions a backup of ``topics`` needs, including one per consumer group the cluster lists."""
    needed = [Permission("DESCRIBE", "CLUSTER", CLUSTER, "list every consumer group for the stored offsets")]
    for topic in topics:
        needed.append(Permission("READ", "TOPIC", topic, "read its records"))
        needed.append(Permission("DESCRIBE_CONFIGS", "TOPIC", topic, "record its configuration"))
    # A listing that fails fails the check (asked again while the cluster does not answer): an empty list would
    # leave every group's permission unchecked.
    groups = consumer_group_ids(admin, timeout=timeout)
    needed += [Permission("DESCRIBE", "GROUP", group, "store its committed offsets") for group in groups]
    return needed
