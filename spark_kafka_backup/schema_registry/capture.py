"""Capturing a schema registry into a backup (``--schema-registry`` of the backup, ``spark-kafka-backup schemas
capture``).

A capture lists every subject and version the registry holds, deleted ones included (records may name them),
reads every live version again (so that a subject deleted for good and registered again shows) and each deleted
version once, the subjects' and the registry's compatibility levels and mode, and the versions other schemas
reference. The result is merged into the backup's copy
(:meth:`~spark_kafka_backup.schema_registry.registry_copy.RegistryCopy.merged`), which is replaced whole and only when
something changed.

When a capture is consistent with the records: a record names a schema id that the registry held when the record
was produced, so a capture taken after the records were read holds every id they name. The backup captures when
it starts, every ``--offsets-interval`` while it runs, and after the last records of a snapshot or a stop.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from spark_kafka_backup.errors import SchemaRegistryError
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.schema_registry.client import RegistryAddress, RegistryClient, RegistryRefusalError, quoted
from spark_kafka_backup.schema_registry.registry_copy import (
    SCHEMA_TYPES,
    RegistryCopy,
    Schema,
    SchemaReference,
    Subject,
    SubjectVersion,
    whole_number,
)
from spark_kafka_backup.schema_registry.seen_ids import all_seen_ids
from spark_kafka_backup.storage import Location, exists, read_limited, write_whole

#: Largest registry copy read back (a registry of 100,000 schema versions of a few KiB each fits).
MAX_COPY_BYTES = 256 << 20


def registry_copy_path(root: Location) -> Location:
    return state_dir(root) / "schema-registry.json"


def read_registry_copy(root: Location) -> RegistryCopy | None:
    """The backup's copy of its schema registry; ``None`` when the backup has none."""
    path = registry_copy_path(root)
    if not exists(path):
        return None
    return RegistryCopy.decode(read_limited(path, MAX_COPY_BYTES), file=str(path))


@dataclass(frozen=True)
class Captured:
    """What :func:`capture_into` did."""

    copy: RegistryCopy
    changed: bool
    #: Ids that backed-up records name and that neither the copy nor the registry holds (a restore stops at them).
    missing: tuple[int, ...] = ()
    #: Ids left to ask for by id at the next capture (beyond :data:`MAX_BY_ID_REQUESTS`).
    deferred: int = 0


#: Schemas asked for by id in one capture at most (the rest at the next one).
MAX_BY_ID_REQUESTS = 1000


def capture_into(root: Location, address: RegistryAddress, *, absent: Collection[int] = ()) -> Captured:
    """Capture the registry, with every id the backup's records name (:mod:`~spark_kafka_backup.schema_registry.
    seen_ids`) but those in ``absent`` (the registry answered 404 for them before), and merge it into the backup's
    copy."""
    previous = read_registry_copy(root)
    missing: list[int] = []
    wanted = all_seen_ids(root) - frozenset(absent)
    captured = capture(RegistryClient(address), previous, wanted=wanted, missing=missing)
    merged = captured if previous is None else previous.merged(captured)
    deferred = len(wanted - set(merged.schemas) - set(missing))
    if previous is not None and merged.content() == previous.content():
        return Captured(previous, False, tuple(missing), deferred)
    write_whole(registry_copy_path(root), merged.encode())
    return Captured(merged, True, tuple(missing), deferred)


def deferred_line(deferred: int) -> str:
    """What to say of ids left for the next capture."""
    return (
        f"{deferred:,} more schema ids that records name are left to ask the registry for by id (at most "
        f"{MAX_BY_ID_REQUESTS:,} a capture): the next capture asks for them (spark-kafka-backup schemas capture)"
    )


def missing_ids_line(missing: Collection[int], registry: str) -> str:
    """What to say of ids the records name that neither the copy nor the registry holds."""
    shown = ", ".join(map(str, sorted(missing)[:10])) + (", ..." if len(missing) > 10 else "")
    return (
        f"records of the backup name schema id(s) {shown}, which schema registry {registry} does not hold: a "
        "restore rewriting ids stops at them (data that only looks like the wire format, or schemas deleted for "
        "good before they were captured)"
    )


def by_id_subject(schema_id: int) -> str:
    """The subject under which the copy keeps a schema that records name and no subject of the registry lists (a
    deleted version of it: the restore registers it, then soft-deletes it)."""
    return f"{BY_ID_PREFIX}{schema_id}"


