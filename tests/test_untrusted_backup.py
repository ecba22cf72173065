"""A backup directory nobody trusts can do no harm (issue 29): names read from it are checked before they touch a
file system or an object store, links are never followed out of it, and JSON is parsed within bounds.

Every hostile case checks a sentinel beside the backup (another backup and a victim directory holding files named
like segments): nothing outside the root is read, written or deleted, and the command ends in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.prune import intent_path
from spark_kafka_backup.catalog.store import catalog_path
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import nesting_depth, parse_document
from spark_kafka_backup.format.naming import check_segment_name, check_topic_name, is_topic_name
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.merge_intent import intent_path as merge_intent_path
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.storage import ObjectPath, as_local, storage_for
from tests.backup_builders import write_original_style
from tests.kafka_helpers import kbackup_in_process
from tests.s3_server import S3Server

NOW = 1_790_000_000_000
OLD = NOW - 30 * 86_400_000
SEGMENT = "segment_partition_000_from_offset_0000000000"


def write_backup(root: Path, topic: str = "t", *, old: bool = True) -> None:
    """Topic ``topic`` partition 0: 30 records in several segments, a month old when ``old``."""
    stamp = OLD if old else NOW
    with PartitionWriter(root / topic, topic, 0, max_segment_size=300, fsync=False, ledger=CatalogLedger(root)) as w:
        for i in range(30):
            w.append(Record(i, 0, stamp + i, b"k%d" % i, b"v" * 40))


def snapshot(*directories: Path) -> dict[str, str]:
    """Every file under ``directories`` with a digest of its bytes (links as their target)."""
    found = {}
    for directory in directories:
        for path in sorted(directory.rglob("*")):
            if path.is_symlink():
                found[str(path)] = "-> " + os.readlink(path)
            elif path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A backup ``root``, and beside it another backup ``B`` and a ``victim`` directory (the sentinels)."""
    root = tmp_path / "backup"
    write_backup(root)
    other = tmp_path / "B"
    write_backup(other, "orders")
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("x_records", "x_index", "s_records", "s_index", "partition_000.json"):
        (victim / name).write_bytes(b"keep me")
    return root, [other, victim]


def one_line_error(result: object, *needles: str) -> str:
    code, out, err = result.returncode, result.stdout, result.stderr  # type: ignore[attr-defined]
    assert code != 0, out + err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return str(lines[0])


# -- names from intents and catalogs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "segments",
    [
        [["../B/orders", 0, SEGMENT]],
        [["t", 0, "../../victim/x"]],
        [["t", 0, "VICTIM/x"]],  # replaced by the absolute path of the victim directory
        [["VICTIM", 0, "x"]],
        [["t", "0", SEGMENT]],
        [["t", -1, SEGMENT]],
        [["t", 0, ""]],
    ],
    ids=["topic-dotdot", "name-dotdot", "name-absolute", "topic-absolute", "partition-text", "negative", "empty"],
)
def test_a_planted_prune_intent_is_refused_before_anything_is_deleted(
    scene: tuple[Path, list[Path]], segments: list[list[object]]
) -> None:
    root, sentinels = scene
    victim = str(sentinels[1])
    planted = [[str(part).replace("VICTIM", victim) if isinstance(part, str) else part for part in s] for s in segments]
    as_local(intent_path(root)).write_text(json.dumps({"segments": planted, "checkpoints": []}))
    before = snapshot(root, *sentinels)
    line = one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), "prune-intent.json")
    assert "expected" in line
    assert snapshot(root, *sentinels) == before


@pytest.mark.parametrize(
    "intent",
    [
        {"topic": "../B/orders", "partition": 0, "segments": [SEGMENT], "merged": SEGMENT + "_merged_1"},
        {"topic": "t", "partition": 0, "segments": ["../../victim/x"], "merged": SEGMENT + "_merged_1"},
        {"topic": "t", "partition": 0, "segments": [], "merged": "./../../victim/x"},
        {"topic": "t", "partition": 0, "segments": [], "merged": "VICTIM/x"},
    ],
    ids=["topic", "segment", "merged-dotdot", "merged-absolute"],
)
def test_a_planted_merge_intent_is_refused_before_anything_is_deleted(
    scene: tuple[Path, list[Path]], intent: dict[str, object]
) -> None:
    root, sentinels = scene
    planted = json.loads(json.dumps(intent).replace("VICTIM", str(sentinels[1])))
    as_local(merge_intent_path(root)).write_text(json.dumps(planted))
    before = snapshot(root, *sentinels)
    for command in (("prune", root, "--older-than", "1d"), ("merge", root)):
        one_line_error(kbackup_in_process(*command), "merge-intent.json")
    assert snapshot(root, *sentinels) == before


