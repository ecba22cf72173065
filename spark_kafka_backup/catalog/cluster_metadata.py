"""The cluster around the topics, as the backup found it: ACLs, client quotas, SCRAM users, dynamic broker
configurations, and each backed-up topic's partition count and replication factor.

A backup captures it when it starts, about once a minute while it runs and when a snapshot ends
(:mod:`spark_kafka_backup.kafka.cluster_metadata` reads it), and keeps a **version** each time it differs from the
last one kept, one JSON document each::

    STATE/cluster-metadata/metadata-<capture time, epoch ms, 15 digits>.json

    {"version": 1, "capturedAtMs": 1733370000000, "clusterId": "q1Sh-9_ISia_zwGINzRvyQ",
     "acls": {"captured": true, "bindings": [{"resourceType": "TOPIC", "name": "orders", "patternType": "LITERAL",
              "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}, ...]},
     "quotas": {"captured": true, "entries": [{"entity": {"user": "alice", "client-id": null},
                "values": {"producer_byte_rate": 1048576.0}}, ...]},
     "scramUsers": {"captured": true, "users": [{"name": "alice", "mechanism": "SCRAM-SHA-512",
                    "iterations": 8192}, ...]},
     "brokerConfigs": {"captured": false, "reason": "...", "permission": "DESCRIBE_CONFIGS on the cluster"},
     "topics": {"orders": {"partitions": 3, "replicationFactor": 3}}}

A section the backup's principal may not describe is kept as not captured, with the reason and the missing
permission: never left out silently. Kafka never returns a SCRAM user's secret nor a sensitive configuration's
value: the users are kept by name, mechanism and iterations, sensitive values as ``null`` with their names in
``sensitive``. A quota entity's ``null`` name is the entity type's default (``<default>`` in Kafka's tools).

The version in force at a time is the newest captured at or before it (a capture equal to the last version keeps
no file: that version stands until a later one differs). Writes are whole-object (a crash leaves the last version
or the new one); a reader takes the versions whose name and document agree and refuses any other file there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import MAX_TIME_MS, parse_document
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, read_limited, storage_for, write_whole
from spark_kafka_backup.text import count

METADATA_VERSION = 1
#: A version's document at most (ACLs and quotas of a large cluster fit many times over).
MAX_METADATA_BYTES = 64 << 20
_NAME = re.compile(r"^metadata-([0-9]{15})\.json$")


def metadata_dir(root: Location) -> Location:
    return state_dir(root) / "cluster-metadata"


@dataclass(frozen=True)
class NotCaptured:
    """A section the backup could not read, and why."""

    reason: str
    #: The permission the backup's principal lacks ("DESCRIBE on the cluster"), when that is the reason.
    permission: str | None = None

    def describe(self) -> str:
        return self.reason if self.permission is None else f"{self.reason} (needs {self.permission})"


@dataclass(frozen=True, order=True)
class AclEntry:
    resource_type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER
    name: str
    pattern_type: str  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: str
    permission: str  # ALLOW or DENY

    def describe(self) -> str:
        pattern = "" if self.pattern_type == "LITERAL" else f" ({self.pattern_type.lower()})"
        host = "" if self.host == "*" else f" from {self.host}"
        return f"{self.permission} {self.principal}{host} {self.operation} on {self.resource_type} {self.name}{pattern}"


@dataclass(frozen=True)
class QuotaEntry:
    #: Entity type (``user``, ``client-id``, ``ip``) -> name; ``None``: the type's default entity.
    entity: Mapping[str, str | None]
    values: Mapping[str, float]

    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((kind, "\0default" if name is None else name) for kind, name in self.entity.items()))

    def entity_text(self) -> str:
        kinds = sorted(self.entity.items())
        return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in kinds)

    def describe(self) -> str:
        values = ", ".join(f"{name}={quota_value(value)}" for name, value in sorted(self.values.items()))
        return f"{self.entity_text()}: {values}"


def quota_value(value: float) -> str:
    """A quota as Kafka's tools show it: 1048576 rather than 1.04858e+06."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e18 else repr(value)


