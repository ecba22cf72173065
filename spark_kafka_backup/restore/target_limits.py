"""Would the target delete, reject or change what a restore writes? Decided before anything is produced.

A restore that says it succeeded must leave every record in the target as
it was backed up. A topic's settings can undo that after the fact, or make
the broker refuse records half-way:

====================================  ==========================================================
setting                               what it does to restored records
====================================  ==========================================================
``retention.ms`` (delete policy)      deletes records older than it minutes after the restore
``retention.bytes`` (delete policy)   deletes the oldest records of a partition larger than it
``cleanup.policy`` with ``compact``   keeps only the newest record of each key; rejects keyless
``message.timestamp.before.max.ms``   rejects records older than it
``message.timestamp.after.max.ms``    rejects records newer than now plus it (1 hour by default)
``max.message.bytes``                 rejects a record batch larger than it
``message.timestamp.type``            ``LogAppendTime`` re-stamps every record (see
                                      :mod:`spark_kafka_backup.restore.timestamp_type`)
====================================  ==========================================================

For a topic the restore **creates**, spark-kafka-backup sets what keeps the records
(``retention.ms=-1``, ``retention.bytes=-1``, the timestamp limits at
their maximum, ``max.message.bytes`` at the largest record) instead of the
backed-up or broker default value, and says so; a value given with
``--topic-config`` is the user's and is kept (then checked like an existing
topic's). A compacted topic is created compacted, as backed up: compaction
keeps the newest record of every key, as it did on the source, and the plan
says so. For an **existing** topic the restore refuses, naming the setting,
its value and what lets the user go on (a config change, or
``--accept-retention-loss`` / ``--allow-compacted-target`` where only the
user can know the loss is acceptable).

Timestamps the producer cannot keep are refused too: librdkafka, the
producer beneath the restore, sends a timestamp of 0 as "now", so a record
stamped 0 (1970-01-01T00:00:00Z, valid in Kafka) would come back with the
restore's time (``--restamp-zero-timestamps`` accepts that). Negative
timestamps and Kafka's "no timestamp" (-1) are produced as they are.

This module decides from settings and a :class:`~spark_kafka_backup.restore.profile.RecordsProfile`;
it reads nothing but the cluster's configuration (:func:`effective_topic_configs`,
:func:`broker_configs`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.restore.profile import RecordsProfile
from spark_kafka_backup.text import iso_time

#: Kafka's largest long: "no limit" for the timestamp settings.
LONG_MAX = (1 << 63) - 1
#: A restore takes time: a record must still be accepted this long after the plan (before.max.ms, retention).
MARGIN_MS = 86_400_000
#: librdkafka's ``message.max.bytes`` default and maximum (the producer refuses larger records itself).
PRODUCER_MESSAGE_BYTES = 1_000_000
PRODUCER_MESSAGE_BYTES_MAX = 1_000_000_000
#: The broker's ``socket.request.max.bytes`` default: no produce request may be larger.
REQUEST_BYTES_DEFAULT = 104_857_600

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
CLEANUP_POLICY = "cleanup.policy"
BEFORE_MAX = "message.timestamp.before.max.ms"
AFTER_MAX = "message.timestamp.after.max.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"


@dataclass(frozen=True)
class TopicLimits:
    """A topic's effective settings that can delete, reject or change records (``None``: no limit)."""

    retention_ms: int | None = None
    retention_bytes: int | None = None
    compacted: bool = False
    before_max_ms: int | None = None
    after_max_ms: int | None = None
    max_message_bytes: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> TopicLimits:
        """From effective topic settings (a created topic's: the broker's defaults under its own)."""
        policies = config.get(CLEANUP_POLICY, "delete").replace(" ", "").split(",")
        deletes = "delete" in policies
        return cls(
            retention_ms=_limit(config.get(RETENTION_MS)) if deletes else None,
            retention_bytes=_limit(config.get(RETENTION_BYTES)) if deletes else None,
            compacted="compact" in policies,
            before_max_ms=_limit(config.get(BEFORE_MAX)),
            after_max_ms=_limit(config.get(AFTER_MAX)),
            max_message_bytes=_limit(config.get(MAX_MESSAGE_BYTES)),
        )


