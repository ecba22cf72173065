"""Schema registries end to end against a real registry server: Apicurio Registry's Confluent-compatible API
(devkit/apicurio.py), started by these tests, with the real broker and Spark.

What the source registry holds (:func:`_fill_source`), under a global level of BACKWARD:

- ``sr-orders-key``: one Avro ``string``;
- ``sr-orders-value``: three versions, the third incompatible with the second (registered while the subject's own
  level was NONE; the subject's level is BACKWARD since);
- ``sr-addr``: an Avro record that ``sr-people-value`` references (Avro named types);
- ``sr-people-value``: two versions referencing ``sr-addr``, the first soft-deleted after records named it;
- ``sr-gone-value``: one version, soft-deleted.

The target registry has other schemas registered first, so every id differs there. The model-based tests
(tests/unit/test_schema_registry.py) stay for what Apicurio cannot show: a registry that keeps serving a schema whose
subjects were deleted for good, and one that registers under the ids it is given (IMPORT mode).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit.apicurio import ApicurioRegistry
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.schema_registry.capture import read_registry_copy, registry_copy_path
from spark_kafka_backup.schema_registry.client import RegistryAddress, RegistryClient, quoted
from spark_kafka_backup.schema_registry.registry_copy import RegistryCopy, Schema, Subject, SubjectVersion
from spark_kafka_backup.storage import parse_location, write_whole
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import (
    client_config_file,
    commit_offsets,
    consume_all,
    create_topics,
    job_env,
    run_backup,
    run_kbackup,
)
from tests.restore_helpers import REPO, Target, comparable, group_offsets, restore_python, run_restore

#: CI time: a real registry takes a minute to start here. The quick tier has the wire format, the backup's copy and
#: the import order (tests/unit/test_schema_registry.py) and ids rewritten from a copy (tests/test_restore_edges.py).
pytestmark = pytest.mark.long


def _avro(name: str, *fields: tuple[str, Any], namespace: str = "kbackup.test") -> str:
    described = [{"name": n, "type": t} if not isinstance(t, dict) else {"name": n, **t} for n, t in fields]
    return json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": described})


ORDER_1 = _avro("Order", ("id", "int"))
ORDER_2 = _avro("Order", ("id", "int"), ("note", {"type": "string", "default": ""}))
ORDER_3 = _avro("Order", ("code", "string"))  # no default: BACKWARD refuses it after ORDER_2
ADDRESS = _avro("Address", ("street", "string"))
PERSON_1 = _avro("Person", ("address", "kbackup.test.Address"))
PERSON_2 = _avro("Person", ("address", "kbackup.test.Address"), ("age", {"type": "int", "default": 0}))
ADDRESS_REFERENCE = [{"name": "kbackup.test.Address", "subject": "sr-addr", "version": 1}]


def _start(registries: list[ApicurioRegistry]) -> None:
    """Start registries at once (each takes ~10 s of start-up, mostly waiting)."""
    try:
        for registry in registries:
            registry.launch()
        for registry in registries:
            registry.wait_ready()
    except BaseException:
        for registry in registries:
            registry.stop()
        raise


@pytest.fixture(scope="module")
def registries() -> Iterator[tuple[ApicurioRegistry, ApicurioRegistry]]:
    """A source and a target registry, started once for this file's tests."""
    pair = (ApicurioRegistry(), ApicurioRegistry())
    _start(list(pair))
    try:
        yield pair
    finally:
        for registry in pair:
            registry.stop()


def _client(registry: ApicurioRegistry) -> RegistryClient:
    return RegistryClient(RegistryAddress.parse(registry.url))


def _register(client: RegistryClient, subject: str, schema: str, references: Any = None) -> int:
    body: dict[str, Any] = {"schema": schema}
    if references:
        body["references"] = references
    return int(client.post(f"/subjects/{quoted(subject)}/versions", body)["id"])


