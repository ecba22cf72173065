"""The cluster around the topics, compared with a restore's target: ``restore --metadata SECTIONS`` with
``--metadata-policy check`` (the default).

The backup's newest captured version (:mod:`spark_kafka_backup.catalog.cluster_metadata`) is renamed as the records
are: topic names of literal ACLs by ``--topic-map``, principals (and so SCRAM user names and quotas' user entities)
by ``--principal-map``;
prefixed patterns are kept as they were. It is then compared with the target, read the same way
(:mod:`spark_kafka_backup.kafka.cluster_metadata`), section by section:

- ``acls``: bindings the target lacks, and bindings only the target has;
- ``users``: SCRAM credentials (user and mechanism) the target lacks, each with the command that creates it (Kafka
  never gave the password: the operator supplies it), different iterations, and credentials only the target has;
- ``configs``: dynamic broker configurations, the cluster-wide defaults and each broker's by broker id, the target
  lacks, has with another value, or has alone (a sensitive value is compared by its presence only);
- ``quotas``: client quotas, by entity (user, client id, IP, or a type's default) and quota name: missing, of
  another value, or only on the target.

``check`` prints every difference and exits 1 when there is one, 0 when there is none; it changes nothing on the
target and restores no record. A section the backup or the target would not let be described is refused (nothing
can be proved equal).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.cluster_metadata import (
    AclEntry,
    BrokerConfigs,
    ClusterMetadata,
    NotCaptured,
    QuotaEntry,
    ScramUser,
    metadata_as_of,
    quota_value,
)
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.kafka.cluster_metadata import capture_metadata
from spark_kafka_backup.text import count, iso_time, shown

log = logging.getLogger("spark_kafka_backup.restore")

SECTIONS = ("acls", "users", "configs", "quotas")
POLICIES = ("check",)


@dataclass
class MetadataDiff:
    """What differs between the backup's cluster metadata (renamed) and the target's, one line each."""

    missing: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.missing) + len(self.different) + len(self.extra)


def parse_sections(text: str) -> frozenset[str]:
    """``--metadata``: a comma-separated list of :data:`SECTIONS`, or ``all``."""
    chosen = {part.strip() for part in text.split(",") if part.strip()}
    if chosen == {"all"}:
        return frozenset(SECTIONS)
    unknown = sorted(chosen - set(SECTIONS))
    if unknown or not chosen:
        raise UsageError(f"--metadata {text}: expected a comma-separated list of {', '.join(SECTIONS)}, or all")
    return frozenset(chosen)


def renamed(
    metadata: ClusterMetadata, topic_map: Mapping[str, str], principal_map: Mapping[str, str]
) -> ClusterMetadata:
    """The version as the restore's target should have it (module docstring)."""

    def acl(entry: AclEntry) -> AclEntry:
        name = entry.name
        if entry.resource_type == "TOPIC" and entry.pattern_type == "LITERAL":
            name = topic_map.get(name, name)
        return replace(entry, name=name, principal=principal_map.get(entry.principal, entry.principal))

    def user(entry: ScramUser) -> ScramUser:
        principal = principal_map.get(f"User:{entry.name}", f"User:{entry.name}")  # a User: principal (settings)
        return replace(entry, name=principal.removeprefix("User:"))

    def quota(entry: QuotaEntry) -> QuotaEntry:
        entity = dict(entry.entity)
        if entity.get("user") is not None:
            entity["user"] = principal_map.get(f"User:{entity['user']}", f"User:{entity['user']}").removeprefix("User:")
        return replace(entry, entity=entity)

    acls = metadata.acls if isinstance(metadata.acls, NotCaptured) else tuple(sorted(acl(a) for a in metadata.acls))
    quotas = metadata.quotas
    if not isinstance(quotas, NotCaptured):
        quotas = tuple(sorted((quota(q) for q in quotas), key=QuotaEntry.key))
    users = metadata.scram_users
    if not isinstance(users, NotCaptured):
        users = tuple(sorted(user(u) for u in users))
    return replace(metadata, acls=acls, quotas=quotas, scram_users=users)


