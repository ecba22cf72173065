"""The mark a failover leaves on a standby cluster, so that no follower feeds it again.

``restore --failover`` writes a record per restored topic into the standby's topic :data:`STANDBY_TOPIC` (one
partition, compacted, kept for ever: unlike a consumer group's offsets, it does not expire), key ``failover:`` and
the restored topic's name (a standby cluster may hold the standbys of several backups: each fails over alone), value::

    {"v": 1, "state": "started" | "done", "failedOverAt": <epoch ms>, "host": <where>, "until": <checkpoint or null>}

``started`` is written before the failover's last pass, ``done`` after it: a failover interrupted in between (a kill,
the standby not answering) is carried out again by the next ``--failover``, never taken as done. A follower reads the
mark before every pass, and each of its tasks once more after fencing the partition's other producers (so that a pass
already under way when the failover began produces nothing after it); it stops when either state is there.
``restore --follow`` refuses to start on a standby that carries it: its consumers now read and write there, and
another pass would put the backup's newer records after theirs. Deleting the topic lets followers feed the cluster
again, for those who mean it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.kafka.cluster import _reason, admin_client, create_topics, read_committed_records
from spark_kafka_backup.text import iso_time

#: The standby's topic holding the failover mark.
STANDBY_TOPIC = "kbackup-standby"


def _key(topic: str) -> bytes:
    return b"failover:" + topic.encode()


@dataclass(frozen=True)
class FailoverMark:
    at: int
    host: str
    until: int | None = None
    #: ``started`` (the last pass may not have run yet) or ``done``.
    state: str = "done"

    def encode(self) -> bytes:
        fields = {"v": 1, "state": self.state, "failedOverAt": self.at, "host": self.host, "until": self.until}
        return json.dumps(fields, sort_keys=True).encode()

    @property
    def done(self) -> bool:
        return self.state == "done"

    def describe(self) -> str:
        frozen = f", frozen at checkpoint {self.until}" if self.until is not None else ""
        unfinished = "" if self.done else " (not finished: run --failover again)"
        return f"failed over at {iso_time(self.at)} on {self.host}{frozen}{unfinished}"


def new_mark(until: int | None) -> FailoverMark:
    return FailoverMark(int(time.time() * 1000), socket.gethostname(), until, "started")


def finished(mark: FailoverMark) -> FailoverMark:
    return replace(mark, state="done")


def write_mark(client: Mapping[str, str], topics: Iterable[str], mark: FailoverMark) -> None:
    """Write ``mark`` for each of the standby's ``topics`` into :data:`STANDBY_TOPIC` (created when missing),
    acknowledged by every in-sync replica."""
    from confluent_kafka import Producer

    admin = admin_client({**client, "socket.timeout.ms": "10000"})
    kept = {"cleanup.policy": "compact", "retention.ms": "-1"}
    create_topics(admin, {STANDBY_TOPIC: 1}, configs={STANDBY_TOPIC: kept}, exist_ok=True)
    producer = Producer({**client, "enable.idempotence": "true", "acks": "all"})
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error.str())

    try:
        for topic in sorted(set(topics)):
            producer.produce(STANDBY_TOPIC, key=_key(topic), value=mark.encode(), partition=0, on_delivery=delivered)
        left = producer.flush(60)
    except Exception as exc:
        raise ClusterError(f"cannot mark the standby as failed over (topic {STANDBY_TOPIC}): {_reason(exc)}") from exc
    if left or failures:
        reason = failures[0] if failures else "no acknowledgement in 60 s"
        raise ClusterError(f"cannot mark the standby as failed over (topic {STANDBY_TOPIC}): {reason}")


def read_mark(client: Mapping[str, str], topics: Iterable[str], *, asking: Any = None) -> FailoverMark | None:
    """The failover mark of any of the standby's ``topics`` (``None``: none of them was failed over). ``asking``: a
    consumer of the standby already made, to ask whether :data:`STANDBY_TOPIC` exists (a follower asks at every pass
    and in every task, and the topic is there only once something failed over). A consumer, never an admin client or
    a producer: asked for a topic by name, those make the broker create it (``auto.create.topics.enable``), with the
    broker's defaults instead of a compacted topic kept for ever."""
    if not _exists(client, asking):
        return None
    keys = {_key(topic) for topic in topics}
    found = None
    for _, record in read_committed_records(client, STANDBY_TOPIC, 0, 0):
        if record.key in keys and record.value:
            found = record.value
    if found is None:
        return None
    try:
        fields = json.loads(found)
        until = fields.get("until")
        return FailoverMark(int(fields["failedOverAt"]), str(fields["host"]), None if until is None else int(until),
                            str(fields.get("state", "done")))  # fmt: skip
    except (ValueError, TypeError, KeyError, AttributeError):
        # Not our record, but the topic is ours alone: someone marked the standby by hand.
        return FailoverMark(0, "unknown")


def _exists(client: Mapping[str, str], asking: Any = None) -> bool:
    """Whether the standby has :data:`STANDBY_TOPIC`, asked by name: a principal not allowed to describe it is an
    error, not "no mark" (a follower would feed a failed-over standby)."""
    from confluent_kafka import KafkaError

    from spark_kafka_backup.errors import AccessDeniedError

    own = asking is None
    if own:
        from confluent_kafka import Consumer

        from spark_kafka_backup.kafka.client_settings import consumer_settings

        asking = Consumer({**consumer_settings(client), "allow.auto.create.topics": "false"})
    try:
        found = asking.list_topics(topic=STANDBY_TOPIC, timeout=30).topics.get(STANDBY_TOPIC)
    except Exception as exc:
        why = _reason(exc)
        raise ClusterError(f"cannot look for the standby's failover mark (topic {STANDBY_TOPIC}): {why}") from exc
    finally:
        if own:
            asking.close()
    error = getattr(found, "error", None)
    if found is None or (error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        return False
    if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise AccessDeniedError(
            f"the standby's principal may not describe the topic {STANDBY_TOPIC}, where a failover marks the standby: "
            "grant DESCRIBE and READ on it (and CREATE and WRITE to the principal that fails over)"
        )
    if error is not None:
        raise ClusterError(f"cannot look for the standby's failover mark (topic {STANDBY_TOPIC}): {error.str()}")
    return bool(found.partitions)
