"""Registering a backup's schemas in a target registry, and the ids they get there (the restore, on the driver).

Every subject version of the backup's copy is looked up under its target subject and registered when it is not
there, in an order where a subject's versions keep their order and a referenced version comes before the schemas
that reference it (:func:`import_order`); references are rewritten to the target's subject names and version
numbers. The registry answers with the target's id of each schema: the map from the backup's ids to those is what
the restore writes into the records (:mod:`spark_kafka_backup.schema_registry.wire`).

Subjects of renamed topics (``--topic-map OLD=NEW``) follow their topics: ``OLD-key`` and ``OLD-value`` are
registered as ``NEW-key`` and ``NEW-value`` (Confluent's default TopicNameStrategy).

What the import changes besides registering, and how a crash is survived (a registration is idempotent: run
again, it finds what an earlier run registered):

- a version the source had deleted is registered (records may name it) and then soft-deleted, as it was;
- a version the target refuses as incompatible is registered after setting its subject's compatibility to
  ``NONE``; the subject then gets the backup's level, or its own earlier one back;
- each subject the backup holds a compatibility level for gets it.

Undone work of the first two kinds is written to a small state file before it starts
(:class:`RegistryImportState`), and a later import finishes it.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_kafka_backup.errors import SchemaRegistryError, SparkKafkaBackupError
from spark_kafka_backup.schema_registry.client import INCOMPATIBLE_SCHEMA, RegistryClient, RegistryRefusalError, quoted
from spark_kafka_backup.schema_registry.registry_copy import RegistryCopy, Schema, SubjectVersion
from spark_kafka_backup.storage import Location, exists, read_document, write_whole

#: Subject name suffixes of Confluent's TopicNameStrategy.
KEY_SUFFIX, VALUE_SUFFIX = "-key", "-value"


def target_subjects(copy: RegistryCopy, topic_map: Mapping[str, str]) -> dict[str, str]:
    """Each subject of the copy and its name in the target (``OLD-key``/``OLD-value`` follow a renamed topic)."""
    names = {}
    for subject in copy.subjects:
        names[subject] = subject
        for suffix in (KEY_SUFFIX, VALUE_SUFFIX):
            topic = subject.removesuffix(suffix)
            if subject.endswith(suffix) and topic in topic_map:
                names[subject] = topic_map[topic] + suffix
    targets = sorted(names.values())
    doubled = next((a for a, b in itertools.pairwise(targets) if a == b), None)
    if doubled is not None:
        sources = sorted(s for s, t in names.items() if t == doubled)
        raise SchemaRegistryError(
            f"subjects {', '.join(map(repr, sources))} would both be registered as {doubled!r} in the target "
            "registry (a topic renamed onto another topic's name)"
        )
    return names


def import_order(copy: RegistryCopy) -> list[tuple[str, SubjectVersion]]:
    """Every subject version, each after the subject's earlier versions and after the versions it references.

    Among those free to go, the smallest schema id first (the order the source registered them in, usually).
    """
    after: dict[tuple[str, int], list[tuple[str, int]]] = {}
    waiting: dict[tuple[str, int], int] = {}
    for subject in copy.subjects.values():
        earlier: tuple[str, int] | None = None
        for version in subject.versions:
            node = (subject.name, version.version)
            needs = {(r.subject, r.version) for r in copy.schemas[version.id].references}
            if earlier is not None:
                needs.add(earlier)
            waiting[node] = len(needs)
            for need in needs:
                after.setdefault(need, []).append(node)
            earlier = node
    versions = {(s.name, v.version): v for s in copy.subjects.values() for v in s.versions}
    ready = [(versions[node].id, node) for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append((node[0], versions[node]))
        for follower in after.get(node, ()):
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, (versions[follower].id, follower))
    if len(order) != len(waiting):
        stuck = sorted(node for node, count in waiting.items() if count > 0)[:3]
        raise SchemaRegistryError(f"the backup's schemas reference each other in a cycle (at {stuck})")
    return order


class RegistryImportState:
    """What earlier imports into one target registry left to remember, in a small JSON file of the restore's state
    directory: ``{"ids": {backup id: target id}, "levels": {subject: level or null}, "deletions": [[subject, schema id],
    ...]}``.

    ``ids``: the target ids the records already restored name (the first one found for each schema). A later
    import into a registry that no longer serves them (it was replaced or wiped since) is refused before it
    registers anything (:meth:`check_held`). ``levels`` and ``deletions``: compatibility levels to put back and
    versions to soft-delete, written down before the import changes them, so that a killed import's successor
    finishes the work.
    """

    def __init__(self, path: Location) -> None:
        self.path = path
        self.ids: dict[int, int] = {}
        self.levels: dict[str, str | None] = {}
        self.deletions: set[tuple[str, int]] = set()
        if exists(path):
            try:
                document = read_document(path, 1 << 26, what="restore state")
                self.ids = {int(old): int(new) for old, new in document["ids"].items()}
                self.levels = {str(s): None if v is None else str(v) for s, v in document["levels"].items()}
                self.deletions = {(str(s), int(i)) for s, i in document["deletions"]}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SparkKafkaBackupError(f"{path}: unreadable restore state ({exc!r})") from exc

    def save(self) -> None:
        document = {
            "ids": {str(old): self.ids[old] for old in sorted(self.ids)},
            "levels": dict(sorted(self.levels.items())),
            "deletions": sorted(map(list, self.deletions)),
        }
        write_whole(self.path, json.dumps(document, indent=1).encode())

    def check_held(self, client: RegistryClient, copy: RegistryCopy) -> list[str]:
        """Refuse a target registry that no longer serves the ids earlier imports found (records restored then name
        them): it was replaced or wiped since. Asked before anything is registered, of at most :data:`HELD_CHECKS`
        ids spread over those remembered (a wiped registry lacks nearly all). Returns warnings for ids served with
        another schema text than the backup's: a registry may store a schema in its own canonical form, so this is
        said, not refused."""
        remembered = sorted(old for old in self.ids if old in copy.schemas)
        step = max(1, -(-len(remembered) // HELD_CHECKS))
        warnings = []
        for old in remembered[::step]:
            earlier = self.ids[old]
            try:
                document = client.get(f"/schemas/ids/{earlier}")
            except RegistryRefusalError as exc:
                if not exc.not_found:
                    raise
                raise SchemaRegistryError(
                    f"schema registry {client.address.shown} no longer holds id {earlier}, which an earlier restore "
                    f"from this backup found for the backup's schema id {old} and wrote records naming: the registry "
                    f"was replaced or wiped since. Restore into an empty cluster and registry after deleting "
                    f"{self.path}"
                ) from exc
            schema = copy.schemas[old]
            served = Schema(old, str(document.get("schema") if isinstance(document, dict) else document),
                            schema.schema_type, schema.references)  # fmt: skip
            if served.same_as(schema):
                continue
            same = None if schema.references else _registry_says_same(client, earlier, schema)
            if same is False:
                raise SchemaRegistryError(
                    f"schema registry {client.address.shown} holds another schema under id {earlier}, which an "
                    f"earlier restore from this backup found for the backup's schema id {old} and wrote records "
                    "naming: the registry was replaced or wiped since, and filled again. Restore into an empty "
                    f"cluster and registry after deleting {self.path}"
                )
            if same is None:
                warnings.append(
                    f"schema registry {client.address.shown} serves id {earlier} (the backup's schema id {old}, which "
                    "records an earlier restore wrote name) as a schema whose text differs from the backup's: "
                    "the registry's canonical form of it, or another schema if the registry was filled again"
                )
        return warnings


#: Remembered ids a restore asks the target registry for before registering anything.
HELD_CHECKS = 64


def _registry_says_same(client: RegistryClient, schema_id: int, schema: Schema) -> bool | None:
    """Whether the registry takes ``schema`` (without references) for the one it serves under ``schema_id``: looked up
    under a subject of that id, the registry compares in its own canonical form. ``None`` where it cannot tell."""
    try:
        where = client.get(f"/schemas/ids/{schema_id}/versions", deleted="true")
        subject = str(where[0]["subject"])
        body: dict[str, Any] = {"schema": schema.schema}
        if schema.schema_type != "AVRO":
            body["schemaType"] = schema.schema_type
        found = _look_up(client, subject, body, deleted=True)
    except RegistryRefusalError as exc:
        if exc.status in (404, 405, 422):
            return None
        raise
    except (KeyError, IndexError, TypeError):
        return None
    return found is not None and found[0] == schema_id


@dataclass
class RegistryImport:
    """What an import found and did."""

    #: The backup's schema id -> the target registry's id of the same schema.
    ids: dict[int, int] = field(default_factory=dict)
    registered: int = 0
    found: int = 0
    #: Dry run: versions that would be registered (their target ids are not known yet).
    missing: list[tuple[str, int]] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)
    soft_deleted: int = 0
    #: Things to say (:meth:`RegistryImportState.check_held`).
    warnings: list[str] = field(default_factory=list)


def import_registry(
    client: RegistryClient,
    copy: RegistryCopy,
    subjects: Mapping[str, str],
    pending: RegistryImportState | None,
    *,
    dry_run: bool = False,
    keep_ids: bool = False,
) -> RegistryImport:
    """Make the target registry hold every schema of ``copy`` (``subjects``: :func:`target_subjects`).

    ``pending``: the import's state (:class:`RegistryImportState`); ``dry_run``: look up only, change nothing;
    ``keep_ids``: register under the backup's ids and version numbers (the target in ``IMPORT`` mode,
    :func:`check_import_mode`), and refuse a target that holds a schema under another id or ignores the id given.
    """
    done = RegistryImport()
    if pending is not None:
        done.warnings = pending.check_held(client, copy)  # before anything is registered
    versions: dict[tuple[str, int], int] = {}  # (backup subject, backup version) -> target version
    # Versions to soft-delete, deleted after every registration (referrers first: a registry refuses to delete a
    # version others reference), except where a later live version of the same schema under the same subject needs
    # it gone first (registered again while it is live, the schema would get no new version).
    deferred: dict[tuple[str, int], int] = {}  # (target subject, backup id) -> target version
    for subject, version in import_order(copy):
        target = subjects[subject]
        schema = copy.schemas[version.id]
        if any((r.subject, r.version) not in versions for r in schema.references):
            done.missing.append((subject, version.version))  # dry run: references not registered yet
            continue
        body = _body(schema, subjects, versions)
        # Registered under the backup's id and version (IMPORT mode); looked up by the schema alone.
        registration = {**body, "id": schema.id, "version": version.version} if keep_ids else body
        key = (target, schema.id)
        if not version.deleted and key in deferred:
            _soft_delete(client, target, deferred.pop(key), key, pending, done)
        # A live version must be live in the target too (a deleted one with the same schema does not count: the
        # registry makes a new version when it is registered again); a deleted one may be there either way.
        found = _look_up(client, target, body, deleted=version.deleted)
        if keep_ids and found is not None and found[0] != schema.id:
            raise SchemaRegistryError(
                f"schema registry {client.address.shown}: {target!r} holds the backup's schema id {schema.id} as id "
                f"{found[0]}: it cannot be registered under its own id there (--schema-registry-import); restore "
                "without it (the records' ids are then rewritten), or into a registry without this schema"
            )
        if found is None and not dry_run:
            assert pending is not None
            if version.deleted:
                pending.deletions.add(key)
                pending.save()
            _register(client, target, registration, schema, pending, done)
            found = _look_up(client, target, body, deleted=False)
            if found is None:
                raise SchemaRegistryError(
                    f"schema registry {client.address.shown}: schema id {schema.id} of subject {subject!r} was "
                    f"registered under {target!r} but cannot be looked up there"
                )
            if keep_ids and found != (schema.id, version.version):
                raise SchemaRegistryError(
                    f"schema registry {client.address.shown}: asked to register the backup's schema id {schema.id} "
                    f"under {target!r} as version {version.version} with that id (mode IMPORT), it made it version "
                    f"{found[1]} with id {found[0]}: this registry does not register under the ids and versions "
                    "given (Apicurio Registry ignores them). Restore without --schema-registry-import: the records' "
                    "ids are then rewritten"
                )
            done.registered += 1
        elif found is not None:
            done.found += 1
        if found is None:
            done.missing.append((subject, version.version))
            continue
        target_id, target_version = found
        done.ids.setdefault(schema.id, target_id)
        versions[(subject, version.version)] = target_version
        if version.deleted and pending is not None and key in pending.deletions and not dry_run:
            deferred[key] = target_version  # registered by this import, or by one killed before it could delete it
    if not dry_run:
        assert pending is not None
        for key, target_version in reversed(deferred.items()):
            _soft_delete(client, key[0], target_version, key, pending, done)
        _set_levels(client, copy, subjects, pending)
        # The first target id of each schema stays: records restored then name it (a rerun under other subjects
        # may get other ids, where references name renamed subjects; those records name the new ones).
        if any(old not in pending.ids for old in done.ids):
            pending.ids.update({old: new for old, new in done.ids.items() if old not in pending.ids})
            pending.save()
    return done


IMPORT = "IMPORT"


def check_import_mode(client: RegistryClient, subjects: Iterable[str]) -> None:
    """Refuse, in one line, a target registry that cannot register under the ids given: one without modes, or whose
    mode is not ``IMPORT`` (for the registry, or for every one of ``subjects``)."""
    what = f"--schema-registry-import: schema registry {client.address.shown}"
    try:
        document = client.get("/mode")
    except RegistryRefusalError as exc:
        if exc.status in (404, 405):
            raise SchemaRegistryError(
                f"{what} has no modes, so it cannot register schemas under the backup's ids: restore without "
                "--schema-registry-import (the records' ids are then rewritten)"
            ) from exc
        raise
    mode = document.get("mode") if isinstance(document, dict) else None
    if mode == IMPORT:
        return
    for subject in sorted(set(subjects)):
        try:
            own = client.get(f"/mode/{quoted(subject)}")
        except RegistryRefusalError as exc:
            if not exc.not_found:
                raise
            own = None
        if not isinstance(own, dict) or own.get("mode") != IMPORT:
            raise SchemaRegistryError(
                f"{what} is in mode {mode or 'unknown'}, and subject {subject!r} is not in mode IMPORT either: "
                "registering under the "
                'backup\'s ids needs mode IMPORT (PUT /mode {"mode": "IMPORT"}, on an empty registry; READWRITE '
                "again after the restore), or restore without --schema-registry-import"
            )


def _soft_delete(
    client: RegistryClient,
    subject: str,
    version: int,
    key: tuple[str, int],
    pending: RegistryImportState | None,
    done: RegistryImport,
) -> None:
    """Delete a version the import registered, as it was in the source (unless it is deleted already)."""
    assert pending is not None
    if version in _live_versions(client, subject):
        try:
            client.delete(f"/subjects/{quoted(subject)}/versions/{version}")
            done.soft_deleted += 1
        except RegistryRefusalError as exc:
            if not exc.not_found:  # deleted meanwhile (a retried request whose first try went through)
                raise
    pending.deletions.discard(key)
    pending.save()


def _body(schema: Schema, subjects: Mapping[str, str], versions: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema.schema}
    if schema.schema_type != "AVRO":
        body["schemaType"] = schema.schema_type
    if schema.references:
        body["references"] = [
            {"name": r.name, "subject": subjects.get(r.subject, r.subject), "version": versions[(r.subject, r.version)]}
            for r in schema.references
        ]
    return body


def _look_up(client: RegistryClient, subject: str, body: dict[str, Any], *, deleted: bool) -> tuple[int, int] | None:
    """``(id, version)`` of the schema under the subject (``deleted``: deleted versions count); ``None`` when it is not
    there."""
    try:
        document = client.post(f"/subjects/{quoted(subject)}", body, **({"deleted": "true"} if deleted else {}))
    except RegistryRefusalError as exc:
        if exc.not_found:
            return None
        raise
    try:
        return int(document["id"]), int(document["version"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaRegistryError(
            f"schema registry {client.address.shown}: POST /subjects/{quoted(subject)}: not a schema version: "
            f"{str(document)[:100]}"
        ) from exc


def _register(
    client: RegistryClient,
    subject: str,
    body: dict[str, Any],
    schema: Schema,
    pending: RegistryImportState,
    done: RegistryImport,
) -> None:
    path = f"/subjects/{quoted(subject)}/versions"
    try:
        client.post(path, body)
        return
    except RegistryRefusalError as exc:
        if exc.status != INCOMPATIBLE_SCHEMA:
            raise SchemaRegistryError(f"{exc} (registering schema id {schema.id} of the backup)") from exc
    # The source accepted this version in its time; the target's rules today may not: relax them for this subject.
    # Its own level is written down first (unless an earlier, killed import did: that one is the subject's).
    if subject not in pending.levels:
        pending.levels[subject] = client.compatibility(subject)
        pending.save()
    client.put(f"/config/{quoted(subject)}", {"compatibility": "NONE"})
    if subject not in done.relaxed:
        done.relaxed.append(subject)
    try:
        client.post(path, body)
    except RegistryRefusalError as exc:
        raise SchemaRegistryError(f"{exc} (registering schema id {schema.id} of the backup)") from exc


def _set_levels(
    client: RegistryClient, copy: RegistryCopy, subjects: Mapping[str, str], pending: RegistryImportState
) -> None:
    """Each subject's compatibility level as the backup holds it; relaxed subjects without one get theirs back."""
    wanted: dict[str, str | None] = {}
    for subject in copy.subjects.values():
        if subject.compatibility is not None:
            wanted[subjects[subject.name]] = subject.compatibility
    for target, earlier in pending.levels.items():
        wanted.setdefault(target, earlier)
    for target, level in sorted(wanted.items()):
        if level is None:
            try:
                client.delete(f"/config/{quoted(target)}")
            except RegistryRefusalError as exc:
                if not exc.not_found:
                    raise
        else:
            client.put(f"/config/{quoted(target)}", {"compatibility": level})
    if pending.levels:
        pending.levels.clear()
        pending.save()


def _live_versions(client: RegistryClient, subject: str) -> set[int]:
    try:
        return set(client.get(f"/subjects/{quoted(subject)}/versions"))
    except RegistryRefusalError as exc:
        if exc.not_found:
            return set()
        raise