@pytest.mark.parametrize("name", ["../../victim/s", "../../B/orders/" + SEGMENT, "/tmp/elsewhere/s"])
def test_a_catalog_entry_naming_a_file_outside_is_refused_by_an_ordinary_prune(
    scene: tuple[Path, list[Path]], name: str
) -> None:
    root, sentinels = scene
    path = Path(str(catalog_path(root, "t", 0)))
    document = json.loads(path.read_text())
    document["segments"][0]["name"] = name
    path.write_text(json.dumps(document))
    before = snapshot(root, *sentinels)
    one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), str(path), "catalog entry")
    assert snapshot(root, *sentinels) == before
    for command in ("verify", "describe", "cat"):
        result = kbackup_in_process(command, root)
        assert result.returncode != 0 and "Traceback" not in result.stderr, (command, result.stderr)
    assert snapshot(root, *sentinels) == before


def test_a_catalog_naming_another_topic_or_a_path_is_refused(scene: tuple[Path, list[Path]]) -> None:
    root, sentinels = scene
    path = Path(str(catalog_path(root, "t", 0)))
    original = json.loads(path.read_text())
    before = snapshot(*sentinels)
    for topic, needle in (("../../victim", "not a Kafka topic name"), ("other", "a catalog of another partition")):
        path.write_text(json.dumps({**original, "topic": topic}))
        one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), str(path), needle)
    assert snapshot(*sentinels) == before


def test_names_follow_the_layout_grammar() -> None:
    assert is_topic_name("orders.v2_x-1") and is_topic_name("a" * 249)
    for bad in ("", ".", "..", "a/b", "../x", "/abs", "a" * 250, "t\x1b", "t\n", 7, None):
        assert not is_topic_name(bad), bad
        with pytest.raises(FormatError, match="not a Kafka topic name"):
            check_topic_name(bad, file="f")
    assert check_segment_name("s0", file="f") == "s0"  # the format allows any plain name
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x00b", "x" * 241, "s\nforged", "s\x1b[2J", "s\x9b"):
        with pytest.raises(FormatError, match="names no file in the topic directory"):
            check_segment_name(bad, file="f")


# -- links out of the backup -----------------------------------------------------------------------------------


def test_a_records_file_linked_out_of_the_backup_is_not_ok(scene: tuple[Path, list[Path]]) -> None:
    root, sentinels = scene
    victim = sentinels[1]
    records = root / "t" / f"{SEGMENT}_records"
    (victim / "copy_records").write_bytes(records.read_bytes())  # the same bytes, outside
    records.unlink()
    records.symlink_to(victim / "copy_records")
    before = snapshot(root, *sentinels)
    result = kbackup_in_process("verify", root)
    assert result.returncode != 0, result.stdout
    assert "symbolic link" in result.stdout + result.stderr or "missing" in result.stdout, result.stdout
    cat = kbackup_in_process("cat", root)
    assert cat.returncode != 0 and "Traceback" not in cat.stderr, cat.stderr
    assert snapshot(root, *sentinels) == before


def test_a_topic_or_state_directory_linked_out_is_not_followed(scene: tuple[Path, list[Path]]) -> None:
    root, sentinels = scene
    other = sentinels[0]
    (root / "orders").symlink_to(other / "orders")  # looks like a topic of this backup
    before = snapshot(*sentinels)
    listing = kbackup_in_process("ls", root)
    assert listing.returncode == 0 and "orders" not in listing.stdout, listing.stdout
    assert kbackup_in_process("prune", root, "--older-than", "1d").returncode == 0
    assert snapshot(*sentinels) == before
    with pytest.raises(FormatError, match="symbolic link"):
        PartitionWriter(root / "orders", "orders", 0, fsync=False)
    assert snapshot(*sentinels) == before

    state = root / "kbackup~state"
    state.rename(root.parent / "moved-state")
    state.symlink_to(root.parent / "moved-state")
    moved = snapshot(root.parent / "moved-state")
    result = kbackup_in_process("checkpoint", "list", root)
    one_line_error(result, "symbolic link")
    one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), "symbolic link")
    assert snapshot(root.parent / "moved-state") == moved


