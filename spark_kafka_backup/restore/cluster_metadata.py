"""The cluster around the topics, compared with a restore's target and changed by policy: ``restore --metadata
SECTIONS --metadata-policy check|apply|replace``.

The backup's captured version (:mod:`spark_kafka_backup.catalog.cluster_metadata`; the newest, or the one in force
at ``--metadata-as-of``) is renamed as the records are: topic names of literal ACLs by ``--topic-map``, principals
(and so SCRAM user names and quotas' user entities) by ``--principal-map``; prefixed patterns are kept as they were.
It is then compared with the target, read the same way (:mod:`spark_kafka_backup.kafka.cluster_metadata`), section
by section, each difference a :class:`Difference`:

- ``acls``: bindings the target lacks, and bindings only the target has;
- ``users``: SCRAM credentials (user and mechanism) the target lacks, each with the command that creates it (Kafka
  never gave the password: the operator supplies it), different iterations, and credentials only the target has;
- ``configs``: dynamic broker configurations, the cluster-wide defaults and each broker's by broker id, the target
  lacks, has with another value, or has alone (a sensitive value is compared by its presence only);
- ``quotas``: client quotas, by entity (user, client id, IP, or a type's default) and quota name: missing, of
  another value, or only on the target;
- ``topics``: each backed-up topic's configuration (``topic.json``, the newest: it has no history), as a restore would
  give the topic it creates (``--topic-configs``, ``--drop-topic-config``, ``--topic-config``), against the target
  topic's, renamed by ``--topic-map``: settings of another value, and settings set only on the target. A target topic
  that does not exist is for a restore of the records to create. A change that can delete or re-stamp records already
  there (a shorter retention, compaction, LogAppendTime; a retention setting only on the target, which deleting
  would give the broker's default) is never made: it is printed for the operator, with the command.

``check`` prints every difference and exits 1 when there is one, 0 when there is none; it changes nothing. ``apply``
makes what is missing and changes what differs, never deletes; ``replace`` also deletes what only the target has,
and only with ``--delete-extra``. Either, with ``--dry-run``, prints what it would do and changes nothing. What only
an operator can do (a SCRAM password, a sensitive value Kafka never gave) is printed with the command to run. The
permissions the changes need on the cluster (ALTER, ALTER_CONFIGS) are asked before the first change, then the
changes are made (:mod:`spark_kafka_backup.kafka.cluster_metadata_changes`), and the target is compared again: the
exit is 0 only when nothing the policy covers still differs. A section the backup or the target would not let be
described is refused (nothing can be proved equal).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
from spark_kafka_backup.catalog.topics import read_topic_record
from spark_kafka_backup.errors import SparkKafkaBackupError, UsageError
from spark_kafka_backup.kafka.cluster_metadata import capture_metadata, topic_settings
from spark_kafka_backup.kafka.cluster_metadata_changes import MetadataChanges, QuotaEntity, make_changes, quota_entity
from spark_kafka_backup.kafka.permissions import missing_permissions, principal_of, refuse_missing
from spark_kafka_backup.kafka.wire_admin import wire_client_settings
from spark_kafka_backup.partition.layout import list_topics
from spark_kafka_backup.restore.topic_configs import choose_configs
from spark_kafka_backup.text import count, iso_time, shown

log = logging.getLogger("spark_kafka_backup.restore")

SECTIONS = ("acls", "users", "configs", "quotas", "topics")
#: How long the target is compared again after the changes (a broker takes a change from the controller a moment
#: later; an authorizer its ACLs).
SETTLE_SECONDS = 30.0

_DONE = {"missing": "created", "different": "changed", "extra": "deleted"}
_WOULD = {"missing": "would create", "different": "would change", "extra": "would delete"}


@dataclass(frozen=True)
class Difference:
    """One difference between the backup (renamed) and the target."""

    kind: str  # "missing" (on the target), "different", or "extra" (only on the target)
    text: str
    #: What makes the target agree (``None``: only an operator can; ``text`` says how).
    fix: MetadataChanges | None
    #: What it is about (section, resource, name), whatever the values: a difference still there after the changes
    #: is found by it.
    key: tuple[str, ...] = ()

    def about(self) -> tuple[str, ...]:
        return self.key or (self.text,)

    def line(self) -> str:
        return {"missing": "missing on the target", "different": "different", "extra": "only on the target"}[
            self.kind
        ] + f": {self.text}"


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
) -> list[Difference]:
    """The differences, missing first, then different, then only on the target."""
    found: list[Difference] = []
    if "acls" in sections:
        assert not isinstance(backup.acls, NotCaptured)
        assert not isinstance(target.acls, NotCaptured)
        wanted, there = set(backup.acls), set(target.acls)
        found += [Difference("missing", f"ACL {a.describe()}", MetadataChanges(create_acls=(a,)), ("acl", str(a)))
                  for a in sorted(wanted - there)]  # fmt: skip
        found += [Difference("extra", f"ACL {a.describe()}", MetadataChanges(delete_acls=(a,)), ("acl", str(a)))
                  for a in sorted(there - wanted)]  # fmt: skip
    if "users" in sections:
        found += _users(backup, target, servers)
    if "quotas" in sections:
        found += _quotas(backup, target)
    if "configs" in sections:
        found += _configs(backup, target, servers)
    order = {"missing": 0, "different": 1, "extra": 2}
    return sorted(found, key=lambda difference: order[difference.kind])  # stable: each section's order within


def _users(backup: ClusterMetadata, target: ClusterMetadata, servers: str) -> list[Difference]:
    assert not isinstance(backup.scram_users, NotCaptured)
    assert not isinstance(target.scram_users, NotCaptured)
    found = []
    wanted = {(u.name, u.mechanism): u for u in backup.scram_users}
    there = {(u.name, u.mechanism): u for u in target.scram_users}
    for key, user in sorted(wanted.items()):
        command = (
            f"kafka-configs.sh --bootstrap-server {servers} --alter --add-config "
            f"'{user.mechanism}=[iterations={user.iterations},password=...]' --entity-type users "
            f"--entity-name {shown(user.name)}"
        )
        on_target = there.get(key)
        if on_target is None:
            found.append(Difference("missing", f"SCRAM user {shown(user.name)} ({user.mechanism}, {user.iterations} "
                                    f"iterations): create it with {command}", None, ("user", *key)))  # fmt: skip
        elif on_target.iterations != user.iterations:
            found.append(Difference("different", f"SCRAM user {shown(user.name)} ({user.mechanism}): "
                                    f"{on_target.iterations} iterations on the target, {user.iterations} in the "
                                    f"backup: set its password again with {command}", None,
                                    ("user", *key)))  # fmt: skip
    found += [
        Difference(
            "extra",
            f"SCRAM user {shown(name)} ({mechanism})",
            MetadataChanges(delete_scram=((name, mechanism),)),
            ("user", name, mechanism),
        )
        for name, mechanism in sorted(set(there) - set(wanted))
    ]
    return found


def _quotas(backup: ClusterMetadata, target: ClusterMetadata) -> list[Difference]:
    assert not isinstance(backup.quotas, NotCaptured)
    assert not isinstance(target.quotas, NotCaptured)
    wanted = {(quota_entity(q), name): (q, value) for q in backup.quotas for name, value in q.values.items()}
    there = {(quota_entity(q), name): (q, value) for q in target.quotas for name, value in q.values.items()}
    found = []

    def order(key: tuple[QuotaEntity, str]) -> tuple[tuple[tuple[str, str], ...], str]:
        return tuple((kind, "\0default" if name is None else name) for kind, name in key[0]), key[1]

    for key in sorted(set(wanted) | set(there), key=order):
        entity, name = key
        about = ("quota", str(order(key)), name)
        if key not in there:
            entry, value = wanted[key]
            found.append(Difference("missing", f"client quota ({entry.entity_text()}) {name}={quota_value(value)}",
                                    MetadataChanges(quotas=((entity, name, value),)), about))  # fmt: skip
        elif key not in wanted:
            entry, value = there[key]
            found.append(Difference("extra", f"client quota ({entry.entity_text()}) {name}={quota_value(value)}",
                                    MetadataChanges(quotas=((entity, name, None),)), about))  # fmt: skip
        elif wanted[key][1] != there[key][1]:
            (entry, in_backup), on_target = wanted[key], there[key][1]
            found.append(Difference("different", f"client quota ({entry.entity_text()}) {name}: "
                                    f"{quota_value(on_target)} on the target, {quota_value(in_backup)} in the backup",
                                    MetadataChanges(quotas=((entity, name, in_backup),)), about))  # fmt: skip
    return found


def _configs(backup: ClusterMetadata, target: ClusterMetadata, servers: str) -> list[Difference]:
    assert isinstance(backup.broker_configs, BrokerConfigs)
    assert isinstance(target.broker_configs, BrokerConfigs)
    found = []
    scopes: list[tuple[int | None, Mapping[str, str | None], Mapping[str, str | None]]] = [
        (None, backup.broker_configs.cluster, target.broker_configs.cluster)
    ]
    for broker, configs in sorted(backup.broker_configs.brokers.items()):
        if broker not in target.broker_ids:
            found.append(Difference("missing", f"broker {broker} (its dynamic configuration: "
                                    f"{', '.join(sorted(configs))}): the target has no broker of that id",
                                    None, ("broker", str(broker))))  # fmt: skip
            continue
        scopes.append((broker, configs, target.broker_configs.brokers.get(broker, {})))
    for only_there, configs in sorted(target.broker_configs.brokers.items()):
        if only_there not in backup.broker_configs.brokers:
            scopes.append((only_there, {}, configs))
    for scope_broker, wanted, there in scopes:
        scope = "cluster default" if scope_broker is None else f"broker {scope_broker}"

        def fix(name: str, value: str | None, broker: int | None = scope_broker) -> MetadataChanges:
            if broker is None:
                return MetadataChanges(cluster_defaults=((name, value),))
            return MetadataChanges(broker_configs=((broker, name, value),))

        for name in sorted(set(wanted) | set(there)):
            about = ("config", scope, name)
            if name not in there:
                value = wanted[name]
                if value is None:  # sensitive: Kafka never gave the backup its value
                    entity = "--entity-default" if scope_broker is None else f"--entity-name {scope_broker}"
                    found.append(Difference("missing", f"config ({scope}) {name}=(sensitive): its value was never "
                                            f"given to the backup; set it with kafka-configs.sh --bootstrap-server "
                                            f"{servers} --alter --add-config '{name}=...' --entity-type brokers "
                                            f"{entity}", None, about))  # fmt: skip
                else:
                    found.append(Difference("missing", f"config ({scope}) {name}={shown(value)}", fix(name, value),
                                            about))  # fmt: skip
            elif name not in wanted:
                text = f"config ({scope}) {name}={_value(there[name])}"
                if there[name] is None or name.startswith("listener."):  # the target's own listeners and secrets
                    found.append(Difference("extra", f"{text}: the target's own (a listener's or a secret): not "
                                            "deleted by this tool", None, about))  # fmt: skip
                else:
                    found.append(Difference("extra", text, fix(name, None), about))
            elif None not in (wanted[name], there[name]) and wanted[name] != there[name]:
                found.append(Difference("different", f"config ({scope}) {name}: {_value(there[name])} on the target, "
                                        f"{_value(wanted[name])} in the backup", fix(name, wanted[name]),
                                        about))  # fmt: skip
    return found


#: Settings whose shorter value (or deletion: the broker's default) lets the broker delete records sooner.
_KEEPING = ("retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes", "delete.retention.ms",
            "min.compaction.lag.ms", "max.compaction.lag.ms")  # fmt: skip


def _loses_records(name: str, there: str | None, wanted: str | None) -> str | None:
    """Why setting ``name`` from ``there`` to ``wanted`` (``None``: deleting it) could delete or re-stamp records
    (``None``: it cannot)."""
    if wanted is None:
        if name in _KEEPING or name in ("cleanup.policy", "message.timestamp.type"):
            return "deleting it gives the topic the broker's default, which could delete or re-stamp records"
        return None
    if name in _KEEPING and _shorter(wanted, there):
        return f"a {name} of {wanted} can delete records the topic keeps today"
    if name == "cleanup.policy":
        added = _policies(wanted) - _policies(there)
        if "compact" in added:
            return "compaction keeps only the newest record of each key"
        if "delete" in added:
            return "the delete policy lets retention delete records compaction keeps today"
    if name == "message.timestamp.type" and wanted == "LogAppendTime" and there != "LogAppendTime":
        return "LogAppendTime gives each record produced after it the broker's time"
    return None


def _policies(value: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (value or "").split(",") if part.strip())


def _same(name: str, there: str | None, wanted: str | None) -> bool:
    """Kafka's value ``there`` is the same setting as ``wanted`` (a list of policies in any order)."""
    if name == "cleanup.policy":
        return _policies(there) == _policies(wanted)
    return there == wanted