@dataclass(frozen=True)
class Choices:
    """What the user said about limits: flags, and the settings given for created topics."""

    accept_retention_loss: bool = False
    allow_compacted_target: bool = False
    restamp_zero_timestamps: bool = False
    #: Keys set with ``--topic-config`` (kept as given on a created topic).
    given: frozenset[str] = frozenset()


@dataclass
class Verdict:
    """The plan's decision for one target topic."""

    #: Why the restore must not go on (each names the topic, the setting and its value, and a way on).
    problems: list[str] = field(default_factory=list)
    #: Settings a created topic gets instead of the planned ones, so that the records survive.
    settings: dict[str, str] = field(default_factory=dict)
    #: What the plan says it did or what will happen (shown by the dry run and logged by the restore).
    notes: list[str] = field(default_factory=list)
    #: The producer's ``message.max.bytes`` needed for the largest record (librdkafka refuses larger ones itself).
    producer_message_bytes: int = PRODUCER_MESSAGE_BYTES
    #: The largest record batch the topic takes (the producer's ``batch.size`` must not exceed it).
    batch_limit: int | None = None


def judge(
    topic: str,
    source_topic: str,
    config: Mapping[str, str],
    profile: RecordsProfile,
    *,
    created: bool,
    choices: Choices,
    largest_partition_bytes: int,
    now_ms: int,
    request_limit: int = REQUEST_BYTES_DEFAULT,
    restamped: bool = False,
) -> Verdict:
    """Decide for target ``topic`` (restored from ``source_topic``) with effective ``config`` (module docstring).

    ``restamped``: the target stamps records with their append time (``LogAppendTime``, accepted with
    ``--restamp``), so the records' own timestamps are not checked.
    """
    judging = _Judging(topic, created, choices, TopicLimits.from_config(config), profile)
    if not restamped:  # else the broker stamps every record: their own timestamps no longer count
        judging.zero_timestamps(source_topic)
        judging.retention_by_time(now_ms)
        judging.timestamp_limits(now_ms)
    judging.compaction(config.get(CLEANUP_POLICY, ""))
    judging.retention_by_size(largest_partition_bytes)
    judging.sizes(request_limit)
    return judging.verdict


