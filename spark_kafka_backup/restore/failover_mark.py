"""The mark a failover leaves on a standby cluster, so that no follower feeds it again.

``restore --failover`` commits an offset of the group :data:`~spark_kafka_backup.kafka.cluster.STANDBY_GROUP` on
partition 0 of each restored topic of the standby, with this metadata (the offset itself, 0, means nothing)::

    {"v": 1, "failedOverAt": <epoch ms>, "host": <where the failover ran>, "until": <checkpoint id or null>}

It lives in the standby cluster, not in the backup: a follower on another machine reading another copy of the backup
still finds it. A follower reads it before every pass and stops when it is there; ``restore --follow`` refuses to
start on a standby that carries it (its consumers now read and write there: another pass would put the backup's
newer records after theirs). Deleting the group (``kafka-consumer-groups --delete --group kbackup-standby``) lets a
follower feed the cluster again, for those who mean it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.client_settings import consumer_settings
from spark_kafka_backup.kafka.cluster import STANDBY_GROUP, _reason
from spark_kafka_backup.text import iso_time


@dataclass(frozen=True)
class FailoverMark:
    at: int
    host: str
    until: int | None = None

    def metadata(self) -> str:
        return json.dumps({"v": 1, "failedOverAt": self.at, "host": self.host, "until": self.until}, sort_keys=True)

    def describe(self) -> str:
        frozen = f", frozen at checkpoint {self.until}" if self.until is not None else ""
        return f"failed over at {iso_time(self.at)} on {self.host}{frozen}"


def new_mark(until: int | None) -> FailoverMark:
    return FailoverMark(int(time.time() * 1000), socket.gethostname(), until)


def _consumer(client: Mapping[str, str]) -> Any:
    from confluent_kafka import Consumer

    return Consumer({**consumer_settings(client), "group.id": STANDBY_GROUP, "enable.auto.commit": "false"})


def write_mark(client: Mapping[str, str], topics: Iterable[str], mark: FailoverMark) -> None:
    """Commit the mark on partition 0 of each of ``topics`` (which exist on the standby)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, 0, 0, metadata=mark.metadata()) for topic in sorted(set(topics))]
    if not wanted:
        return
    consumer = _consumer(client)
    try:
        consumer.commit(offsets=wanted, asynchronous=False)
    except Exception as exc:
        raise ClusterError(f"cannot mark the standby as failed over (group {STANDBY_GROUP}): {_reason(exc)}") from exc
    finally:
        consumer.close()


def read_mark(client: Mapping[str, str], topics: Iterable[str], *, timeout: float = 30) -> FailoverMark | None:
    """The failover mark on partition 0 of any of ``topics`` (``None``: the standby was not failed over)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, 0) for topic in sorted(set(topics))]
    if not wanted:
        return None
    consumer = _consumer(client)
    try:
        committed = consumer.committed(wanted, timeout)
    except Exception as exc:
        raise ClusterError(f"cannot read the standby's failover mark (group {STANDBY_GROUP}): {_reason(exc)}") from exc
    finally:
        consumer.close()
    for entry in committed:
        if entry.offset < 0 or not entry.metadata:
            continue
        try:
            fields = json.loads(entry.metadata)
            return FailoverMark(int(fields["failedOverAt"]), str(fields["host"]), fields.get("until"))
        except (ValueError, TypeError, KeyError):
            # Not our metadata, but the group is ours alone: a commit there means someone failed it over by hand.
            return FailoverMark(0, "unknown")
    return None
