"""Which of a backed-up topic's configurations a created topic takes (``--topic-configs data|all|none``).

A backup records every configuration its topics had set (``topic.json``). Some describe the data: how long records
are kept, how they are compacted, what a timestamp means, how large a record or a segment may be, how it is
compressed. Others are about the cluster the topic lived on: how many replicas must acknowledge a write
(``min.insync.replicas``), whether an out-of-sync replica may lead (``unclean.leader.election.enable``), replication
throttles, tiered storage, flushing. A backup may come from a cluster run by others, or be tampered with: copying
the second kind would let it weaken the durability of the production cluster a restore writes to.

By default (``data``) only the first kind is copied, named in :data:`DATA_CONFIGS` (an allow-list: a key
spark-kafka-backup does not know is not copied); ``all`` copies every one, ``none`` none. ``--drop-topic-config`` leaves
out more and ``--topic-config`` sets any key either way. What is not copied is said in the dry run and in the log, with
why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

POLICIES = ("data", "all", "none")
_NOT_DATA = (
    "durability, replication and broker behaviour are the target cluster's, not the data's: --topic-configs all "
    "or --topic-config KEY=VALUE sets it"
)
DEFAULT_POLICY = "data"

#: Topic configurations that describe the records (Apache Kafka 4.1's topic-level configurations).
DATA_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "index.interval.bytes",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
    }
)


@dataclass(frozen=True)
class ConfigChoice:
    """The backed-up configurations a created topic takes, and those it does not with the reason."""

    copied: dict[str, str] = field(default_factory=dict)
    #: key -> (value, why)
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)

    def describe_skipped(self, topic: str) -> list[str]:
        """``"TOPIC: KEY=VALUE of the backup is not set (why)"`` per key, by key."""
        return [
            f"{topic}: {key}={value} of the backup is not set ({why})" for key, (value, why) in self.skipped.items()
        ]


def choose_configs(
    recorded: Mapping[str, str], policy: str, *, dropped: Collection[str] = (), given: Collection[str] = ()
) -> ConfigChoice:
    """Split ``recorded`` by ``policy`` (:data:`POLICIES`); ``dropped`` keys are left out, ``given`` ones are set by
    the user (``--topic-config``) and so neither copied nor reported as skipped."""
    if policy not in POLICIES:
        raise ValueError(f"unknown topic config policy {policy!r}")
    copied: dict[str, str] = {}
    skipped: dict[str, tuple[str, str]] = {}
    for key, value in sorted(recorded.items()):
        if key in given:
            continue
        if key in dropped:
            skipped[key] = (value, "--drop-topic-config")
        elif policy == "none":
            skipped[key] = (value, "--topic-configs none")
        elif policy == "data" and key not in DATA_CONFIGS:
            skipped[key] = (value, _NOT_DATA)
        else:
            copied[key] = value
    return ConfigChoice(copied, skipped)