# -- object storage --------------------------------------------------------------------------------------------


def test_planted_names_on_an_object_store_are_refused(s3: S3Server) -> None:
    bucket = ObjectPath("s3", s3.new_bucket(), "backups/prod")
    other = ObjectPath("s3", bucket.bucket, "backups/other")
    for root, topic in ((bucket, "t"), (other, "orders")):
        with ObjectPartitionWriter(root / topic, topic, 0, max_segment_size=300, ledger=CatalogLedger(root)) as w:
            for i in range(30):
                w.append(Record(i, 0, OLD + i, b"k%d" % i, b"v" * 40))
    client = s3.client()

    def keys() -> dict[str, str]:
        listed = client.list_objects_v2(Bucket=bucket.bucket)  # type: ignore[attr-defined]
        return {item["Key"]: item["ETag"] for item in listed.get("Contents", [])}

    storage = storage_for(bucket)
    for document, name in (
        ({"segments": [["../other/orders", 0, SEGMENT]], "checkpoints": []}, "prune-intent.json"),
        ({"segments": [["t", 0, "../../other/orders/" + SEGMENT]], "checkpoints": []}, "prune-intent.json"),
        ({"topic": "t", "partition": 0, "segments": [], "merged": "../x"}, "merge-intent.json"),
    ):
        storage.write_whole(bucket / "kbackup~state" / name, json.dumps(document).encode())
        before = keys()
        one_line_error(kbackup_in_process("prune", str(bucket), "--older-than", "1d"), name)
        assert keys() == before
        storage.delete(bucket / "kbackup~state" / name)
    # A catalog entry naming another backup's segment, through an ordinary prune.
    path = catalog_path(bucket, "t", 0)
    original = storage.read_limited(path, 1 << 20)
    document = json.loads(original)
    document["segments"][0]["name"] = "../../other/orders/" + SEGMENT
    storage.write_whole(path, json.dumps(document).encode())
    before = keys()
    one_line_error(kbackup_in_process("prune", str(bucket), "--older-than", "1d"), str(path), "catalog entry")
    assert keys() == before
    storage.write_whole(path, original)
    assert kbackup_in_process("prune", str(bucket), "--older-than", "1d").returncode == 0
    assert all(key.startswith("backups/prod/") for key in set(before) - set(keys()))  # only its own old segments


# -- JSON within bounds ----------------------------------------------------------------------------------------


def test_nesting_is_measured_without_recursion() -> None:
    assert nesting_depth(b'{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert nesting_depth(b'"]]]\\"[[["') == 0
    assert nesting_depth(b"[" * 200_000 + b"]" * 200_000) == 200_000
    assert parse_document(b'{"a": [1]}', file="f") == {"a": [1]}
    with pytest.raises(FormatError, match=r"f: not a valid JSON document: nested too deeply"):
        parse_document(b"[" * 200_000 + b"]" * 200_000, file="f")
    with pytest.raises(FormatError, match="f: not a valid JSON document"):
        parse_document(b"\xff\xfe{", file="f")


def test_deeply_nested_state_files_end_commands_in_one_line(scene: tuple[Path, list[Path]]) -> None:
    root, _ = scene
    deep = "[" * 200_000 + "]" * 200_000
    checkpoint = Path(str(checkpoints.checkpoint_path(root, 1)))
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_text('{"version": 1, "groups": ' + deep + "}")
    for command in (("checkpoint", "list"), ("describe",), ("report", "-o", str(root.parent / "r.html")), ("prune",)):
        extra = ("--older-than", "1d") if command == ("prune",) else ()
        one_line_error(kbackup_in_process(*command, root, *extra), str(checkpoint), "nested too deeply")
    checkpoint.unlink()
    catalog = Path(str(catalog_path(root, "t", 0)))
    catalog.write_text(deep)
    one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), str(catalog), "nested too deeply")
    catalog.unlink()
    offsets = root / "t" / "consumer_offsets_partition_000"
    offsets.write_text('{"g": ' + deep + "}")
    result = kbackup_in_process("offsets", root)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "nests too deeply" in result.stdout + result.stderr
    offsets.unlink()
    as_local(intent_path(root)).write_text(deep)
    one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), "prune-intent.json", "nested too deeply")