#: Subjects the backup makes up for schemas fetched by id (``kbackup~schema-N``).
BY_ID_PREFIX = "kbackup~schema-"


def capture(
    client: RegistryClient,
    previous: RegistryCopy | None = None,
    *,
    wanted: Collection[int] = (),
    missing: list[int] | None = None,
) -> RegistryCopy:
    """What the registry holds now, and every schema of ``wanted`` (ids records name) it serves.

    Live versions come from one listing of every schema (``GET /schemas``) where the registry has it, or are read
    one by one: read again at every capture, so that a subject deleted for good and registered again (its versions
    numbered from 1 again, with other ids) is seen, and refused by the merge. A deleted version cannot change: one
    the previous copy holds is not read again. An id of ``wanted`` that neither the listed subjects nor the previous
    copy hold is asked for by id (``GET /schemas/ids/N``) and kept as the one deleted version of a subject of its
    own (:func:`by_id_subject`); one the registry does not hold either goes to ``missing``.
    """
    known = previous.subjects if previous is not None else {}
    schemas: dict[int, Schema] = {}
    subjects: dict[str, Subject] = {}
    listed = _listed_versions(client, schemas)
    for name in _names(client.get("/subjects", deleted="true"), "GET /subjects"):
        found = _subject(client, name, known.get(name), previous, schemas, listed)
        if found is not None:
            subjects[name] = found
    _referenced(client, subjects, schemas)
    held = set(schemas) | set(previous.schemas if previous is not None else ())
    for schema_id in sorted(set(wanted) - held)[:MAX_BY_ID_REQUESTS]:
        if not _by_id(client, schema_id, subjects, schemas) and missing is not None:
            missing.append(schema_id)
    compatibility = client.compatibility()
    mode = _mode(client)
    return RegistryCopy(client.address.shown, int(time.time() * 1000), compatibility, mode, schemas, subjects)


def _by_id(client: RegistryClient, schema_id: int, subjects: dict[str, Subject], schemas: dict[int, Schema]) -> bool:
    """Add the schema the registry serves under ``schema_id`` (and the versions it references) as the one deleted
    version of :func:`by_id_subject`; False, adding nothing, when the registry lacks it or a version it references."""
    request = f"GET /schemas/ids/{schema_id}"
    trial_subjects, trial_schemas = dict(subjects), dict(schemas)
    try:
        document = client.get(f"/schemas/ids/{schema_id}")
        schema = _schema({**_object(document), "id": schema_id}, client, request)
        _add(trial_schemas, schema, client, request)
        name = by_id_subject(schema_id)
        trial_subjects[name] = Subject(name, (SubjectVersion(1, schema_id, deleted=True),))
        _referenced(client, trial_subjects, trial_schemas, [schema])
    except RegistryRefusalError as exc:
        if not exc.not_found:
            raise
        return False
    subjects.update(trial_subjects)
    schemas.update(trial_schemas)
    return True


def _listed_versions(client: RegistryClient, schemas: dict[int, Schema]) -> dict[tuple[str, int], int] | None:
    """``(subject, version) -> id`` of every live version, from ``GET /schemas``; ``None`` without that listing."""
    try:
        document = client.get("/schemas")
    except RegistryRefusalError as exc:
        if exc.status in (404, 405):
            return None
        raise
    if not isinstance(document, list):
        return None
    found = {}
    for item in document:
        if not isinstance(item, dict) or "subject" not in item or "version" not in item:
            return None  # not the listing this expects: read version by version
        schema = _schema(item, client, "GET /schemas")
        _add(schemas, schema, client, "GET /schemas")
        found[(_text(item["subject"]), whole_number(item["version"]))] = schema.id
    return found


def _subject(
    client: RegistryClient,
    name: str,
    known: Subject | None,
    previous: RegistryCopy | None,
    schemas: dict[int, Schema],
    listed: dict[tuple[str, int], int] | None,
) -> Subject | None:
    path = f"/subjects/{quoted(name)}/versions"
    try:
        every = _numbers(client.get(path, deleted="true"), f"GET {path}")
    except RegistryRefusalError as exc:
        if exc.not_found:
            return None  # deleted for good since it was listed, or a subject with a compatibility level only
        raise
    live = _live(client, name)
    versions = []
    for number in sorted(set(every)):
        seen = known.version(number) if known is not None else None
        if listed is not None and (name, number) in listed:
            schema_id = listed[(name, number)]
        elif seen is not None and previous is not None and number not in live:
            schemas.setdefault(seen.id, previous.schemas[seen.id])
            schema_id = seen.id
        else:
            schema_id = _read_version(client, name, number, schemas)
        versions.append(SubjectVersion(number, schema_id, deleted=number not in live))
    return Subject(name, tuple(versions), client.compatibility(name))