@dataclass
class _Judging:
    """One target topic's checks (see :func:`judge`), each adding to :attr:`verdict`."""

    topic: str
    created: bool
    choices: Choices
    limits: TopicLimits
    profile: RecordsProfile
    verdict: Verdict = field(default_factory=Verdict)

    def settle(self, key: str, keeping: str, why: str, way_on: str) -> bool:
        """Give a topic the restore creates ``key=keeping`` and say so (True); else refuse, naming how to go on.

        A value the user gave with ``--topic-config`` is theirs: refused like an existing topic's.
        """
        if self.created and key not in self.choices.given:
            self.verdict.settings[key] = keeping
            self.verdict.notes.append(f"{self.topic}: created with {key}={keeping} ({why})")
            return True
        if self.created:
            fix = f"give a larger --topic-config {key}"
        else:
            fix = f"raise {key} of {self.topic!r} first (kafka-configs --alter --entity-type topics --entity-name " \
                  f"{self.topic})"  # fmt: skip
        self.verdict.problems.append(f"topic {self.topic!r}: {why}; {fix}{way_on}")
        return False

    def zero_timestamps(self, source_topic: str) -> None:
        profile = self.profile
        if not profile.zero_stamped:
            return
        where = ", ".join(f"{p}:{o}" for p, o in profile.zero_stamped_at)
        more = ", ..." if profile.zero_stamped > len(profile.zero_stamped_at) else ""
        what = (
            f"{profile.zero_stamped} record(s) of {source_topic!r} are stamped 0 (1970-01-01T00:00:00.000Z; "
            f"partition:offset {where}{more})"
        )
        if self.choices.restamp_zero_timestamps:
            self.verdict.notes.append(f"{what}: produced with the restore's time (--restamp-zero-timestamps)")
            return
        self.verdict.problems.append(
            f"{what}: librdkafka, the producer under spark-kafka-backup, sends a timestamp of 0 as 'now', so they "
            "would come "
            "back with the restore's time; --restamp-zero-timestamps accepts that"
        )

    def compaction(self, policy: str) -> None:
        if not self.limits.compacted:
            return
        topic, profile = self.topic, self.profile
        if profile.keyless:
            first = profile.keyless_at[0] if profile.keyless_at else None
            at = f" (first: partition {first[0]} offset {first[1]})" if first else ""
            change = "--topic-config cleanup.policy=delete" if self.created else "a topic with cleanup.policy=delete"
            self.verdict.problems.append(
                f"target topic {topic!r} has cleanup.policy={policy}: the broker rejects records without a key, and "
                f"{profile.keyless} restored record(s) have none{at}; restore into {change}"
            )
        elif self.created:
            given = CLEANUP_POLICY in self.choices.given
            self.verdict.notes.append(
                f"{topic}: created with cleanup.policy={policy} "
                + ("as given with --topic-config: the broker keeps the newest record of each key when it compacts"
                   if given else "as backed up: the broker keeps the newest record of each key when it compacts, as "
                   "it did on the source")
            )  # fmt: skip
        elif not self.choices.allow_compacted_target:
            self.verdict.problems.append(
                f"target topic {topic!r} has cleanup.policy={policy}: compaction keeps only the newest record of each "
                "key, so restored records would disappear after the restore; restore into a topic with "
                "cleanup.policy=delete, or add --allow-compacted-target if its keys are unique or older values may go"
            )

    def retention_by_time(self, now_ms: int) -> None:
        oldest, limit = self.profile.oldest, self.limits.retention_ms
        if self.choices.accept_retention_loss or limit is None or oldest is None:
            return
        if oldest < now_ms + MARGIN_MS - limit:  # still kept when the restore ends
            why = (
                f"the oldest restored record ({iso_time(oldest)}) is older than retention.ms={limit}: "
                "the broker would delete it minutes after the restore"
            )
            self.settle(RETENTION_MS, "-1", why, ", or accept the loss with --accept-retention-loss")

    def retention_by_size(self, largest_partition_bytes: int) -> None:
        limit = self.limits.retention_bytes
        if self.choices.accept_retention_loss or limit is None or largest_partition_bytes <= limit:
            return
        why = (
            f"the restore writes up to {largest_partition_bytes} bytes into one partition, more than "
            f"retention.bytes={limit}: the broker would delete the oldest restored records"
        )
        self.settle(RETENTION_BYTES, "-1", why, " (or -1), or accept the loss with --accept-retention-loss")

    def timestamp_limits(self, now_ms: int) -> None:
        # How far each end is from the broker's "now": the oldest by the time the restore may still run, the newest now.
        oldest, newest = self.profile.oldest, self.profile.newest
        before, after = self.limits.before_max_ms, self.limits.after_max_ms
        none = f" (to {LONG_MAX} for none)"
        if before is not None and oldest is not None and now_ms + MARGIN_MS - oldest > before:
            why = (
                f"the broker would reject the oldest restored records ({iso_time(oldest)}) under "
                f"message.timestamp.before.max.ms={before}"
            )
            self.settle(BEFORE_MAX, str(LONG_MAX), why, none)
        if after is not None and newest is not None and newest - now_ms > after:
            why = (
                f"the broker would reject the newest restored records ({iso_time(newest)}) under "
                f"message.timestamp.after.max.ms={after}"
            )
            self.settle(AFTER_MAX, str(LONG_MAX), why, none)

    def sizes(self, request_limit: int) -> None:
        profile, verdict = self.profile, self.verdict
        largest = profile.largest
        if not profile.records:
            return
        at = f" (partition {profile.largest_at[0]} offset {profile.largest_at[1]})" if profile.largest_at else ""
        if largest > min(request_limit, PRODUCER_MESSAGE_BYTES_MAX):
            verdict.problems.append(
                f"topic {self.topic!r}: the largest restored record takes {largest} bytes as a record batch{at}, more "
                f"than a produce request may carry (the broker's socket.request.max.bytes={request_limit}, "
                f"librdkafka's largest message.max.bytes={PRODUCER_MESSAGE_BYTES_MAX})"
            )
            return
        verdict.producer_message_bytes = max(PRODUCER_MESSAGE_BYTES, largest)
        limit = verdict.batch_limit = self.limits.max_message_bytes
        if limit is None or largest <= limit:
            return
        why = (
            f"the largest restored record takes {largest} bytes as a record batch{at}, more than "
            f"max.message.bytes={limit}: the broker would reject it"
        )
        if self.settle(MAX_MESSAGE_BYTES, str(largest), why, f" to {largest}"):
            verdict.batch_limit = largest