# -- names shown, never acted on -------------------------------------------------------------------------------

HOSTILE_GROUPS = ["\x1b]0;pwned\x07\x1b[2J", "evil\nt\t0\tforged\t99", "cr\rover", "bidi\u202eevil"]
RAW = ("\x1b", "\x07", "\r", "\u202e")


def test_group_ids_and_header_keys_reach_no_terminal_raw(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        writer.append(Record(0, 0, NOW, b"k", b"v", (("\x1b[31mred\x07", b"x"), ("cr\rnl\n", None))))
    write_consumer_offsets(root / "t", 0, {group: 1 for group in HOSTILE_GROUPS})
    offsets = kbackup_in_process("offsets", root)
    assert offsets.returncode == 0, offsets.stderr
    assert not any(raw in offsets.stdout for raw in RAW), repr(offsets.stdout)
    rows = offsets.stdout.splitlines()
    assert len(rows) == len(HOSTILE_GROUPS) and all(row.count("\t") == 3 for row in rows), rows  # no forged row
    assert "t\t0\t\\x1b]0;pwned\\x07\\x1b[2J\t1" in rows
    assert "t\t0\tevil\\x0at\\x090\\x09forged\\x0999\t1" in rows
    described = kbackup_in_process("describe", root)
    assert not any(raw in described.stdout for raw in RAW), repr(described.stdout)
    assert "    group evil\\x0at\\x090\\x09forged\\x0999: 1" in described.stdout.splitlines()
    as_json = json.loads(kbackup_in_process("offsets", root, "--json").stdout)
    assert set(as_json["t"]["0"]) == set(HOSTILE_GROUPS)  # JSON keeps the names exactly (escaped by JSON)
    cat = kbackup_in_process("cat", root)
    assert not any(raw in cat.stdout for raw in RAW), repr(cat.stdout)
    assert [key for key, _ in json.loads(cat.stdout)["headers"]] == ["\x1b[31mred\x07", "cr\rnl\n"]


def test_a_directory_name_with_escapes_is_shown_escaped(tmp_path: Path) -> None:
    root = tmp_path / "evil\x1b[2J\x07dir"
    write_backup(root, old=False)
    shutil.copytree(root / "t", root / "t\x1b]0;x\x07")  # not a Kafka topic name: not a topic of the backup
    for command in ("ls", "describe", "verify"):
        result = kbackup_in_process(command, root)
        assert result.returncode == 0, result.stderr
        assert not any(raw in result.stdout + result.stderr for raw in RAW), repr(result.stdout)
        assert "t\\x1b" not in result.stdout, result.stdout
    missing = kbackup_in_process("ls", tmp_path / "gone\x1b[2J")
    line = one_line_error(missing, "gone\\x1b[2J")
    assert "\x1b" not in line


def test_log_lines_and_error_lines_show_names_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from spark_kafka_backup.logsetup import JsonLines, TextLines, print_error

    record = logging.LogRecord(
        "spark_kafka_backup", logging.INFO, "f", 1, "group %s placed", (HOSTILE_GROUPS[1],), None
    )
    assert (
        TextLines().format(record).endswith(" spark-kafka-backup INFO group evil\\x0at\\x090\\x09forged\\x0999 placed")
    )
    record = logging.LogRecord("spark_kafka_backup", logging.INFO, "f", 1, "group %s", ("a\u202eb\x9bc",), None)
    line = JsonLines().format(record)
    assert json.loads(line)["message"] == "group a\u202eb\x9bc" and "\u202e" not in line and "\x9b" not in line
    print_error("spark-kafka-backup backup: error: group \x1b[2J\nrefused")
    assert capsys.readouterr().err == "spark-kafka-backup backup: error: group \\x1b[2J\\x0arefused\n"


# -- topic configurations from a backup ------------------------------------------------------------------------


def test_only_configurations_of_the_data_are_copied_by_default() -> None:
    from spark_kafka_backup.restore.topic_configs import choose_configs

    recorded = {"retention.ms": "-1", "cleanup.policy": "compact", "unclean.leader.election.enable": "true",
                "min.insync.replicas": "1", "leader.replication.throttled.replicas": "*", "made.up": "x",
                "segment.ms": "60000"}  # fmt: skip
    data = choose_configs(recorded, "data", dropped={"segment.ms"}, given={"cleanup.policy"})
    assert data.copied == {"retention.ms": "-1"}
    assert set(data.skipped) == {"unclean.leader.election.enable", "min.insync.replicas",
                                 "leader.replication.throttled.replicas", "made.up", "segment.ms"}  # fmt: skip
    assert data.skipped["segment.ms"] == ("60000", "--drop-topic-config")
    assert data.describe_skipped("t")[0].startswith("t: leader.replication.throttled.replicas=* of the backup is not")
    everything = choose_configs(recorded, "all", dropped={"segment.ms"})
    assert set(everything.copied) == set(recorded) - {"segment.ms"}
    nothing = choose_configs(recorded, "none")
    assert nothing.copied == {} and {why for _, why in nothing.skipped.values()} == {"--topic-configs none"}


# -- an encrypted backup cannot be downgraded ------------------------------------------------------------------

KEK = bytes(range(32))


@pytest.fixture
def sealed_backup(tmp_path: Path) -> Path:
    """Topic ``t`` partition 0 written with a key: ~6 sealed segments and the newest being written (plain)."""

    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=400, fsync=False, ledger=CatalogLedger(root),
                         encryption_key=KEK) as writer:  # fmt: skip
        for i in range(40):
            writer.append(Record(i, 0, NOW + i, b"k%d" % i, b"v" * 40))
    (tmp_path / "kek.hex").write_text(KEK.hex())
    return root