def _shorter(wanted: str, there: str | None) -> bool:
    try:
        new, old = int(wanted), int(there) if there is not None else -1
    except ValueError:
        return True  # not a number: not proved harmless
    return new >= 0 and (old < 0 or new < old)


def compare_topics(
    wanted: Mapping[str, tuple[str, Mapping[str, str]]],
    there: Mapping[str, Mapping[str, tuple[str, bool]]],
    compared: Any,
    servers: str,
) -> list[Difference]:
    """``wanted``: target topic -> (backed-up topic, the configuration a restore would give it); ``there``: each
    existing target topic's settings -> (value, set on the topic); ``compared(name)``: whether a setting only on the
    target is the restore's to compare (it would copy such a setting)."""
    found = []
    for topic, (source, configs) in sorted(wanted.items()):
        named = topic if topic == source else f"{topic} (the backup's {source})"
        settings = there.get(topic)
        if settings is None:
            found.append(Difference("missing", f"topic {named}: not on the target; a restore of its records "
                                    "creates it with this configuration", None, ("topic", topic)))  # fmt: skip
            continue
        changes: list[tuple[str, str, str | None, str | None]] = []  # kind, name, on the target, in the backup
        for name, wanted_value in sorted(configs.items()):
            current = settings.get(name, (None, False))[0]
            if not _same(name, current, wanted_value):
                changes.append(("different", name, current, wanted_value))
        for name, (set_value, own) in sorted(settings.items()):
            if own and name not in configs and compared(name):
                changes.append(("extra", name, set_value, None))
        for kind, name, current, value in changes:
            if kind == "different":
                shown_current = "not a setting it knows" if current is None else shown(current)
                text = f"topic {named} {name}: {shown_current} on the target, {_value(value)} in the backup"
            else:
                text = f"topic {named} {name}={_value(current)} (set on the target only)"
            risk = _loses_records(name, current, value)
            if current is None and kind == "different":
                risk = "the target's Kafka does not know this setting"
            if risk is not None:
                change = f"--add-config {name}={value}" if value is not None else f"--delete-config {name}"
                text += (
                    f": not changed by this tool ({risk}); if that is what you want: kafka-configs.sh "
                    f"--bootstrap-server {servers} --alter --entity-type topics --entity-name {topic} {change}"
                )
            fix = None if risk is not None else MetadataChanges(topic_configs=((topic, name, value),))
            found.append(Difference(kind, text, fix, ("topic", topic, name)))
    return found