def _live(client: RegistryClient, name: str) -> set[int]:
    """The subject's live version numbers (asked: a registry's listing of every schema may hold deleted ones)."""
    path = f"/subjects/{quoted(name)}/versions"
    try:
        return set(_numbers(client.get(path), f"GET {path}"))
    except RegistryRefusalError as exc:
        if not exc.not_found:
            raise
        return set()  # every version soft-deleted


def _read_version(client: RegistryClient, subject: str, version: int, schemas: dict[int, Schema]) -> int:
    path = f"/subjects/{quoted(subject)}/versions/{version}"
    try:
        document = client.get(path, deleted="true")
    except RegistryRefusalError as exc:
        # Apicurio: every version of the subject soft-deleted, its versions answer 404; its own API has the id.
        schema_id = client.apicurio_version_id(subject, version) if exc.not_found else None
        if schema_id is None:
            raise
        path = f"/schemas/ids/{schema_id}"
        document = {**_object(client.get(path)), "id": schema_id}
    schema = _schema(document, client, f"GET {path}")
    _add(schemas, schema, client, f"GET {path}")
    return schema.id


def _schema(document: Any, client: RegistryClient, request: str) -> Schema:
    what = f"schema registry {client.address.shown}: {request}"
    try:
        schema = Schema(
            whole_number(document["id"]),
            _text(document["schema"]),
            str(document.get("schemaType") or "AVRO"),
            tuple(
                SchemaReference(_text(r["name"]), _text(r["subject"]), whole_number(r["version"]))
                for r in document.get("references") or ()
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaRegistryError(f"{what}: not a schema version ({exc!r})") from exc
    if schema.schema_type not in SCHEMA_TYPES:
        raise SchemaRegistryError(f"{what}: unknown schemaType {schema.schema_type!r}")
    return schema


def _add(schemas: dict[int, Schema], schema: Schema, client: RegistryClient, request: str) -> None:
    known = schemas.get(schema.id)
    if known is not None and not known.same_as(schema):
        raise SchemaRegistryError(
            f"schema registry {client.address.shown}: {request}: schema id {schema.id} answered as two schemas"
        )
    schemas[schema.id] = schema


def _referenced(
    client: RegistryClient,
    subjects: dict[str, Subject],
    schemas: dict[int, Schema],
    start: list[Schema] | None = None,
) -> None:
    """Add the subject versions that captured schemas (or those of ``start``) reference and the listing did not show
    (deleted for good)."""
    pending = list(schemas.values()) if start is None else list(start)
    while pending:
        schema = pending.pop()
        for reference in schema.references:
            subject = subjects.get(reference.subject)
            if subject is not None and subject.version(reference.version) is not None:
                continue
            before = set(schemas)
            schema_id = _read_version(client, reference.subject, reference.version, schemas)
            pending.extend(schemas[i] for i in set(schemas) - before)
            versions = (*(subject.versions if subject else ()), SubjectVersion(reference.version, schema_id, True))
            subjects[reference.subject] = Subject(
                reference.subject,
                tuple(sorted(versions, key=lambda v: v.version)),
                subject.compatibility if subject else None,
            )


def _mode(client: RegistryClient) -> str | None:
    try:
        document = client.get("/mode")
    except RegistryRefusalError as exc:
        if exc.not_found:
            return None  # registries without modes
        raise
    return str(document["mode"]) if isinstance(document, dict) and "mode" in document else None


def _object(document: Any) -> dict[str, Any]:
    """A registry's answer as a JSON object (an empty one otherwise: :func:`_schema` then says what is missing)."""
    return document if isinstance(document, dict) else {}


def _names(document: Any, what: str) -> list[str]:
    if not isinstance(document, list) or not all(isinstance(item, str) for item in document):
        raise SchemaRegistryError(f"{what}: expected a list of subject names, found {str(document)[:100]}")
    return sorted(set(document))


def _numbers(document: Any, what: str) -> list[int]:
    if not isinstance(document, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in document):
        raise SchemaRegistryError(f"{what}: expected a list of version numbers, found {str(document)[:100]}")
    return list(document)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, found {value!r}")
    return value