def forge_plain(root: Path, number: int, value: bytes = b"forged") -> str:
    """Put a plain segment of chosen records where the partition's segment ``number`` is: same offsets."""
    reader = PartitionReader(root / "t", 0)
    segment = reader.segments[number]
    following = reader.segments[number + 1].start_offset
    write_original_style(root / "forged", 0, [[Record(o, 0, NOW, b"k", value) for o in range(segment.start_offset,
                                                                                             following)]])  # fmt: skip
    records, index = reader.segment_paths(segment)
    forged = root / "forged"
    (forged / "segment_partition_000_from_offset_0000000000_records").replace(as_local(records))
    (forged / "segment_partition_000_from_offset_0000000000_index").replace(as_local(index))
    shutil.rmtree(forged)
    return segment.name


def with_key(tmp_path: Path, *args: str | Path) -> object:
    return kbackup_in_process(*args, "--encryption-key-file", tmp_path / "kek.hex")


@pytest.mark.parametrize("catalog", ["deleted", "edited"])
def test_a_sealed_segment_replaced_by_a_plain_one_is_refused_by_every_reader(
    sealed_backup: Path, tmp_path: Path, catalog: str
) -> None:
    root = sealed_backup
    name = forge_plain(root, 1)
    path = Path(str(catalog_path(root, "t", 0)))
    if catalog == "deleted":
        path.unlink()
    else:  # checksums made to match, the key id dropped: what a careful forger does
        from spark_kafka_backup.catalog.build import build_partition_catalog
        from spark_kafka_backup.format.encryption import KeyRing

        path.write_bytes(build_partition_catalog(root / "t", 0, keys=KeyRing.of([KEK])).encode())
    verified = with_key(tmp_path, "verify", root, "--deep")
    assert verified.returncode == 1, verified.stdout  # type: ignore[attr-defined]
    expected = f"t/0: segment {name} is stored plain, but the partition is sealed with key id"
    assert expected in verified.stdout, verified.stdout  # type: ignore[attr-defined]
    cat = with_key(tmp_path, "cat", root, "--no-verify")
    line = one_line_error(cat, "nothing was printed", expected)
    assert "forged" not in cat.stdout + line  # type: ignore[attr-defined]
    merged = with_key(tmp_path, "merge", root)
    one_line_error(merged, "nothing was merged", expected)