def _wanted_topics(settings: Any) -> dict[str, tuple[str, Mapping[str, str]]]:
    """Each target topic -> (its backed-up topic, the configuration a restore would give it); a topic the backup has
    no configuration record of is left out (it could not be told apart from one with no setting)."""
    topics = list_topics(settings.source)
    settings.check_target_names(topics)  # two backed-up topics onto one target: refused
    wanted: dict[str, tuple[str, Mapping[str, str]]] = {}
    for topic in topics:
        record = read_topic_record(settings.source, topic)
        if record is None:
            log.warning("--metadata topics: the backup holds no configuration record of topic %s: not compared", topic)
            continue
        choice = choose_configs(record.config, settings.topic_configs, dropped=settings.drop_topic_config,
                                given=settings.topic_config)  # fmt: skip
        wanted[settings.target_topic(topic)] = (topic, {**choice.copied, **settings.topic_config})
    return wanted


def _value(value: str | None) -> str:
    return "(sensitive)" if value is None else shown(value)


def metadata_policy(settings: Any, admin: Any, out: TextIO) -> int:
    """``restore --metadata``: compare, and change by ``settings.metadata_policy`` (module docstring); the exit code."""
    sections: frozenset[str] = settings.metadata
    policy: str = settings.metadata_policy
    version = _version(settings)
    backup = renamed(version, settings.topic_map, settings.principal_map)
    servers = settings.client["bootstrap.servers"]
    wanted_topics = _wanted_topics(settings) if "topics" in sections else {}

    def differences_now(done: str = "nothing was compared or changed") -> tuple[ClusterMetadata, list[Difference]]:
        target = _target(settings, admin, sections, version, done=done)
        found = compare(backup, target, sections, servers=servers)
        if "topics" in sections:

            def compared(name: str) -> bool:
                return bool(choose_configs({name: ""}, settings.topic_configs,
                                           dropped=settings.drop_topic_config).copied)  # fmt: skip

            there = topic_settings(admin, list(wanted_topics))
            found += compare_topics(wanted_topics, there, compared, servers)
        order = {"missing": 0, "different": 1, "extra": 2}
        found.sort(key=lambda difference: order[difference.kind])
        if policy == "replace":
            found = [_unless_own(d, settings.client) for d in found]
        return target, found

    target, differences = differences_now()
    out.write(
        f"cluster metadata of the backup as of {iso_time(version.captured_at)} (cluster "
        f"{shown(version.cluster_id)}), {', '.join(sorted(sections))}, against the target {servers} (cluster "
        f"{shown(target.cluster_id)}), --metadata-policy {policy}{' --dry-run' if settings.dry_run else ''}:\n"
    )
    if policy == "check":
        for difference in differences:
            out.write(f"  {difference.line()}\n")
        if differences:
            out.write(f"{count(len(differences), 'difference')}; nothing was changed (--metadata-policy check)\n")
            return 1
        out.write("no difference\n")
        return 0
    covered = [d for d in differences if d.kind != "extra" or policy == "replace"]
    changes = sum((d.fix for d in covered if d.fix is not None), MetadataChanges())
    if changes.quotas or changes.cluster_defaults:
        wire_client_settings(settings.client)  # settings the second connection cannot honour: refused now
    if settings.dry_run:
        for difference in differences:
            out.write(f"  {_planned(difference, policy, _WOULD)}\n")
        principal = principal_of(settings.client)
        for permission in missing_permissions(admin, changes.permissions()):
            out.write(f"  would be refused: {permission.refusal(principal)}\n")
        made = sum(1 for d in covered if d.fix is not None)
        out.write(f"dry run: {count(made, 'change')} would be made, {len(covered) - made} left for you; "
                  "nothing was changed\n")  # fmt: skip
        return 0
    if changes:
        refuse_missing(admin, changes.permissions(), settings.client, done="nothing was changed")
    failed = make_changes(admin, settings.client, changes) if changes else []
    remaining = covered
    if changes:  # compared again once the target has taken them (a broker takes a change a moment later)
        about = {d.about() for d in covered}
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            _, now = differences_now(done="changes were made (run it again to see them)")
            remaining = [d for d in now if d.about() in about]
            if all(d.fix is None for d in remaining) or time.monotonic() >= deadline:
                break
            time.sleep(1)
    still = {d.about() for d in remaining}
    for difference in differences:
        if difference.about() in still or difference.fix is None or difference not in covered:
            out.write(f"  {_planned(difference, policy, None)}\n")
        else:
            out.write(f"  {_DONE[difference.kind]}: {difference.text}\n")
    for line in failed:
        out.write(f"  failed: {line}\n")
    made = sum(1 for d in covered if d.fix is not None and d.about() not in still)
    if not remaining:
        out.write(f"{count(made, 'change')} made; the target has what the backup had ({', '.join(sorted(sections))})"
                  "\n")  # fmt: skip
        return 0
    out.write(f"{count(made, 'change')} made; {count(len(remaining), 'difference')} left (above)\n")
    return 1


