"""Would the target cluster delete, or refuse, the records a restore writes? Checked before producing.

A restored record keeps its original timestamp, and Kafka applies time-based
retention to record timestamps: a segment whose newest record is older than
the topic's ``retention.ms`` is deleted by the broker's next retention check
(every ``log.retention.check.interval.ms``, 5 minutes by default). Restoring a
year-old backup into a topic with the default 7 days reports success and is
gone minutes later. And a broker with ``message.timestamp.before.max.ms`` (the
topic setting; ``log.message.timestamp.before.max.ms`` on the broker) rejects
records older than that outright, half-way through a restore.

So the plan compares, per target topic, the oldest timestamp it will restore
with the target's effective settings (the existing topic's, or those the
restore creates it with: the backed-up configuration, ``--topic-config``
overrides, else the broker's defaults) and refuses with one line that names
the topic, the oldest timestamp and the setting, unless the settings keep the
data or the user accepts the loss (``--accept-retention-loss``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kbackup.catalog.build import segment_time_range
from kbackup.catalog.model import PartitionCatalog, SegmentEntry
from kbackup.errors import ClusterError
from kbackup.format.record import TimestampType
from kbackup.partition.reader import PartitionReader
from kbackup.partition.segment_reader import SegmentIndexFile, iter_segment
from kbackup.restore.selection import Window

#: Kafka's "no limit" for both settings.
UNLIMITED = -1
_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class TimeLimits:
    """A topic's effective time limits (``None``: none applies)."""

    retention_ms: int | None
    before_max_ms: int | None

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> TimeLimits:
        """From effective topic settings (``retention.ms``, ``cleanup.policy``, ``message.timestamp.before.max.ms``)."""
        retention: int | None = _number(config.get("retention.ms"))
        if retention is not None and retention < 0:
            retention = None
        if "delete" not in config.get("cleanup.policy", "delete").replace(" ", "").split(","):
            retention = None  # compact only: time does not delete
        before = _number(config.get("message.timestamp.before.max.ms"))
        if before is not None and (before < 0 or before >= _LONG_MAX):
            before = None
        return cls(retention, before)


def broker_topic_defaults(broker: Mapping[str, str]) -> dict[str, str]:
    """The topic settings a new topic gets from a broker's configuration."""
    retention = _number(broker.get("log.retention.ms"))
    if retention is None and _number(broker.get("log.retention.minutes")) is not None:
        retention = (_number(broker.get("log.retention.minutes")) or 0) * 60_000
    if retention is None and _number(broker.get("log.retention.hours")) is not None:
        retention = (_number(broker.get("log.retention.hours")) or 0) * 3_600_000
    defaults = {"cleanup.policy": broker.get("log.cleanup.policy", "delete")}
    if retention is not None:
        defaults["retention.ms"] = str(retention)
    before = broker.get("log.message.timestamp.before.max.ms")
    if before is not None:
        defaults["message.timestamp.before.max.ms"] = before
    return defaults


def age_problem(topic: str, oldest: int, limits: TimeLimits, *, now_ms: int, created: bool) -> str | None:
    """Why the target would lose records as old as ``oldest`` (epoch ms), or ``None`` when it keeps them."""
    when = _iso(oldest)
    if limits.before_max_ms is not None and oldest < now_ms - limits.before_max_ms:
        return (
            f"topic {topic!r}: the oldest restored record ({when}) is older than "
            f"message.timestamp.before.max.ms={limits.before_max_ms} allows: the broker would reject it"
        )
    if limits.retention_ms is not None and oldest < now_ms - limits.retention_ms:
        fix = (
            "restore with --topic-config retention.ms=-1 (or a longer retention)"
            if created
            else f"raise the retention.ms of {topic!r} first"
        )
        return (
            f"topic {topic!r}: the oldest restored record ({when}) is older than its retention.ms="
            f"{limits.retention_ms}: the broker would delete it minutes after the restore; {fix}"
        )
    return None


def oldest_timestamp(reader: PartitionReader, window: Window, catalog: PartitionCatalog | None) -> int | None:
    """The oldest timestamp among the records the window selects (``None``: no record carries one).

    A finished segment the catalog describes and the window takes whole is
    answered from the catalog; other segments are read.
    """
    cataloged = {entry.name: entry for entry in (catalog.segments if catalog is not None else ())}
    oldest: int | None = None
    for segment in reader.segments:
        if segment.name in window.skip_segments:
            continue
        entry = cataloged.get(segment.name)
        whole = entry is not None and not window.by_time and _inside(entry, window)
        if whole:
            assert entry is not None
            if entry.min_timestamp is not None and entry.min_timestamp > 0:
                oldest = entry.min_timestamp if oldest is None else min(oldest, entry.min_timestamp)
            continue
        records_path, index_path = reader.segment_paths(segment)
        with SegmentIndexFile(index_path, legacy=reader.legacy) as index:
            if not index.count:
                continue
        if window.from_offset is None and window.to_offset is None and not window.by_time:
            # The whole segment: its timestamps gathered at fixed places (about a second per GiB).
            low, _ = segment_time_range(records_path, index_path, legacy=reader.legacy)
            if low is None or low > 0:
                if low is not None:
                    oldest = low if oldest is None else min(oldest, low)
                continue
        for record in iter_segment(records_path, index_path, from_offset=window.from_offset, legacy=reader.legacy):
            if window.to_offset is not None and record.offset > window.to_offset:
                break
            if not window.selects(record):
                continue
            stamp = record.timestamp
            stamped = record.timestamp_type in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)
            if stamped and stamp is not None and stamp > 0:
                oldest = stamp if oldest is None else min(oldest, stamp)
    return oldest


def _inside(entry: SegmentEntry, window: Window) -> bool:
    """Whether the window's offset bounds take the cataloged segment whole."""
    low, high = window.from_offset, window.to_offset
    if low is not None and (entry.first_offset is None or entry.first_offset < low):
        return False
    return high is None or (entry.last_offset is not None and entry.last_offset <= high)


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
        raise ClusterError(f"cannot read the configuration of {kind.lower()}(s) {', '.join(names)}: {reason}") from None


def now_ms() -> int:
    return int(time.time() * 1000)


def _number(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _iso(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