def test_a_deleted_seal_record_or_a_cut_partition_index_is_refused(sealed_backup: Path, tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.seals import seal_record_path
    from spark_kafka_backup.format.partition_index import encode_partition_index

    root = sealed_backup
    record = Path(str(seal_record_path(root, "t", 0)))
    saved = record.read_bytes()
    document = json.loads(saved)
    document["sealedThrough"] = 0
    record.write_text(json.dumps(document))
    one_line_error(with_key(tmp_path, "cat", root), "the seal record fails authentication with its key")
    record.unlink()
    one_line_error(with_key(tmp_path, "cat", root), "no seal record", "--allow-unauthenticated")
    assert with_key(tmp_path, "cat", root, "--allow-unauthenticated").returncode == 0  # type: ignore[attr-defined]
    record.write_bytes(saved)
    assert with_key(tmp_path, "cat", root).returncode == 0  # type: ignore[attr-defined]
    # Cut the partition index after its second segment: the sealed segments after it are gone, the plain one
    # forged in their place looks like the newest segment, still being written.
    index = root / "t" / "index_partition_000"
    reader = PartitionReader(root / "t", 0)
    forge_plain(root, 1)
    index.write_bytes(encode_partition_index(reader.segments[:2]))
    line = one_line_error(with_key(tmp_path, "cat", root), "the partition index ends before offset")
    assert "segments were removed" in line


def test_encryption_turned_on_vouches_for_the_plain_segments_before_it(tmp_path: Path) -> None:

    root = tmp_path / "backup"
    (tmp_path / "kek.hex").write_text(KEK.hex())
    with PartitionWriter(root / "t", "t", 0, max_segment_size=400, fsync=False, ledger=CatalogLedger(root)) as w:
        for i in range(20):
            w.append(Record(i, 0, NOW + i, b"k%d" % i, b"v" * 40))
    with PartitionWriter(root / "t", "t", 0, max_segment_size=400, fsync=False, ledger=CatalogLedger(root),
                         encryption_key=KEK) as w:  # fmt: skip
        for i in range(20, 40):
            w.append(Record(i, 0, NOW + i, b"k%d" % i, b"v" * 40))
    cat = with_key(tmp_path, "cat", root)
    assert cat.returncode == 0 and len(cat.stdout.splitlines()) == 40, cat.stderr  # type: ignore[attr-defined]
    assert with_key(tmp_path, "verify", root, "--deep").returncode == 0  # type: ignore[attr-defined]
    name = forge_plain(root, 0)  # a vouched plain segment, changed
    line = one_line_error(with_key(tmp_path, "cat", root), f"segment {name} is not the plain segment the seal")
    assert "forged" not in line


def test_the_newest_sealed_segment_cannot_be_dropped_for_a_forged_one_being_written(
    sealed_backup: Path, tmp_path: Path
) -> None:
    from spark_kafka_backup.catalog.seals import seal_record_path
    from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index

    root = sealed_backup
    record = json.loads(Path(str(seal_record_path(root, "t", 0))).read_text())
    through = record["sealedThrough"]
    assert through > 0 and record["newest"]
    reader = PartitionReader(root / "t", 0)
    kept = [segment for segment in reader.segments if segment.start_offset < through]
    forged = root / "forged"
    write_original_style(forged, 0, [[Record(o, 0, NOW, b"k", b"EVIL") for o in range(through + 1, 40)]])
    name = f"segment_partition_000_from_offset_{through + 1:010d}"
    for suffix in ("_records", "_index"):
        (forged / f"segment_partition_000_from_offset_0000000000{suffix}").replace(root / "t" / f"{name}{suffix}")
    shutil.rmtree(forged)
    (root / "t" / "index_partition_000").write_bytes(
        encode_partition_index([*kept, PartitionIndexEntry(name, through + 1)])
    )
    Path(str(catalog_path(root, "t", 0))).unlink()
    for command in (("cat", root), ("verify", root, "--deep"), ("merge", root)):
        result = with_key(tmp_path, *command)
        assert result.returncode == 1, result.stdout  # type: ignore[attr-defined]
        output = result.stdout + result.stderr  # type: ignore[attr-defined]
        assert (
            f"the newest sealed segment {record['newest']} (offset {through}) is not in the partition index" in output
        )
        assert "RVZJTA" not in output  # base64 of EVIL: never printed


def test_planted_links_at_lock_and_temporary_names_are_never_written_through(scene: tuple[Path, list[Path]]) -> None:
    root, sentinels = scene
    victim = sentinels[1]
    state = root / "kbackup~state"
    (state / "prune-lease").symlink_to(victim / "x_records")  # the lock prune and merge take
    before = snapshot(*sentinels)
    one_line_error(kbackup_in_process("prune", root, "--older-than", "1d"), "prune-lease", "symbolic link")
    one_line_error(kbackup_in_process("merge", root), "prune-lease", "symbolic link")
    assert snapshot(*sentinels) == before
    (state / "prune-lease").unlink()
    # Links at the temporary names of the next pids: an atomic write removes the link, never writes through it.
    catalog = Path(str(catalog_path(root, "t", 0)))
    for pid in range(os.getpid(), os.getpid() + 3):
        (catalog.parent / f".{catalog.name}.{pid}.kbackup-tmp").symlink_to(victim / "partition_000.json")
    assert kbackup_in_process("catalog", "rebuild", root).returncode == 0
    assert not catalog.is_symlink() and json.loads(catalog.read_text())["topic"] == "t"
    assert snapshot(*sentinels) == before


def test_an_index_rebuild_does_not_read_a_records_file_linked_out(scene: tuple[Path, list[Path]]) -> None:
    root, sentinels = scene
    other = sentinels[0] / "orders"
    records = root / "t" / f"{SEGMENT}_records"
    records.unlink()
    records.symlink_to(other / f"{SEGMENT}_records")
    before = snapshot(*sentinels)
    result = kbackup_in_process("index", "rebuild", root / "t")
    assert result.returncode != 0 and "symbolic link" in result.stdout + result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(*sentinels) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [("takenAt", 1e400), ("takenAt", 10**29), ("requestedAt", 10**17), ("id", 10**20), ("takenAt", True)],
)
def test_numbers_out_of_their_range_in_a_checkpoint_are_one_line(
    scene: tuple[Path, list[Path]], field: str, value: object
) -> None:
    root, _ = scene
    path = Path(str(checkpoints.checkpoint_path(root, 1)))
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"version": 1, "id": 1, "status": "completed", "requestedAt": NOW, "takenAt": NOW, "reason": None,
                "groups": {}, "ends": {"t": {"0": 5}}}  # fmt: skip
    path.write_text(json.dumps({**document, field: value}))
    for command in (("checkpoint", "list", root), ("describe", root), ("prune", root, "--older-than", "1d")):
        one_line_error(kbackup_in_process(*command), str(path))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("recordsCrc32c", None),
        ("recordsCrc32c", 1e400),
        ("maxTimestamp", "soon"),
        ("records", 1.5),
        ("recordsBytes", True),
    ],
)
def test_a_catalog_entry_of_the_wrong_type_is_one_line(
    scene: tuple[Path, list[Path]], field: str, value: object
) -> None:
    root, _ = scene
    path = Path(str(catalog_path(root, "t", 0)))
    document = json.loads(path.read_text())
    document["segments"][0][field] = value
    path.write_text(json.dumps(document))
    for command in (("verify", root), ("cat", root), ("describe", root), ("prune", root, "--older-than", "1d")):
        result = kbackup_in_process(*command)
        assert result.returncode != 0 and "Traceback" not in result.stderr, (command, result.stderr)
        assert str(path) in result.stdout + result.stderr, (command, result.stdout, result.stderr)