def broker_topic_defaults(broker: Mapping[str, str]) -> dict[str, str]:
    """The topic settings a new topic gets from a broker's configuration (those this module judges)."""
    retention = _number(broker.get("log.retention.ms"))
    if retention is None and _number(broker.get("log.retention.minutes")) is not None:
        retention = (_number(broker.get("log.retention.minutes")) or 0) * 60_000
    if retention is None and _number(broker.get("log.retention.hours")) is not None:
        retention = (_number(broker.get("log.retention.hours")) or 0) * 3_600_000
    defaults = {CLEANUP_POLICY: broker.get("log.cleanup.policy", "delete")}
    if retention is not None:
        defaults[RETENTION_MS] = str(retention)
    for broker_key, topic_key in (
        ("log.retention.bytes", RETENTION_BYTES),
        ("log.message.timestamp.before.max.ms", BEFORE_MAX),
        ("log.message.timestamp.after.max.ms", AFTER_MAX),
        ("message.max.bytes", MAX_MESSAGE_BYTES),
        ("log.message.timestamp.type", "message.timestamp.type"),
    ):
        if broker.get(broker_key) is not None:
            defaults[topic_key] = broker[broker_key]
    return defaults


def request_limit(broker: Mapping[str, str]) -> int:
    """The broker's ``socket.request.max.bytes``."""
    return _number(broker.get("socket.request.max.bytes")) or REQUEST_BYTES_DEFAULT


def effective_topic_configs(admin: Any, topics: Iterable[str], *, timeout: float = 30) -> dict[str, dict[str, str]]:
    """Every effective setting of existing topics (defaults included), as the broker reports them."""
    return _describe(admin, "TOPIC", list(topics), timeout)


def broker_configs(admin: Any, *, timeout: float = 30) -> dict[str, str]:
    """One broker's effective configuration (the defaults a new topic gets)."""
    metadata = admin.list_topics(timeout=timeout)
    broker = min(metadata.brokers)
    return _describe(admin, "BROKER", [str(broker)], timeout)[str(broker)]


def _describe(admin: Any, kind: str, names: list[str], timeout: float) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    if not names:
        return {}
    resource_type = ResourceType.TOPIC if kind == "TOPIC" else ResourceType.BROKER
    try:
        futures = admin.describe_configs([ConfigResource(resource_type, name) for name in names])
        return {
            resource.name: {
                key: entry.value for key, entry in future.result(timeout).items() if entry.value is not None
            }
            for resource, future in futures.items()
        }
    except Exception as exc:
        reason = str(exc.args[0]) if exc.args else type(exc).__name__
        raise ClusterError(f"cannot read the configuration of {kind.lower()}(s) {', '.join(names)}: {reason}") from exc


def now_ms() -> int:
    return int(time.time() * 1000)


def _limit(text: str | None) -> int | None:
    """A setting that limits when set: ``None`` for absent, negative (-1: none) or Kafka's largest long."""
    value = _number(text)
    if value is None or value < 0 or value >= LONG_MAX:
        return None
    return value


def _number(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None