def _fill_source(client: RegistryClient) -> dict[str, int]:
    """The source registry of this module's docstring; the ids of its schemas by name."""
    client.put("/config", {"compatibility": "BACKWARD"})
    ids = {"key": _register(client, "sr-orders-key", '"string"')}
    ids["order1"] = _register(client, "sr-orders-value", ORDER_1)
    ids["order2"] = _register(client, "sr-orders-value", ORDER_2)
    client.put("/config/sr-orders-value", {"compatibility": "NONE"})
    ids["order3"] = _register(client, "sr-orders-value", ORDER_3)
    client.put("/config/sr-orders-value", {"compatibility": "BACKWARD"})
    ids["address"] = _register(client, "sr-addr", ADDRESS)
    ids["person1"] = _register(client, "sr-people-value", PERSON_1, ADDRESS_REFERENCE)
    ids["person2"] = _register(client, "sr-people-value", PERSON_2, ADDRESS_REFERENCE)
    # A subject whose one version is soft-deleted (Apicurio then answers 404 for that version, deleted or not).
    ids["gone"] = _register(client, "sr-gone-value", _avro("Gone", ("g", "int")))
    client.delete("/subjects/sr-gone-value/versions/1")
    return ids


def _fill_target(client: RegistryClient, unrelated: int) -> None:
    """Schemas of the target's own, so that the backup's get other ids there."""
    client.put("/config", {"compatibility": "BACKWARD"})
    for i in range(unrelated):
        _register(client, f"target-own-{i}", _avro(f"Own{i}", ("x", "int")))