def test_a_backup_inside_a_confined_directory_is_held_to_its_own_root(tmp_path: Path) -> None:
    from spark_kafka_backup.storage.local import check_inside, confine

    outer, root = tmp_path / "outer", tmp_path / "outer" / "backup"
    (outer / "elsewhere").mkdir(parents=True)
    root.mkdir()
    (root / "t").symlink_to(outer / "elsewhere")  # inside the outer directory, outside the backup
    confine(outer)
    confine(root)
    with pytest.raises(FormatError, match="symbolic link"):
        check_inside(root / "t" / "index_partition_000")


def test_the_next_backup_run_does_not_vouch_for_a_forgery_whose_record_was_deleted(
    sealed_backup: Path, tmp_path: Path
) -> None:
    from spark_kafka_backup.catalog.seals import seal_record_path
    from spark_kafka_backup.catalog.store import cataloged_marker_path
    from spark_kafka_backup.errors import DamagedBackupError

    root = sealed_backup
    name = forge_plain(root, 1)
    Path(str(catalog_path(root, "t", 0))).unlink()  # the catalog no longer says anything is sealed
    with pytest.raises(DamagedBackupError, match=r"its catalog .* is missing"):  # a lost catalog stops the writer
        PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), encryption_key=KEK)
    Path(str(cataloged_marker_path(root, "t", 0))).unlink()  # a careful forger removes the marker as well
    record = Path(str(seal_record_path(root, "t", 0)))
    for tamper in ("delete", "garble"):
        if tamper == "delete":
            record.unlink()
        else:
            document = json.loads(record.read_text())
            record.write_text(json.dumps({**document, "keyId": "00" * 16}))  # looks like another key's record
        with PartitionWriter(root / "t", "t", 0, max_segment_size=400, fsync=False, ledger=CatalogLedger(root),
                             encryption_key=KEK) as writer:  # fmt: skip  # an ordinary next run, with the key
            writer.append(Record(40 if tamper == "delete" else 41, 0, NOW, b"k", b"v"))
        assert name not in record.read_text()  # not vouched for: the partition already held sealed segments
        one_line_error(with_key(tmp_path, "cat", root), f"segment {name} is stored plain")