@dataclass(frozen=True, order=True)
class ScramUser:
    name: str
    mechanism: str
    iterations: int


@dataclass(frozen=True)
class BrokerConfigs:
    #: Cluster-wide dynamic defaults (``kafka-configs.sh --entity-type brokers --entity-default``).
    cluster: Mapping[str, str | None]
    #: Per-broker dynamic configurations, by broker id.
    brokers: Mapping[int, Mapping[str, str | None]]
    #: Names whose values Kafka does not return (passwords, keys): their value is ``None`` above.
    sensitive: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicShape:
    partitions: int
    replication_factor: int


@dataclass(frozen=True)
class ClusterMetadata:
    """One capture (module docstring)."""

    captured_at: int
    cluster_id: str
    acls: tuple[AclEntry, ...] | NotCaptured
    quotas: tuple[QuotaEntry, ...] | NotCaptured
    scram_users: tuple[ScramUser, ...] | NotCaptured
    broker_configs: BrokerConfigs | NotCaptured
    topics: Mapping[str, TopicShape] = field(default_factory=dict)
    #: The brokers the cluster listed (those down then are not among them, nor are their configurations).
    broker_ids: tuple[int, ...] = ()

    def summary(self) -> str:
        """One line: what the version holds."""

        def told(section: Any, noun: str, plural: str) -> str:
            return f"{plural} not captured" if isinstance(section, NotCaptured) else count(len(section), noun, plural)

        configs = self.broker_configs
        held = (
            "broker configurations not captured"
            if isinstance(configs, NotCaptured)
            else count(
                len(configs.cluster) + sum(len(c) for c in configs.brokers.values()), "dynamic broker configuration"
            )
        )
        return ", ".join(
            [
                told(self.acls, "ACL", "ACLs"),
                told(self.quotas, "client quota", "client quotas"),
                told(self.scram_users, "SCRAM credential", "SCRAM credentials"),
                held,
                count(len(self.topics), "topic"),
            ]
        )

    def content(self) -> dict[str, Any]:
        """The document less its capture time: what two captures are compared by."""
        document = self.document()
        del document["capturedAtMs"]
        return document

    def document(self) -> dict[str, Any]:
        return {
            "version": METADATA_VERSION,
            "capturedAtMs": self.captured_at,
            "clusterId": self.cluster_id,
            "brokerIds": list(self.broker_ids),
            "acls": _section(self.acls, lambda acls: {"bindings": [_acl_document(acl) for acl in sorted(acls)]}),
            "quotas": _section(
                self.quotas,
                lambda quotas: {
                    "entries": [
                        {"entity": dict(sorted(q.entity.items())), "values": dict(sorted(q.values.items()))}
                        for q in sorted(quotas, key=QuotaEntry.key)
                    ]
                },
            ),
            "scramUsers": _section(
                self.scram_users,
                lambda users: {
                    "users": [
                        {"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations} for u in sorted(users)
                    ]
                },
            ),
            "brokerConfigs": _section(
                self.broker_configs,
                lambda configs: {
                    "cluster": dict(sorted(configs.cluster.items())),
                    "brokers": {str(b): dict(sorted(c.items())) for b, c in sorted(configs.brokers.items())},
                    "sensitive": sorted(configs.sensitive),
                },
            ),
            "topics": {
                name: {"partitions": shape.partitions, "replicationFactor": shape.replication_factor}
                for name, shape in sorted(self.topics.items())
            },
        }

    def encode(self) -> bytes:
        return json.dumps(self.document(), indent=1).encode()

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> ClusterMetadata:
        document = parse_document(data, file=file, what="cluster metadata", floats=True)
        try:
            if document.get("version") != METADATA_VERSION:
                raise ValueError(f"version {document.get('version')!r}, expected {METADATA_VERSION}")
            captured_at = _int(document["capturedAtMs"], 0, MAX_TIME_MS)
            return cls(
                captured_at,
                str(document["clusterId"]),
                _read_section(document["acls"], lambda s: tuple(_acl(a) for a in s["bindings"])),
                _read_section(
                    document["quotas"],
                    lambda s: tuple(
                        QuotaEntry(
                            {str(k): None if v is None else str(v) for k, v in q["entity"].items()},
                            {str(k): float(v) for k, v in q["values"].items()},
                        )
                        for q in s["entries"]
                    ),
                ),
                _read_section(
                    document["scramUsers"],
                    lambda s: tuple(
                        ScramUser(str(u["name"]), str(u["mechanism"]), _int(u["iterations"], 0, 1 << 31))
                        for u in s["users"]
                    ),
                ),
                _read_section(
                    document["brokerConfigs"],
                    lambda s: BrokerConfigs(
                        _configs(s["cluster"]),
                        {int(b): _configs(c) for b, c in s["brokers"].items()},
                        tuple(str(name) for name in s.get("sensitive", ())),
                    ),
                ),
                {
                    str(name): TopicShape(_int(t["partitions"], 0, 1 << 31), _int(t["replicationFactor"], 0, 1 << 15))
                    for name, t in document["topics"].items()
                },
                tuple(_int(b, 0, 1 << 31) for b in document.get("brokerIds", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(
                "not a cluster metadata document of spark-kafka-backup",
                file=file,
                expected=f"version {METADATA_VERSION} with every section",
                found=str(exc),
            ) from exc


def _section(value: Any, encode: Any) -> dict[str, Any]:
    if isinstance(value, NotCaptured):
        return {"captured": False, "reason": value.reason, "permission": value.permission}
    return {"captured": True, **encode(value)}


def _read_section(section: Mapping[str, Any], decode: Any) -> Any:
    if section["captured"] is False:
        permission = section.get("permission")
        return NotCaptured(str(section["reason"]), None if permission is None else str(permission))
    if section["captured"] is not True:
        raise ValueError(f"captured is {section['captured']!r}, expected true or false")
    return decode(section)


def _acl_document(acl: AclEntry) -> dict[str, str]:
    return {
        "resourceType": acl.resource_type,
        "name": acl.name,
        "patternType": acl.pattern_type,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission": acl.permission,
    }


def _acl(document: Mapping[str, Any]) -> AclEntry:
    return AclEntry(
        *(
            str(document[key])
            for key in ("resourceType", "name", "patternType", "principal", "host", "operation", "permission")
        )
    )


def _configs(document: Mapping[str, Any]) -> dict[str, str | None]:
    return {str(name): None if value is None else str(value) for name, value in document.items()}


def _int(value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{value!r} is not an integer from {low} to {high}")
    return value


def version_path(root: Location, captured_at: int) -> Location:
    return metadata_dir(root) / f"metadata-{captured_at:015d}.json"


def version_times(root: Location) -> list[int]:
    """The capture times of the kept versions, oldest first."""
    directory = metadata_dir(root)
    names = storage_for(directory).list_files(directory) or []
    times = []
    for name in names:
        match = _NAME.match(name)
        if match is None:
            if name.startswith("metadata-"):
                raise FormatError(
                    "not a cluster metadata version's name",
                    file=str(directory / name),
                    expected="metadata-<15 digits>.json",
                    found=name,
                )
            continue  # a temporary file of a write under way
        times.append(int(match[1]))
    return sorted(times)


def read_version(root: Location, captured_at: int) -> ClusterMetadata:
    path = version_path(root, captured_at)
    metadata = ClusterMetadata.decode(read_limited(path, MAX_METADATA_BYTES), file=str(path))
    if metadata.captured_at != captured_at:
        raise FormatError(
            "a cluster metadata version whose name and capture time differ",
            file=str(path),
            expected=f"capturedAtMs {captured_at}",
            found=str(metadata.captured_at),
        )
    return metadata


def metadata_as_of(root: Location, time_ms: int | None = None) -> ClusterMetadata | None:
    """The version in force at ``time_ms`` (the newest when ``None``); ``None``: none captured by then."""
    times = [t for t in version_times(root) if time_ms is None or t <= time_ms]
    return read_version(root, times[-1]) if times else None


def keep_if_changed(root: Location, metadata: ClusterMetadata, last: ClusterMetadata | None) -> ClusterMetadata | None:
    """Write ``metadata`` as a new version unless it says what ``last`` (the newest kept) says; the version written
    (``None``: none)."""
    if last is not None and last.content() == metadata.content():
        return None
    if last is not None and metadata.captured_at <= last.captured_at:
        metadata = replace(metadata, captured_at=last.captured_at + 1)  # a clock stepped back: versions stay in order
    write_whole(version_path(root, metadata.captured_at), metadata.encode())
    return metadata


def changes(older: ClusterMetadata | None, newer: ClusterMetadata) -> list[str]:
    """What ``newer`` changes from ``older``, one line each (for ``describe --metadata``)."""
    lines: list[str] = []
    sections: Sequence[tuple[str, Any, Any, Any]] = (
        ("ACL", older.acls if older else (), newer.acls, AclEntry.describe),
        ("quota", older.quotas if older else (), newer.quotas, QuotaEntry.describe),
        (
            "SCRAM user",
            older.scram_users if older else (),
            newer.scram_users,
            lambda u: f"{u.name} ({u.mechanism}, {u.iterations} iterations)",
        ),
    )
    for what, before, after, show in sections:
        if isinstance(after, NotCaptured):
            if not isinstance(before, NotCaptured) or before != after:
                lines.append(f"{what}s: not captured: {after.describe()}")
            continue
        if isinstance(before, NotCaptured):
            before = ()
        old, new = {show(item) for item in before}, {show(item) for item in after}
        lines += [f"+ {what}: {line}" for line in sorted(new - old)]
        lines += [f"- {what}: {line}" for line in sorted(old - new)]
    before_configs = older.broker_configs if older else BrokerConfigs({}, {})
    after_configs = newer.broker_configs
    if isinstance(after_configs, NotCaptured):
        if before_configs != after_configs:
            lines.append(f"broker configurations: not captured: {after_configs.describe()}")
    else:
        if isinstance(before_configs, NotCaptured):
            before_configs = BrokerConfigs({}, {})
        scopes = [("cluster default", before_configs.cluster, after_configs.cluster)]
        for broker in sorted(set(before_configs.brokers) | set(after_configs.brokers)):
            scopes.append(
                (f"broker {broker}", before_configs.brokers.get(broker, {}), after_configs.brokers.get(broker, {}))
            )
        for scope, old_configs, new_configs in scopes:
            for name in sorted(set(old_configs) | set(new_configs)):
                if name not in new_configs:
                    lines.append(f"- config ({scope}): {name}")
                elif name not in old_configs or old_configs[name] != new_configs[name]:
                    value = "(sensitive)" if new_configs[name] is None else new_configs[name]
                    lines.append(f"+ config ({scope}): {name}={value}")
    old_topics = older.topics if older else {}
    for name, shape in sorted(newer.topics.items()):
        if old_topics.get(name) != shape:
            lines.append(
                f"+ topic {name}: {shape.partitions} partitions, replication factor {shape.replication_factor}"
            )
    lines += [f"- topic {name}" for name in sorted(set(old_topics) - set(newer.topics))]
    old_brokers = set(older.broker_ids) if older else set()
    lines += [f"+ broker {broker} seen" for broker in sorted(set(newer.broker_ids) - old_brokers)]
    lines += [f"- broker {broker} not seen (down, or gone)" for broker in sorted(old_brokers - set(newer.broker_ids))]
    return lines