def compare(
    backup: ClusterMetadata, target: ClusterMetadata, sections: frozenset[str], *, servers: str
) -> MetadataDiff:
    diff = MetadataDiff()
    if "acls" in sections:
        assert not isinstance(backup.acls, NotCaptured)
        assert not isinstance(target.acls, NotCaptured)
        wanted, there = set(backup.acls), set(target.acls)
        diff.missing += [f"ACL {a.describe()}" for a in sorted(wanted - there)]
        diff.extra += [f"ACL {a.describe()}" for a in sorted(there - wanted)]
    if "users" in sections:
        assert not isinstance(backup.scram_users, NotCaptured)
        assert not isinstance(target.scram_users, NotCaptured)
        wanted_users = {(u.name, u.mechanism): u for u in backup.scram_users}
        there_users = {(u.name, u.mechanism): u for u in target.scram_users}
        for key, user in sorted(wanted_users.items()):
            found = there_users.get(key)
            if found is None:
                diff.missing.append(
                    f"SCRAM user {shown(user.name)} ({user.mechanism}, {user.iterations} iterations): create it with "
                    f"kafka-configs.sh --bootstrap-server {servers} --alter --add-config "
                    f"'{user.mechanism}=[iterations={user.iterations},password=...]' --entity-type users "
                    f"--entity-name {shown(user.name)}"
                )
            elif found.iterations != user.iterations:
                diff.different.append(
                    f"SCRAM user {shown(user.name)} ({user.mechanism}): {found.iterations} "
                    f"iterations on the target, {user.iterations} in the backup"
                )
        diff.extra += [
            f"SCRAM user {shown(name)} ({mechanism})"
            for name, mechanism in sorted(set(there_users) - set(wanted_users))
        ]
    if "quotas" in sections:
        assert not isinstance(backup.quotas, NotCaptured)
        assert not isinstance(target.quotas, NotCaptured)
        wanted_quotas = {(q.key(), name): (q, value) for q in backup.quotas for name, value in q.values.items()}
        there_quotas = {(q.key(), name): (q, value) for q in target.quotas for name, value in q.values.items()}
        for quota_key in sorted(set(wanted_quotas) | set(there_quotas)):
            name = quota_key[1]
            if quota_key not in there_quotas:
                diff.missing.append(f"client quota {_quota(*wanted_quotas[quota_key], name)}")
            elif quota_key not in wanted_quotas:
                diff.extra.append(f"client quota {_quota(*there_quotas[quota_key], name)}")
            elif wanted_quotas[quota_key][1] != there_quotas[quota_key][1]:
                (entry, in_backup), (_, on_target) = wanted_quotas[quota_key], there_quotas[quota_key]
                diff.different.append(f"client quota ({entry.entity_text()}) {name}: {quota_value(on_target)} on the "
                                      f"target, {quota_value(in_backup)} in the backup")  # fmt: skip
    if "configs" in sections:
        assert isinstance(backup.broker_configs, BrokerConfigs)
        assert isinstance(target.broker_configs, BrokerConfigs)
        scopes = [("cluster default", backup.broker_configs.cluster, target.broker_configs.cluster)]
        for broker, configs in sorted(backup.broker_configs.brokers.items()):
            if broker not in target.broker_ids:
                diff.missing.append(
                    f"broker {broker} (its dynamic configuration: {', '.join(sorted(configs))}): the "
                    "target has no broker of that id"
                )
                continue
            scopes.append((f"broker {broker}", configs, target.broker_configs.brokers.get(broker, {})))
        for broker, configs in sorted(target.broker_configs.brokers.items()):
            if broker not in backup.broker_configs.brokers:
                scopes.append((f"broker {broker}", {}, configs))
        for scope, wanted_configs, there_configs in scopes:
            for name in sorted(set(wanted_configs) | set(there_configs)):
                if name not in there_configs:
                    diff.missing.append(f"config ({scope}) {name}={_value(wanted_configs[name])}")
                elif name not in wanted_configs:
                    diff.extra.append(f"config ({scope}) {name}={_value(there_configs[name])}")
                elif None not in (wanted_configs[name], there_configs[name]) and (
                    wanted_configs[name] != there_configs[name]
                ):
                    diff.different.append(
                        f"config ({scope}) {name}: {_value(there_configs[name])} on the target, "
                        f"{_value(wanted_configs[name])} in the backup"
                    )
    return diff