def test_a_writer_without_the_key_is_refused_on_a_sealed_partition(sealed_backup: Path) -> None:
    from spark_kafka_backup.errors import UsageError

    with pytest.raises(UsageError, match=r"t/0 is written with a key \(key id [0-9a-f]{32}, seal record .*give the"):
        PartitionWriter(sealed_backup / "t", "t", 0, fsync=False, ledger=CatalogLedger(sealed_backup))


def test_a_partition_that_turned_encryption_on_still_prunes_and_reads_a_window_with_its_keys(tmp_path: Path) -> None:

    root = tmp_path / "backup"
    other = bytes(range(1, 33))
    (tmp_path / "kek.hex").write_text(KEK.hex())
    (tmp_path / "other.hex").write_text(other.hex())
    for offsets, key, stamp in ((range(0, 20), None, OLD), (range(20, 40), KEK, OLD), (range(40, 60), other, NOW)):
        with PartitionWriter(root / "t", "t", 0, max_segment_size=400, fsync=False, ledger=CatalogLedger(root),
                             encryption_key=key) as writer:  # fmt: skip
            for i in offsets:
                writer.append(Record(i, 0, stamp + i, b"k%d" % i, b"v" * 40))
    both = ("--encryption-key-file", tmp_path / "kek.hex", "--encryption-key-file", tmp_path / "other.hex")
    # After the key changed, the record under the new key no longer vouches for the plain segments from before
    # the first key (the old record cannot be checked without the old key): named, and vouched for again.
    one_line_error(kbackup_in_process("cat", root, *both), "stored plain", "catalog rebuild")
    assert kbackup_in_process("catalog", "rebuild", root, *both).returncode == 0
    window = kbackup_in_process("cat", root, "--from-offset", "45", "--to-offset", "50", "--encryption-key-file",
                                tmp_path / "other.hex")  # fmt: skip
    assert window.returncode == 0 and len(window.stdout.splitlines()) == 6, window.stderr
    pruned = kbackup_in_process("prune", root, "--older-than", "1d")
    assert pruned.returncode == 0 and "deleted 0 segments" not in pruned.stdout, pruned.stdout + pruned.stderr
    everything = kbackup_in_process("cat", root, *both, "--allow-unauthenticated")
    assert everything.returncode == 0, everything.stderr


def test_a_sealed_segments_index_cannot_hide_or_invent_records(sealed_backup: Path, tmp_path: Path) -> None:
    from spark_kafka_backup.format.encryption import KeyRing
    from spark_kafka_backup.format.segment_index import SegmentIndexEntry, encode_segment_index
    from spark_kafka_backup.partition.segment_reader import SegmentIndexFile

    root = sealed_backup
    reader = PartitionReader(root / "t", 0)
    _, index = reader.segment_paths(reader.segments[1])
    with SegmentIndexFile(index) as listed:
        entries = list(listed.iter_entries(0))
    assert len(entries) >= 3
    # An entry left out: its bytes lie in no listed record (an entry pointing inside a value leaves such bytes too).
    as_local(index).write_bytes(encode_segment_index(SegmentIndexEntry(*e) for e in entries[:1] + entries[2:]))
    Path(str(catalog_path(root, "t", 0))).unlink()  # a careful forger leaves no checksum behind
    one_line_error(with_key(tmp_path, "cat", root, "--no-verify"), "of a sealed segment are not in any record")
    verified = with_key(tmp_path, "verify", root, "--deep")
    assert verified.returncode == 1 and "the index was changed" in verified.stdout  # type: ignore[attr-defined]
    with pytest.raises(FormatError, match="of a sealed segment are not in any record its index lists"):
        for _ in PartitionReader(root / "t", 0, keys=KeyRing.of([KEK])).record_batches():
            pass