def _unless_own(difference: Difference, client: Mapping[str, str]) -> Difference:
    """Under replace, the restore's own SCRAM credential and its own principal's ACLs are never deleted (the run
    would lock itself out, half-way)."""
    fix = difference.fix
    if fix is None:
        return difference
    if any(user == client.get("sasl.username") for user, _ in fix.delete_scram):
        return replace(difference, text=f"{difference.text}: the restore's own login, not deleted", fix=None)
    if any(acl.principal == principal_of(client) for acl in fix.delete_acls):
        return replace(difference, text=f"{difference.text}: the restore's own principal's, not deleted", fix=None)
    return difference


def _planned(difference: Difference, policy: str, would: Mapping[str, str] | None) -> str:
    """A difference's line under apply or replace: what is (or would be) done, or why not."""
    if difference.kind == "extra" and policy == "apply":
        return f"kept (only on the target; --metadata-policy replace deletes it): {difference.text}"
    if difference.fix is None:
        return f"left for you: {difference.text}"
    if would is None:
        return f"not done: {difference.text}"
    return f"{would[difference.kind]}: {difference.text}"


def _version(settings: Any) -> ClusterMetadata:
    as_of = _as_of(settings)
    version = metadata_as_of(settings.source, as_of)
    if version is None:
        when = "" if as_of is None else f" captured at or before {iso_time(as_of)}"
        raise SparkKafkaBackupError(
            f"--metadata: the backup {settings.source} holds no cluster metadata{when} (a backup by an earlier version "
            "of spark-kafka-backup, or by the original tool, has none)"
        )
    return version


def _target(
    settings: Any,
    admin: Any,
    sections: frozenset[str],
    version: ClusterMetadata,
    *,
    done: str = "nothing was compared or changed",
) -> ClusterMetadata:
    target = capture_metadata(admin, [], client=settings.client, timeout=30, sections=sections)
    for section in sorted(sections - {"topics"}):
        refusal = _not_comparable(section, version, target)
        if refusal is not None:
            raise SparkKafkaBackupError(f"--metadata {section}: {refusal}; {done}")
    return target


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
            if found.permission is None:
                return f"{where}'s could not be read: {found.describe()}"
            return f"{where} did not let them be described: {found.describe()}"
    return None