def _quota(entry: QuotaEntry, value: float, name: str) -> str:
    return f"({entry.entity_text()}) {name}={quota_value(value)}"


def _value(value: str | None) -> str:
    return "(sensitive)" if value is None else shown(value)


def check_metadata(
    settings: Any, admin: Any, sections: frozenset[str], principal_map: Mapping[str, str], out: TextIO
) -> int:
    """``--metadata-policy check``: print the differences; 1 when there is one (module docstring)."""
    as_of = _as_of(settings)
    version = metadata_as_of(settings.source, as_of)
    if version is None:
        when = "" if as_of is None else f" captured at or before {iso_time(as_of)}"
        raise SparkKafkaBackupError(
            f"--metadata: the backup {settings.source} holds no cluster metadata{when} (a backup by an earlier version "
            "of spark-kafka-backup, or by the original tool, has none)"
        )
    target = capture_metadata(admin, [], client=settings.client, timeout=30, sections=sections)
    for section in sorted(sections):
        refusal = _not_comparable(section, version, target)
        if refusal is not None:
            raise SparkKafkaBackupError(f"--metadata {section}: {refusal}; nothing was compared or changed")
    backup = renamed(version, settings.topic_map, principal_map)
    diff = compare(backup, target, sections, servers=settings.client["bootstrap.servers"])
    out.write(
        f"cluster metadata of the backup as of {iso_time(version.captured_at)} (cluster "
        f"{shown(version.cluster_id)}), {', '.join(sorted(sections))}, against the target "
        f"{settings.client['bootstrap.servers']} (cluster {shown(target.cluster_id)}):\n"
    )
    for line in diff.missing:
        out.write(f"  missing on the target: {line}\n")
    for line in diff.different:
        out.write(f"  different: {line}\n")
    for line in diff.extra:
        out.write(f"  only on the target: {line}\n")
    if diff:
        out.write(f"{count(len(diff), 'difference')}; nothing was changed (--metadata-policy check)\n")
        return 1
    out.write("no difference\n")
    return 0


def _as_of(settings: Any) -> int | None:
    """``--metadata-as-of``: a time, or the time of a checkpoint's cut (``None``: the newest version)."""
    if settings.metadata_checkpoint is None:
        return settings.metadata_time  # type: ignore[no-any-return]
    checkpoint = checkpoints.read_checkpoint(settings.source, settings.metadata_checkpoint)
    if checkpoint.status != "completed" or checkpoint.taken_at is None:
        raise UsageError(f"--metadata-as-of {checkpoint.id}: checkpoint {checkpoint.id} is {checkpoint.status}, not "
                         "completed")  # fmt: skip
    return checkpoint.taken_at


def _not_comparable(section: str, backup: ClusterMetadata, target: ClusterMetadata) -> str | None:
    """Why ``section`` cannot be compared (``None``: it can)."""
    attribute = {"acls": "acls", "users": "scram_users", "configs": "broker_configs", "quotas": "quotas"}[section]
    for where, metadata in (("the backup", backup), ("the target", target)):
        found = getattr(metadata, attribute)
        if isinstance(found, NotCaptured):
            return f"{where} did not let them be described: {found.describe()}"
    return None