def _wired(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def _produce(broker: BrokerUnderTest, ids: dict[str, int], *, prefix: str = "sr-") -> None:
    from confluent_kafka import Producer

    create_topics(broker, {f"{prefix}orders": 2, f"{prefix}people": 1})
    producer = Producer(broker.client_settings(**{"enable.idempotence": "true"}))
    for i in range(300):
        version = ("order1", "order2", "order3")[min(i // 100, 2)]
        value = (
            None if i % 50 == 7 else b"plain, not the wire format" if i % 50 == 9 else _wired(ids[version], b"o%d" % i)
        )
        producer.produce(
            f"{prefix}orders",
            key=_wired(ids["key"], b"k%d" % i),
            value=value,
            partition=i % 2,
            headers=[("trace", b"%d" % i)] if i % 3 == 0 else None,
        )
    for i in range(120):
        person = "person1" if i < 60 else "person2"
        producer.produce(f"{prefix}people", key=b"person-%d" % i, value=_wired(ids[person], b"p%d" % i))
    producer.flush(30)
    commit_offsets(broker, f"{prefix}readers", {(f"{prefix}orders", 0): 40, (f"{prefix}people", 0): 70})


def _rewritten(
    records: list[dict[str, Any]], moved: dict[int, int], fields: tuple[str, ...] = ("key", "value")
) -> list[dict[str, Any]]:
    """The records with the schema id of each of their ``fields`` in the wire format mapped through ``moved``."""

    def mapped(field: str | None) -> str | None:
        if field is None:
            return None
        data = base64.b64decode(field)
        if len(data) < 5 or data[0] != 0:
            return field
        return base64.b64encode(_wired(moved[int.from_bytes(data[1:5], "big")], data[5:])).decode()

    return [{**r, **{name: mapped(r[name]) for name in fields}} for r in records]


def _target_ids(target: RegistryClient, backup: Path, subjects: dict[str, str]) -> dict[int, int]:
    """Each id of the backup's copy -> the target's id of the same schema under the same (renamed) subject, looked up
    in the target registry (deleted versions too)."""
    copy = read_registry_copy(parse_location(backup))
    assert copy is not None
    moved = {}
    for subject, renamed in subjects.items():
        for version in copy.subjects[subject].versions:
            schema = copy.schemas[version.id]
            body: dict[str, Any] = {"schema": schema.schema}
            if schema.references:
                body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                                      for r in schema.references]  # fmt: skip
            found = target.post(f"/subjects/{quoted(renamed)}", body, deleted="true")
            assert int(found["version"]) == version.version, (subject, version)
            moved[version.id] = int(found["id"])
    return moved


SUBJECTS = {
    "sr-orders-key": "sr-orders-restored-key",
    "sr-orders-value": "sr-orders-restored-value",
    "sr-addr": "sr-addr",
    "sr-people-value": "sr-people-value",
}


@dataclass(frozen=True)
class SourceBackup:
    path: Path
    #: The source registry's ids of :func:`_fill_source`.
    ids: dict[str, int]


@pytest.fixture(scope="module")
def source_backup(
    kafka: BrokerUnderTest,
    registries: tuple[ApicurioRegistry, ApicurioRegistry],
    tmp_path_factory: pytest.TempPathFactory,
) -> SourceBackup:
    """The source registry and topics of this module's docstring, backed up with the registry (a snapshot)."""
    source_registry, target_registry = registries
    source = _client(source_registry)
    ids = _fill_source(source)
    _fill_target(_client(target_registry), unrelated=5)
    _produce(kafka, ids)
    # Soft-deleted after records named it: the backup must still hold it, and the restore register it (deleted).
    source.delete("/subjects/sr-people-value/versions/1")
    directory = tmp_path_factory.mktemp("source-backup")
    backup = directory / "backup"
    config = client_config_file(directory / "source.properties", kafka.extra_settings)
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
                      "--target-dir", backup, "--topics", "sr-orders,sr-people", "--snapshot",
                      "--schema-registry", source_registry.url)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return SourceBackup(backup, ids)


def test_a_backup_and_restore_through_two_registries_rewrites_every_id_and_keeps_the_registry_as_it_was(
    kafka: BrokerUnderTest,
    target: Target,
    registries: tuple[ApicurioRegistry, ApicurioRegistry],
    source_backup: SourceBackup,
    tmp_path: Path,
) -> None:
    source_registry, target_registry = registries
    destination = _client(target_registry)
    backup, ids = source_backup.path, source_backup.ids
    listed = run_kbackup("schemas", "list", backup, check=True).stdout
    orders = f"1: id {ids['order1']}, 2: id {ids['order2']}, 3: id {ids['order3']}"
    assert f"sr-orders-value (compatibility BACKWARD): {orders}" in listed, listed
    assert f"sr-people-value: 1: id {ids['person1']} deleted, 2: id {ids['person2']}" in listed, listed
    copy = json.loads(run_kbackup("schemas", "list", backup, "--json", check=True).stdout)
    levels = {s["subject"]: s["compatibility"] for s in copy["subjects"]}
    # Only sr-orders-value has a level of its own (Apicurio answers the global level for the others, and NONE
    # where none is set at all: the capture asks its own API which subjects have a rule).
    assert levels == {"sr-orders-key": None, "sr-orders-value": "BACKWARD", "sr-addr": None, "sr-people-value": None,
                      "sr-gone-value": None}  # fmt: skip
    assert f"sr-gone-value: 1: id {ids['gone']} deleted" in listed, listed
    recaptured = run_kbackup("schemas", "capture", backup, "--schema-registry", source_registry.url, check=True)
    assert f"5 subjects, 8 versions, 8 schemas of {source_registry.url}: unchanged in" in recaptured.stdout
    verified = run_kbackup("verify", backup)
    assert verified.returncode == 0 and "schema registry copy: ok (5 subjects, 8 versions" in verified.stdout

    # The restore: sr-orders renamed (its subjects follow), sr-people kept.
    maps = ["--topic-map", f"sr-orders={target.name('sr-orders-restored')}"]
    maps += ["--topic-map", f"sr-people={target.name('sr-people')}"] if target.prefix else []
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--schema-registry", target_registry.url, *maps]
    restored = run_restore(*args)
    said = restored.stdout + restored.stderr
    assert restored.returncode == 0, said[-3000:]
    assert "subject versions 0 there already, 8 registered" in said, said
    assert "compatibility set to NONE while registering older versions, then restored: sr-orders-restored-value" in said

    moved = _target_ids(destination, backup, SUBJECTS)
    assert all(old != new for old, new in moved.items()), moved  # every id moved: a rewrite that did nothing fails
    original = consume_all(kafka, ["sr-orders", "sr-people"])
    back = consume_all(target.broker, [target.name("sr-orders-restored"), target.name("sr-people")])
    expected = _rewritten(original, moved)
    for source_topic, restored_topic in (("sr-orders", "sr-orders-restored"), ("sr-people", "sr-people")):
        assert comparable(back, topic=target.name(restored_topic)) == comparable(expected, topic=source_topic)
    assert len(back) == 420
    assert group_offsets(target.broker, "sr-readers") == {
        (target.name("sr-orders-restored"), 0): 40,
        (target.name("sr-people"), 0): 70,
    }

    # The target registry as the source was: versions (the deleted one deleted), references, levels.
    assert destination.get("/subjects/sr-people-value/versions") == [2]
    assert destination.get("/subjects/sr-people-value/versions", deleted="true") == [1, 2]
    person = destination.get("/subjects/sr-people-value/versions/2")
    assert person["references"] == ADDRESS_REFERENCE
    assert destination.get("/subjects/sr-orders-restored-value/versions") == [1, 2, 3]
    assert destination.compatibility("sr-orders-restored-value") == "BACKWARD"
    assert destination.compatibility() == "BACKWARD"

    # Again: nothing registered, nothing produced.
    again = run_restore(*args)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    assert "subject versions 8 there already, 0 registered" in said and "420 records were already in the target" in said
    assert consume_all(target.broker, [target.name("sr-orders-restored"), target.name("sr-people")]) == back

    # The target registry replaced (wiped and filled again, at the same address): the records restored name ids
    # it no longer gives the same schemas. Refused in one line before anything is registered.
    target_registry.stop()
    replaced = ApicurioRegistry(port=target_registry.port)
    registries_left = [replaced]
    try:
        replaced.start()
        _fill_target(_client(replaced), unrelated=2)
        refused = restore_python(*args)
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1 and " no longer holds id " in said, said
        assert "the registry was replaced or wiped since" in said and "Traceback" not in said
        assert [line for line in said.splitlines() if "error" in line] == [said.splitlines()[-1]], said
        assert _client(replaced).get("/subjects") == ["target-own-0", "target-own-1"]
    finally:
        for registry in registries_left:
            registry.stop()
        target_registry.start()  # the module's target again (empty)

    # The source registry replaced: a capture into the backup is refused, the copy unchanged.
    before = (backup / "kbackup~state" / "schema-registry.json").read_bytes()
    source_registry.stop()
    source_registry.start()
    other = _client(source_registry)
    _register(other, "sr-orders-value", ORDER_2)  # version 1 is another schema now
    captured = run_kbackup("schemas", "capture", backup, "--schema-registry", source_registry.url)
    assert captured.returncode == 1, captured.stderr
    assert f"schema id {ids['key']} is another schema than the one this backup's copy holds" in captured.stderr
    assert captured.stderr.count("\n") == 1 and "Traceback" not in captured.stderr
    assert (backup / "kbackup~state" / "schema-registry.json").read_bytes() == before


def test_a_restore_killed_at_its_registry_requests_then_run_again_leaves_the_registry_and_records_as_one_run_would(
    kafka: BrokerUnderTest,
    target: Target,
    registries: tuple[ApicurioRegistry, ApicurioRegistry],
    source_backup: SourceBackup,
    tmp_path: Path,
) -> None:
    """SIGKILL at the 1st, 2nd, 5th, 6th, 9th ... request to the target registry (before an odd one is sent; after
    the registry did an even one, its answer lost), each run going on from what the ones before it did."""
    _, target_registry = registries
    destination = _client(target_registry)
    _fill_target(destination, unrelated=3)  # other ids than the source's, whether the test before ran or not
    renamed = {"sr-orders": target.name("sr-k-orders"), "sr-people": target.name("sr-k-people")}
    maps = [a for old, new in renamed.items() for a in ("--topic-map", f"{old}={new}")]
    args = [*target.args(tmp_path), "--source-dir", str(source_backup.path), "--schema-registry",
            target_registry.url, "--state-dir", str(tmp_path / "restore-state"), *maps]  # fmt: skip
    kills, kill_at = 0, 1
    while True:
        child = subprocess.run([sys.executable, "-m", "tests.crash_registry_restore", str(kill_at), *args],
                               capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=300)  # fmt: skip
        if child.returncode == 99:  # the registry step ended before that request
            break
        assert child.returncode == -9, child.stdout[-2000:] + child.stderr[-2000:]
        kills += 1
        kill_at += 1 if kill_at % 4 == 1 else 3  # 1, 2, 5, 6, 9, 10, ...: before a request and after it, in turn
    assert kills >= 6, kills
    assert destination.compatibility("sr-k-orders-value") == "BACKWARD"  # relaxed to NONE for version 3, put back
    assert destination.compatibility("sr-k-people-value") is None

    done = run_restore(*args)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "subject versions 8 there already, 0 registered" in said, said
    subjects = {"sr-orders-key": "sr-k-orders-key", "sr-orders-value": "sr-k-orders-value", "sr-addr": "sr-addr",
                "sr-people-value": "sr-k-people-value"}  # fmt: skip
    moved = _target_ids(destination, source_backup.path, subjects)
    assert all(old != new for old, new in moved.items()), moved
    original = consume_all(kafka, ["sr-orders", "sr-people"])
    back = consume_all(target.broker, list(renamed.values()))
    expected = _rewritten(original, moved)
    for source_topic, restored_topic in renamed.items():
        assert comparable(back, topic=restored_topic) == comparable(expected, topic=source_topic)
    assert len(back) == 420
    assert destination.get("/subjects/sr-k-people-value/versions") == [2]
    assert destination.get("/subjects/sr-k-people-value/versions", deleted="true") == [1, 2]
    assert destination.get("/subjects/sr-k-orders-value/versions", deleted="true") == [1, 2, 3]
    assert destination.compatibility("sr-k-orders-value") == "BACKWARD"
    state = json.loads(next((tmp_path / "restore-state").glob("schemas-*.json")).read_text())
    assert state["levels"] == {} and state["deletions"] == [] and len(state["ids"]) == 8


def test_registering_under_the_backups_ids_keeps_every_record_as_it_was_and_is_refused_where_the_target_cannot(
    kafka: BrokerUnderTest,
    target: Target,
    registries: tuple[ApicurioRegistry, ApicurioRegistry],
    source_backup: SourceBackup,
    tmp_path: Path,
) -> None:
    """``--schema-registry-import``. Apicurio takes mode IMPORT but not the ids given, so a registry of its keeps the
    backup's ids only where it gives the same ones (an empty one, registered in the source's order): there the
    records come back unchanged; where its ids differ the restore is refused at the first registration, before
    anything is produced; and a registry not in mode IMPORT is refused before anything is registered."""
    _, busy_registry = registries
    renamed = {"sr-orders": target.name("sr-i-orders"), "sr-people": target.name("sr-i-people")}
    maps = [a for old, new in renamed.items() for a in ("--topic-map", f"{old}={new}")]
    common = [*target.args(tmp_path), "--source-dir", str(source_backup.path), "--state-dir",
              str(tmp_path / "restore-state"), "--schema-registry-import", *maps]  # fmt: skip

    busy = _client(busy_registry)
    refused = restore_python(*common, "--schema-registry", busy_registry.url)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "Traceback" not in said, said
    assert [line for line in said.splitlines() if "error" in line] == [said.strip().splitlines()[-1]], said
    assert "is in mode READWRITE, and subject 'sr-addr' is not in mode IMPORT either" in said
    assert not any(name.startswith("sr-i-") for name in busy.get("/subjects"))
    busy.put("/mode", {"mode": "IMPORT"})
    try:
        ignored = restore_python(*common, "--schema-registry", busy_registry.url)
    finally:
        busy.put("/mode", {"mode": "READWRITE"})
    said = ignored.stdout + ignored.stderr
    assert ignored.returncode == 1 and "Traceback" not in said, said
    assert "this registry does not register under the ids and versions given" in said, said
    from confluent_kafka.admin import AdminClient

    assert not set(renamed.values()) & set(AdminClient(target.broker.client_settings()).list_topics(timeout=30).topics)

    with ApicurioRegistry() as empty:
        destination = _client(empty)
        destination.put("/config", {"compatibility": "BACKWARD"})
        destination.put("/mode", {"mode": "IMPORT"})
        args = [*common, "--schema-registry", empty.url]
        done = run_restore(*args)
        said = done.stdout + done.stderr
        assert done.returncode == 0, said[-3000:]
        assert "registered under the backup's ids (--schema-registry-import): no record's id changes" in said, said
        subjects = {"sr-orders-key": "sr-i-orders-key", "sr-orders-value": "sr-i-orders-value", "sr-addr": "sr-addr",
                    "sr-people-value": "sr-i-people-value", "sr-gone-value": "sr-gone-value"}  # fmt: skip
        assert set(_target_ids(destination, source_backup.path, subjects).items()) == {
            (i, i) for i in source_backup.ids.values()
        }
        original = consume_all(kafka, ["sr-orders", "sr-people"])
        back = consume_all(target.broker, list(renamed.values()))
        for source_topic, restored_topic in renamed.items():
            assert comparable(back, topic=restored_topic) == comparable(original, topic=source_topic)
        assert destination.get("/subjects/sr-i-people-value/versions") == [2]
        assert destination.compatibility("sr-i-orders-value") == "BACKWARD"


def test_a_schema_no_listed_subject_holds_is_fetched_by_the_id_records_name_and_restored(
    kafka: BrokerUnderTest,
    target: Target,
    registries: tuple[ApicurioRegistry, ApicurioRegistry],
    tmp_path: Path,
) -> None:
    """A schema Apicurio serves by id but lists under no subject of its Confluent API (an artifact of another group,
    as a subject deleted for good is in registries that keep serving its ids): the backup's tasks report the ids
    its records name, the capture fetches it by id, the restore registers it (a deleted version of a subject of
    its own) and rewrites the records. An id nobody holds is said at the backup, and passes in a checked field."""
    source_registry, target_registry = registries
    hidden = _avro("Hidden", ("h", "long"))
    native = f"{source_registry.root}/apis/registry/v3/groups/sr-other/artifacts"
    body = {"artifactId": "hidden", "artifactType": "AVRO",
            "firstVersion": {"content": {"content": hidden, "contentType": "application/json"}}}  # fmt: skip
    request = urllib.request.Request(native, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        hidden_id = int(json.loads(answer.read())["version"]["contentId"])
    source = _client(source_registry)
    assert json.loads(source.get(f"/schemas/ids/{hidden_id}")["schema"]) == json.loads(hidden)
    assert not any(name.startswith("hidden") for name in source.get("/subjects", deleted="true"))

    from confluent_kafka import Producer

    create_topics(kafka, {"sr-hidden": 1})
    producer = Producer(kafka.client_settings())
    for i in range(50):
        key = _wired(4242, b"x") if i % 10 == 0 else b"plain-%d" % i  # 4242: no registry holds it
        producer.produce("sr-hidden", key=key, value=_wired(hidden_id, b"h%d" % i))
    producer.flush(30)
    backup = tmp_path / "backup"
    config = client_config_file(tmp_path / "source.properties", kafka.extra_settings)
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
                      "--target-dir", backup, "--topics", "sr-hidden", "--snapshot",
                      "--schema-registry", source_registry.url)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert f"records of the backup name schema id(s) 4242, which schema registry {source_registry.url}" in said
    assert json.loads((backup / "kbackup~state" / "schema-ids.json").read_text())["topics"] == {
        "sr-hidden": sorted([hidden_id, 4242])
    }
    listed = run_kbackup("schemas", "list", backup, check=True).stdout
    assert f"kbackup~schema-{hidden_id}: 1: id {hidden_id} deleted" in listed, listed

    _fill_target(_client(target_registry), unrelated=3)  # other ids than the source's, whichever tests ran before
    restored_topic = target.name("sr-hidden-restored")
    args = [*target.args(tmp_path), "--source-dir", str(backup), "--schema-registry", target_registry.url,
            "--topic-map", f"sr-hidden={restored_topic}", "--schema-ids", "sr-hidden=values"]  # fmt: skip
    restored = run_restore(*args)
    said = restored.stdout + restored.stderr
    assert restored.returncode == 0, said[-3000:]
    destination = _client(target_registry)
    subject = f"kbackup~schema-{hidden_id}"
    assert destination.get(f"/subjects/{quoted(subject)}/versions", deleted="true") == [1]
    assert subject not in destination.get("/subjects")  # registered, then soft-deleted as the copy holds it
    found = destination.post(f"/subjects/{quoted(subject)}", {"schema": hidden}, deleted="true")
    new_id = int(found["id"])
    assert new_id != hidden_id and json.loads(destination.get(f"/schemas/ids/{new_id}")["schema"]) == json.loads(hidden)
    original = consume_all(kafka, ["sr-hidden"])
    back = consume_all(target.broker, [restored_topic])
    expected = _rewritten(original, {hidden_id: new_id}, fields=("value",))
    assert comparable(back) == comparable(expected)  # keys as they were, 4242 included


def test_an_unreachable_registry_ends_the_backup_and_the_restore_in_one_line(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    stopped = f"http://127.0.0.1:{_closed_port()}/apis/ccompat/v7"
    create_topics(kafka, {"sr-unreachable": 1}, exist_ok=True)
    backup = tmp_path / "backup"
    config = client_config_file(tmp_path / "source.properties", kafka.extra_settings)
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--command-config", config,
                      "--target-dir", backup, "--topics", "sr-unreachable", "--snapshot",
                      "--schema-registry", stopped)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 1 and f"schema registry {stopped}: GET /subjects" in said, said[-2000:]
    assert "cannot reach the registry" in said and "Traceback" not in said
    assert [line for line in said.splitlines() if "error" in line] == [said.strip().splitlines()[-1]], said
    # A backup with a copy of a registry, restored into one that does not answer.
    with PartitionWriter(backup / "sr-unreachable", "sr-unreachable", 0, fsync=False) as writer:
        writer.append(Record(0, 0, 1_795_000_000_000, None, _wired(1, b"x")))
    copy = RegistryCopy("http://source", 0, None, None, {1: Schema(1, '"string"')},
                        {"sr-unreachable-value": Subject("sr-unreachable-value", (SubjectVersion(1, 1),))})  # fmt: skip
    write_whole(registry_copy_path(parse_location(backup)), copy.encode())
    refused = restore_python(*target.args(tmp_path), "--source-dir", backup, "--schema-registry", stopped)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "Traceback" not in said, said
    assert [line for line in said.splitlines() if "error" in line] == [said.strip().splitlines()[-1]], said
    assert f"schema registry {stopped}: POST /subjects/sr-unreachable-value: cannot reach the registry" in said


def test_a_java_too_old_for_the_registry_is_one_line_naming_what_was_found(tmp_path: Path) -> None:
    old_java = tmp_path / "jdk-17" / "bin" / "java"
    old_java.parent.mkdir(parents=True)
    old_java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.15\" 2025-04-15' >&2\n")
    old_java.chmod(0o755)
    env = {**job_env(), "KBACKUP_REGISTRY_JAVA": str(old_java.parent.parent)}  # a JDK's home names its java
    started = subprocess.run(
        [sys.executable, "-m", "devkit", "registry"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    said = started.stderr.strip()
    assert started.returncode == 1 and said.count("\n") == 0 and "Traceback" not in said, started.stderr
    assert "Apicurio Registry 3.3.3 needs Java 21 or newer" in said and f"{old_java} (Java 17)" in said, said
    assert "point KBACKUP_REGISTRY_JAVA at it" in said


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
