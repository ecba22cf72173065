"""Schema registry support: the records' wire format, the backup's copy of a registry, the import order, and the
one-line errors of an unreachable registry or a backup without a copy.

Here without a server (the unit layer): the HTTP parts only against a closed port. The same code against a real
registry server (Apicurio Registry from Maven Central, its Confluent-compatible API) is in
tests/test_schema_registry_server.py, in the long tier.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_kafka_backup.errors import FormatError, SchemaIdError, SchemaRegistryError, SparkKafkaBackupError, UsageError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.schema_registry.client import RegistryAddress, RegistryClient
from spark_kafka_backup.schema_registry.registry_copy import (
    RegistryCopy,
    Schema,
    SchemaReference,
    Subject,
    SubjectVersion,
)
from spark_kafka_backup.schema_registry.registry_import import (
    RegistryImportState,
    check_import_mode,
    import_order,
    import_registry,
    target_subjects,
)
from spark_kafka_backup.schema_registry.wire import IdRewrite, schema_id, with_schema_id
from tests.kafka_helpers import kbackup_in_process


def framed(schema: int, payload: bytes = b"payload") -> bytes:
    return b"\x00" + struct.pack(">I", schema) + payload


# -- the wire format ----------------------------------------------------------------------------------------------


def test_schema_id_reads_only_the_wire_format() -> None:
    assert schema_id(framed(7)) == 7
    assert schema_id(framed(2**32 - 1, b"")) == 2**32 - 1
    assert schema_id(None) is None
    assert schema_id(b"\x00\x00\x00\x07") is None  # four bytes: no room for an id
    assert schema_id(b"\x01" + struct.pack(">I", 7)) is None  # another magic byte
    assert schema_id(b'{"json": 1}') is None


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=64))
def test_with_schema_id_changes_only_the_id(old: int, new: int, payload: bytes) -> None:
    moved = with_schema_id(framed(old, payload), new)
    assert schema_id(moved) == new
    assert moved[5:] == payload and len(moved) == 5 + len(payload)


def test_a_rewrite_moves_ids_in_the_fields_it_is_told_and_nothing_else() -> None:
    record = Record(42, 0, 1_700_000_000_000, framed(1, b"k"), framed(2, b"v"), (("h", framed(2)),))
    values_only = IdRewrite({1: 11, 2: 12}, value=True)
    moved = values_only.record(record, topic="orders", partition=3)
    assert moved.value == framed(12, b"v")
    assert moved.key == record.key  # keys are not in the wire format for this topic
    assert moved.headers == record.headers and moved.offset == 42 and moved.timestamp == record.timestamp
    both = IdRewrite({1: 11, 2: 12}, key=True, value=True).record(record, topic="orders", partition=3)
    assert (both.key, both.value) == (framed(11, b"k"), framed(12, b"v"))


def test_a_rewrite_leaves_null_short_and_foreign_bytes_alone_and_returns_the_same_record_when_nothing_moves() -> None:
    rewrite = IdRewrite({5: 5, 6: 60}, key=True, value=True)
    for key, value in [(None, None), (b"\x00\x01", b"plain text"), (b"\x02" + bytes(4), framed(5))]:
        record = Record(0, 0, 0, key, value)
        assert rewrite.record(record, topic="t", partition=0) is record
    assert IdRewrite({6: 60}).record(Record(0, 0, 0, framed(6), framed(6)), topic="t", partition=0).value == framed(6)


def test_an_id_the_backup_does_not_hold_stops_the_restore_naming_the_record() -> None:
    rewrite = IdRewrite({1: 10}, value=True)
    with pytest.raises(SchemaIdError) as caught:
        rewrite.record(Record(77, 0, 0, None, framed(9)), topic="orders", partition=2)
    message = str(caught.value)
    assert "topic 'orders' partition 2 offset 77" in message and "schema id 9" in message and "value" in message
    assert caught.value.schema_id == 9 and caught.value.field == "value"


def test_fields_that_are_not_rewritten_are_checked_and_a_dry_run_passes_ids_it_cannot_map_yet() -> None:
    auto_without_subject = IdRewrite({1: 10, 2: 2}, check_key=True, check_value=True)
    unchanged = Record(5, 0, 0, framed(2), framed(99))  # id 2 is 2 in the target; 99 is no schema of the backup
    assert auto_without_subject.record(unchanged, topic="raw", partition=0) is unchanged
    with pytest.raises(SchemaIdError) as caught:
        auto_without_subject.record(Record(6, 0, 0, None, framed(1)), topic="raw", partition=1)
    assert "offset 6: the value looks like the wire format of schema id 1, which is 10" in str(caught.value)
    assert "--schema-ids raw=values" in str(caught.value) and "--schema-ids raw=none" in str(caught.value)
    dry = IdRewrite({1: 10}, value=True, lenient=True)
    assert dry.record(Record(7, 0, 0, None, framed(3)), topic="t", partition=0).value == framed(3)


def test_schema_ids_are_given_for_every_topic_or_one() -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "kafka:9092", "--source-dir", "/backups", "--schema-registry", "http://sr:8081"]
    settings = parse_restore_args([*base, "--schema-ids", "values", "--schema-ids", "raw=none"])
    assert settings.schema_id_fields("orders") == "values" and settings.schema_id_fields("raw") == "none"
    assert parse_restore_args(base).schema_id_fields("orders") == "auto"
    for wrong, message in [
        (["--schema-ids", "all"], "--schema-ids takes"),
        (["--schema-ids", "=values"], "--schema-ids takes"),
        (["--schema-ids", "a=none", "--schema-ids", "a=values"], "gives 'a' twice"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_restore_args([*base, *wrong])
    with pytest.raises(UsageError, match="--schema-ids needs --schema-registry"):
        parse_restore_args([*base[:4], "--schema-ids", "values"])


# -- the backup's copy of a registry ---------------------------------------------------------------------------------


def _copy(**subjects: list[tuple[int, int, bool]]) -> RegistryCopy:
    """A copy whose subjects hold (version, id, deleted) triples; schema ``i`` is ``"s<i>"``."""
    ids = {i for versions in subjects.values() for _, i, _ in versions}
    return RegistryCopy(
        "http://registry:8081",
        1_000,
        "BACKWARD",
        "READWRITE",
        {i: Schema(i, f'"s{i}"') for i in ids},
        {
            name.replace("_", "-"): Subject(name.replace("_", "-"), tuple(SubjectVersion(*v) for v in versions))
            for name, versions in subjects.items()
        },
    )


def test_a_copy_encodes_and_decodes_to_itself() -> None:
    referencing = Schema(9, "syntax = 'proto3';", "PROTOBUF", (SchemaReference("c.proto", "customer", 1),))
    copy = RegistryCopy(
        "https://registry.example:8081/sr",
        1_700_000_000_123,
        "FULL",
        None,
        {1: Schema(1, '{"type": "string"}'), 2: Schema(2, '{"type": "object"}', "JSON"), 9: referencing},
        {
            "customer": Subject("customer", (SubjectVersion(1, 1),), "NONE"),
            "orders-value": Subject("orders-value", (SubjectVersion(1, 2, True), SubjectVersion(2, 9))),
        },
    )
    encoded = copy.encode()
    assert RegistryCopy.decode(encoded, file="f") == copy
    assert RegistryCopy.decode(encoded, file="f").encode() == encoded  # the same state gives the same bytes
    document = json.loads(encoded)
    assert document["subjects"][1]["versions"][0] == {"version": 1, "id": 2, "deleted": True}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=2), "unsupported schema registry copy version"),
        (lambda d: d["subjects"][0]["versions"].append({"version": 1, "id": 1}), "not listed once each"),
        (lambda d: d["subjects"][0]["versions"][0].update(id=99), "names schema id 99, which is not listed"),
        (lambda d: d["schemas"][0].update(schemaType="XML"), "unknown schemaType 'XML'"),
        (lambda d: d["schemas"][0].update(id=-1), "whole number >= 0"),
        (lambda d: d["schemas"].append(dict(d["schemas"][0])), "schema id 1 is listed twice"),
        (
            lambda d: d["schemas"][0].update(references=[{"name": "x", "subject": "gone", "version": 1}]),
            "references subject 'gone' version 1, which is not listed",
        ),
        (lambda d: d.pop("schemas"), "not a valid schema registry copy"),
    ],
)
def test_a_damaged_copy_is_one_error_naming_the_file(change: object, message: str) -> None:
    document = json.loads(_copy(a=[(1, 1, False)]).encode())
    change(document)  # type: ignore[operator]
    with pytest.raises(FormatError) as caught:
        RegistryCopy.decode(json.dumps(document).encode(), file="/backup/kbackup~state/schema-registry.json")
    assert message in str(caught.value)
    assert str(caught.value).startswith("/backup/kbackup~state/schema-registry.json")


def test_a_copy_that_is_not_json_is_one_error() -> None:
    with pytest.raises(FormatError, match=r"copy\.json: not a valid schema registry copy"):
        RegistryCopy.decode(b"\x00garbage", file="copy.json")


def test_captures_only_add_what_the_registry_deleted_stays_marked_deleted() -> None:
    earlier = _copy(orders_value=[(1, 1, False), (2, 2, False)], gone=[(1, 3, False)])
    later = _copy(orders_value=[(1, 1, False), (3, 4, False)], fresh=[(1, 5, False)])
    merged = earlier.merged(later)
    versions = {name: [(v.version, v.id, v.deleted) for v in s.versions] for name, s in merged.subjects.items()}
    assert versions == {
        "orders-value": [(1, 1, False), (2, 2, True), (3, 4, False)],
        "gone": [(1, 3, True)],
        "fresh": [(1, 5, False)],
    }
    assert sorted(merged.schemas) == [1, 2, 3, 4, 5]
    assert merged.captured_at == later.captured_at
    assert RegistryCopy.decode(merged.encode(), file="f") == merged
    assert merged.merged(later).content() == merged.content()  # capturing the same registry again changes nothing


def test_a_capture_of_another_registry_is_refused() -> None:
    earlier = _copy(a=[(1, 1, False)])
    other_schema = RegistryCopy("http://other", 2_000, schemas={1: Schema(1, '"int"')}, subjects={})
    with pytest.raises(SchemaRegistryError, match="schema id 1 is another schema"):
        earlier.merged(other_schema)
    moved_version = _copy(a=[(1, 2, False)])
    with pytest.raises(SchemaRegistryError, match="subject 'a' version 1 is schema id 2"):
        earlier.merged(moved_version)


# -- registering a copy in another registry --------------------------------------------------------------------------


def test_the_import_order_keeps_each_subjects_versions_in_order_and_references_first() -> None:
    copy = RegistryCopy(
        "r",
        0,
        schemas={
            1: Schema(1, "a1"),
            2: Schema(2, "b1", references=(SchemaReference("c", "common", 1),)),
            3: Schema(3, "c1"),  # registered after the schema that references it: the source was an import
            4: Schema(4, "a2", references=(SchemaReference("b", "b", 1),)),
        },
        subjects={
            "a": Subject("a", (SubjectVersion(1, 1), SubjectVersion(2, 4))),
            "b": Subject("b", (SubjectVersion(1, 2),)),
            "common": Subject("common", (SubjectVersion(1, 3),)),
        },
    )
    order = [(subject, version.version) for subject, version in import_order(copy)]
    assert sorted(order) == [("a", 1), ("a", 2), ("b", 1), ("common", 1)]
    assert order.index(("common", 1)) < order.index(("b", 1)) < order.index(("a", 2))
    assert order.index(("a", 1)) < order.index(("a", 2))
    assert order[0] == ("a", 1)  # among those free to go, the smallest id first


def test_a_reference_cycle_is_refused() -> None:
    copy = RegistryCopy(
        "r",
        0,
        schemas={
            1: Schema(1, "x", references=(SchemaReference("y", "y", 1),)),
            2: Schema(2, "y", references=(SchemaReference("x", "x", 1),)),
        },
        subjects={"x": Subject("x", (SubjectVersion(1, 1),)), "y": Subject("y", (SubjectVersion(1, 2),))},
    )
    with pytest.raises(SchemaRegistryError, match="cycle"):
        import_order(copy)


def test_an_import_state_keeps_what_it_is_given_and_refuses_a_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "schemas-1234.json"
    state = RegistryImportState(path)
    state.ids.update({1: 10, 2: 20})
    state.levels["orders-value"] = None
    state.deletions.add(("orders-value", 2))
    state.save()
    again = RegistryImportState(path)
    assert (again.ids, again.levels, again.deletions) == ({1: 10, 2: 20}, {"orders-value": None}, {("orders-value", 2)})
    path.write_text("{")
    with pytest.raises(SparkKafkaBackupError, match=re.escape(f"{path}: not a valid restore state")):
        RegistryImportState(path)


def test_subjects_of_renamed_topics_follow_them() -> None:
    copy = _copy(orders_value=[(1, 1, False)], orders_key=[(1, 2, False)], orders=[(1, 3, False)],
                 com_example_Order=[(1, 4, False)])  # fmt: skip
    assert target_subjects(copy, {"orders": "orders-restored"}) == {
        "orders-value": "orders-restored-value",
        "orders-key": "orders-restored-key",
        "orders": "orders",  # not a TopicNameStrategy subject
        "com-example-Order": "com-example-Order",
    }
    with pytest.raises(SchemaRegistryError, match="both be registered as 'b-value'"):
        target_subjects(_copy(a_value=[(1, 1, False)], b_value=[(1, 2, False)]), {"a": "b"})


# -- addresses and errors --------------------------------------------------------------------------------------------


def test_credentials_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    address = RegistryAddress.parse("https://alice:s%3Acret@registry.example:8081/sr/")
    assert address.shown == "https://registry.example:8081/sr"
    assert "s:cret" not in repr(address) and "s%3Acret" not in repr(address)
    monkeypatch.setenv("SR_LOGIN", "bob:pw")
    assert RegistryAddress.parse("http://registry", user_info_env="SR_LOGIN").shown == "http://registry"
    for url, message in [
        ("registry:8081", r"expected http\(s\)://\[USER:PASSWORD@\]host"),
        ("ftp://registry", r"expected http\(s\)://\[USER:PASSWORD@\]host"),
        ("http://registry:port", "the port is not a number"),
        ("http://u:s3cr#t@registry:port", "the port is not a number"),  # an unencoded # in the password
        ("http://registry:8081?x=1", "expected"),
    ]:
        with pytest.raises(UsageError, match=message) as caught:
            RegistryAddress.parse(url)
        assert "s3cr" not in str(caught.value)
    # A password holding "/" or "@" unencoded: the credentials end at the last @.
    odd = RegistryAddress.parse("https://admin:12/34@x@registry:8081")
    assert odd.shown == "https://registry:8081" and odd._user_info == "admin:12/34@x"
    with pytest.raises(UsageError, match=r"\$SR_NOT_SET is not set to USER:PASSWORD"):
        RegistryAddress.parse("http://registry", user_info_env="SR_NOT_SET")
    with pytest.raises(UsageError, match="not both"):
        RegistryAddress.parse("http://a:b@registry", user_info_env="SR_LOGIN")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_registry_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_kafka_backup.schema_registry.client.time.sleep", lambda seconds: None)
    port = _closed_port()
    with pytest.raises(SchemaRegistryError) as caught:
        RegistryClient(RegistryAddress.parse(f"http://user:pw@127.0.0.1:{port}")).get("/subjects")
    assert str(caught.value).startswith(f"schema registry http://127.0.0.1:{port}: GET /subjects: cannot reach")
    assert "pw" not in str(caught.value)


def test_the_cli_lists_and_captures_with_one_line_errors(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    (root / "kbackup~state").mkdir(parents=True)
    empty = kbackup_in_process("schemas", "list", root)
    assert empty.returncode == 0 and "no schema registry is backed up" in empty.stdout
    copy = _copy(orders_value=[(1, 1, False), (2, 2, True)])
    (root / "kbackup~state" / "schema-registry.json").write_bytes(copy.encode())
    listed = kbackup_in_process("schemas", "list", root)
    assert "orders-value: 1: id 1, 2: id 2 deleted" in listed.stdout
    as_json = kbackup_in_process("schemas", "list", root, "--json")
    assert RegistryCopy.decode(as_json.stdout.encode(), file="stdout") == copy
    port = _closed_port()
    failed = kbackup_in_process("schemas", "capture", root, "--schema-registry", f"http://127.0.0.1:{port}")
    assert failed.returncode == 1
    assert failed.stderr.count("\n") == 1 and "cannot reach the registry" in failed.stderr
    (tmp_path / "empty").mkdir()
    not_a_backup = kbackup_in_process("schemas", "list", tmp_path / "empty")
    assert not_a_backup.returncode == 1 and "not a spark-kafka-backup backup" in not_a_backup.stderr
    verified = kbackup_in_process("verify", root)
    assert verified.returncode == 0 and "schema registry copy: ok (1 subject, 2 versions, 2 schemas" in verified.stdout
    (root / "kbackup~state" / "schema-registry.json").write_bytes(b'{"version": 1}')
    damaged = kbackup_in_process("schemas", "list", root)
    assert damaged.returncode == 1 and "schema-registry.json: not a valid schema registry copy" in damaged.stderr
    verified = kbackup_in_process("verify", root)
    assert verified.returncode == 1 and "schema registry copy: DAMAGED" in verified.stdout
    assert "failed verification" in verified.stderr


# -- the import's logic against a registry model --------------------------------------------------------------------
#
# The registry below models the REST semantics the import relies on, as Karapace 3.16 showed them by hand: one id per
# schema text and references; registering a schema live under the subject returns its version, otherwise makes the
# next version (after deleted ones too); lookups see deleted versions only with deleted=true; a referenced version
# cannot be deleted; a subject's level refuses "incompatible" schemas (here: those whose text starts with "!").


class ModelRegistry:
    def __init__(self, first_id: int = 1) -> None:
        self.ids: dict[tuple[str, str], int] = {}
        self.next_id = first_id
        self.subjects: dict[str, list[tuple[int, int, bool]]] = {}  # name -> [(version, id, deleted)]
        self.levels: dict[str, str] = {}
        self.requests = 0
        self.fail_at: int | None = None
        #: The registry's mode (``None``: a registry without modes); in IMPORT mode a registration's id and version
        #: are taken, unless ``honors_ids`` is False (Apicurio's ccompat API ignores them).
        self.mode: str | None = "READWRITE"
        self.honors_ids = True
        #: Added to the text ``GET /schemas/ids/N`` answers (a registry storing its own canonical form).
        self.canonical_suffix = ""

    def request(self, method: str, path: str, body: object = None, query: dict[str, str] | None = None) -> object:
        from spark_kafka_backup.schema_registry.client import RegistryRefusalError

        self.requests += 1
        if self.fail_at is not None and self.requests >= self.fail_at:
            raise KeyboardInterrupt("killed")  # what a kill leaves: nothing after this request happened
        deleted = (query or {}).get("deleted") == "true"
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]

        def refuse(status: int, code: int) -> RegistryRefusalError:
            return RegistryRefusalError(f"{method} {path}: {code}", status=status, error_code=code)

        if parts[0] == "schemas":  # /schemas/ids/N[/versions]
            held = [text for (text, _), found in self.ids.items() if found == int(parts[2])]
            if not held:
                raise refuse(404, 40403)
            if len(parts) == 4:
                return [{"subject": name, "version": v} for name, versions in self.subjects.items()
                        for v, i, _ in versions if i == int(parts[2])]  # fmt: skip
            return {"schema": held[0] + self.canonical_suffix}
        if parts[0] == "mode":
            if self.mode is None:
                raise refuse(404, 404)
            if len(parts) == 2:
                raise refuse(404, 40401)  # no subject has a mode of its own here
            return {"mode": self.mode}
        if parts[0] == "config" and len(parts) == 2:
            if method == "GET":
                if parts[1] not in self.levels:
                    raise refuse(404, 40408)
                return {"compatibilityLevel": self.levels[parts[1]]}
            if method == "PUT":
                assert isinstance(body, dict)
                self.levels[parts[1]] = body["compatibility"]
                return body
            self.levels.pop(parts[1], None)
            return {"compatibility": "BACKWARD"}
        name = parts[1]
        versions = self.subjects.get(name, [])
        assert isinstance(body, dict) or method in ("GET", "DELETE")
        if method == "GET":  # /subjects/S/versions
            return [v for v, _, gone in versions if deleted or not gone]
        if method == "DELETE":  # /subjects/S/versions/V
            number = int(parts[3])
            if any(f'"{name}", {number}' in text for text, _ in self.ids):
                raise refuse(422, 42206)
            self.subjects[name] = [(v, i, gone or v == number) for v, i, gone in versions]
            return number
        assert isinstance(body, dict)
        content = (body["schema"], json.dumps([[r["subject"], r["version"]] for r in body.get("references", ())]))
        schema = self.ids.get(content)
        if len(parts) == 2:  # lookup
            for number, found, gone in versions:
                if found == schema and (deleted or not gone):
                    return {"id": found, "version": number}
            raise refuse(404, 40403 if versions else 40401)
        if any(found == schema and not gone for _, found, gone in versions):
            return {"id": schema}
        if body["schema"].startswith("!") and versions and self.levels.get(name) != "NONE":
            raise refuse(409, 409)
        number = max((v for v, _, _ in versions), default=0) + 1
        if self.mode == "IMPORT" and self.honors_ids and "id" in body:
            if schema is None and body["id"] in self.ids.values():
                raise refuse(422, 42205)  # the id is another schema's
            schema = self.ids[content] = schema if schema is not None else int(body["id"])
            number = int(body.get("version", number))
        if schema is None:
            schema = self.ids[content] = self.next_id
            self.next_id += 1
        self.subjects[name] = [*versions, (number, schema, False)]
        return {"id": schema}


def _model_client(model: ModelRegistry) -> RegistryClient:
    client = RegistryClient(RegistryAddress.parse("http://target:8081"))
    client.request = model.request  # type: ignore[method-assign]
    return client


def _source_copy() -> RegistryCopy:
    """A source registry's copy: a deleted version followed by the same schema again, a version that is incompatible
    with the one before it (registered under NONE in the source), a reference, a deleted subject, a subject level."""
    return RegistryCopy(
        "http://source:8081",
        0,
        schemas={
            11: Schema(11, "orders v1"),
            12: Schema(12, "orders v2"),
            13: Schema(13, "!orders v3, incompatible"),
            14: Schema(14, "customer"),
            15: Schema(15, "invoice", references=(SchemaReference("c", "customer", 1),)),
            16: Schema(16, "old"),
        },
        subjects={
            "orders-value": Subject(
                "orders-value",
                (SubjectVersion(1, 11), SubjectVersion(2, 12, True), SubjectVersion(3, 12), SubjectVersion(4, 13)),
            ),
            "customer": Subject("customer", (SubjectVersion(1, 14),), "FULL"),
            "invoice-value": Subject("invoice-value", (SubjectVersion(1, 15),)),
            "gone": Subject("gone", (SubjectVersion(1, 16, True),)),
        },
    )


def _import(model: ModelRegistry, state: Path, *, keep_ids: bool = False, orders: str = "orders2") -> object:
    copy = _source_copy()
    return import_registry(
        _model_client(model),
        copy,
        target_subjects(copy, {"orders": orders}),
        RegistryImportState(state),
        keep_ids=keep_ids,
    )


def test_a_rerun_under_other_subjects_finds_the_ids_and_a_wiped_registry_is_refused_before_registering(
    tmp_path: Path,
) -> None:
    """The restore's state remembers the first target id of each schema: a rerun renaming the topic elsewhere
    registers the same schemas under new subjects (accepted; the ids kept are the first ones); a registry that no
    longer serves them is refused before anything is registered; one serving another text under them is said."""
    model = ModelRegistry(first_id=101)
    state = tmp_path / "state.json"
    first = _import(model, state)
    again = _import(model, state, orders="orders3")
    assert again.ids == first.ids and again.registered == 4 and again.warnings == []  # type: ignore[attr-defined]
    assert [v for v, _, _ in model.subjects["orders3-value"]] == [1, 2, 3, 4]
    assert RegistryImportState(state).ids == first.ids  # type: ignore[attr-defined]
    with pytest.raises(SchemaRegistryError) as caught:
        _import(ModelRegistry(first_id=500), state)
    assert (
        "no longer holds id 101, which an earlier restore from this backup found for the backup's schema id 11"
        in str(caught.value)
        and str(state) in str(caught.value)
    )
    # The same registry printing its schemas otherwise (its canonical form): it says they are the same ones; of a
    # schema with references (looked up by text alone, the registry cannot tell) the difference is only said.
    model.canonical_suffix = " "
    said = _import(model, state).warnings  # type: ignore[attr-defined]
    assert len(said) == 1 and "serves id 105 (the backup's schema id 15" in said[0]
    # Filled again after a wipe: id 101 is another schema now.
    refilled = ModelRegistry(first_id=101)
    refilled.ids[("something else", "[]")] = 101
    refilled.subjects["elsewhere"] = [(1, 101, False)]
    for n in range(102, 107):
        refilled.ids[(f"other {n}", "[]")] = n
        refilled.subjects[f"other-{n}"] = [(1, n, False)]
    refilled.next_id = 107
    with pytest.raises(SchemaRegistryError, match="holds another schema under id 101, which an earlier restore"):
        _import(refilled, state)
    assert "orders2-value" not in refilled.subjects  # refused before anything was registered
    wiped = ModelRegistry(first_id=500)
    with pytest.raises(SchemaRegistryError, match="no longer holds id"):
        _import(wiped, state)
    assert wiped.subjects == {}  # refused before anything was registered


def test_an_import_registers_like_the_source_and_a_second_one_changes_nothing(tmp_path: Path) -> None:
    model = ModelRegistry(first_id=101)
    model.subjects["other"] = []
    done = _import(model, tmp_path / "state.json")
    assert model.subjects["orders2-value"] == [(1, 101, False), (2, 102, True), (3, 102, False), (4, 103, False)]
    assert model.subjects["gone"] == [(1, 106, True)]
    assert model.subjects["invoice-value"] == [(1, 105, False)]
    assert model.levels == {"customer": "FULL"}  # orders2-value was relaxed for version 4, then given its level back
    assert done.ids == {11: 101, 12: 102, 13: 103, 14: 104, 15: 105, 16: 106}  # type: ignore[attr-defined]
    before = (dict(model.subjects), dict(model.levels), model.next_id)
    again = _import(model, tmp_path / "state.json")
    assert (dict(model.subjects), dict(model.levels), model.next_id) == before
    assert again.registered == 0 and again.ids == done.ids  # type: ignore[attr-defined]


@pytest.mark.parametrize("keep_ids", [False, True], ids=["ids-rewritten", "import-mode"])
def test_an_import_killed_at_any_request_is_finished_by_the_next_one(tmp_path: Path, keep_ids: bool) -> None:
    mode = "IMPORT" if keep_ids else "READWRITE"
    whole = ModelRegistry(first_id=101)
    whole.mode = mode
    _import(whole, tmp_path / "whole.json", keep_ids=keep_ids)
    expected = (whole.subjects, whole.levels)
    for kill_at in range(1, whole.requests + 1):
        model = ModelRegistry(first_id=101)
        model.mode = mode
        model.fail_at = kill_at
        state = tmp_path / f"state-{kill_at}.json"
        with pytest.raises(KeyboardInterrupt):
            _import(model, state, keep_ids=keep_ids)
        model.fail_at = None
        _import(model, state, keep_ids=keep_ids)
        assert (model.subjects, model.levels) == expected, f"killed at request {kill_at}"
        assert RegistryImportState(state).levels == {} and RegistryImportState(state).deletions == set()


def test_the_restore_refuses_a_backup_without_a_copy_and_unknown_topics_before_asking_the_registry(
    tmp_path: Path,
) -> None:
    from spark_kafka_backup.errors import BackupNotFoundError
    from spark_kafka_backup.partition.writer import PartitionWriter
    from spark_kafka_backup.restore.schemas import register_schemas
    from spark_kafka_backup.restore.settings import parse_restore_args
    from tests.recordgen import sample_record

    root = tmp_path / "backup"
    with PartitionWriter(root / "orders", "orders", 0, fsync=False) as writer:
        writer.append(sample_record(0))
    port = _closed_port()  # nothing is asked of the registry before these refusals
    base = [
        "--bootstrap-server",
        "kafka:9092",
        "--source-dir",
        str(root),
        "--schema-registry",
        f"http://127.0.0.1:{port}",
    ]
    with pytest.raises(BackupNotFoundError, match="holds no copy of a schema registry"):
        register_schemas(parse_restore_args(base))
    (root / "kbackup~state").mkdir(exist_ok=True)
    (root / "kbackup~state" / "schema-registry.json").write_bytes(_copy(orders_value=[(1, 1, False)]).encode())
    with pytest.raises(UsageError, match="--schema-ids names 'order', which the backup does not hold"):
        register_schemas(parse_restore_args([*base, "--schema-ids", "order=values"]))


def test_an_import_in_import_mode_keeps_the_backups_ids_and_versions(tmp_path: Path) -> None:
    model = ModelRegistry(first_id=101)
    model.mode = "IMPORT"
    check_import_mode(_model_client(model), ["orders2-value"])
    done = _import(model, tmp_path / "state.json", keep_ids=True)
    assert done.ids == {i: i for i in range(11, 17)}  # type: ignore[attr-defined]
    assert model.subjects["orders2-value"] == [(1, 11, False), (2, 12, True), (3, 12, False), (4, 13, False)]
    assert model.subjects["invoice-value"] == [(1, 15, False)] and model.subjects["gone"] == [(1, 16, True)]
    assert model.levels == {"customer": "FULL"}
    again = _import(model, tmp_path / "state.json", keep_ids=True)
    assert again.registered == 0 and again.ids == done.ids  # type: ignore[attr-defined]


def test_import_mode_is_refused_in_one_line_where_the_target_cannot_keep_ids(tmp_path: Path) -> None:
    model = ModelRegistry(first_id=101)
    with pytest.raises(SchemaRegistryError, match=r"is in mode READWRITE, and subject 'orders2-value' is not in mode"):
        check_import_mode(_model_client(model), ["orders2-value"])
    model.mode = None
    with pytest.raises(SchemaRegistryError, match="has no modes, so it cannot register schemas under the backup's"):
        check_import_mode(_model_client(model), ["orders2-value"])
    # In IMPORT mode but ignoring the ids given: refused at the first registration, nothing more registered.
    model.mode, model.honors_ids = "IMPORT", False
    with pytest.raises(SchemaRegistryError) as caught:
        _import(model, tmp_path / "state.json", keep_ids=True)
    assert (
        "asked to register the backup's schema id 11 under 'orders2-value' as version 1 with that id (mode IMPORT), "
        "it made it version 1 with id 101: this registry does not register under the ids and versions given"
        in str(caught.value)
    )
    assert "\n" not in str(caught.value)
    assert model.subjects == {"orders2-value": [(1, 101, False)]}
    # A target holding a schema of the backup under another id already.
    held = ModelRegistry(first_id=101)
    held.mode = "IMPORT"
    held.ids[("customer", "[]")] = 7
    held.subjects["customer"] = [(1, 7, False)]
    with pytest.raises(SchemaRegistryError, match="'customer' holds the backup's schema id 14 as id 7"):
        _import(held, tmp_path / "held.json", keep_ids=True)
