"""The ``spark-kafka-backup`` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.conftest import INDEX_VECTORS, SHAPES_TOPIC
from tests.kafka_helpers import run_kbackup
from tests.recordgen import sample_record

CAT_KEYS = ["topic", "partition", "offset", "timestampType", "timestamp", "key", "value", "headers"]


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_kbackup(*args, check=check, in_process=False)  # the CLI as users run it: its own process


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A backup root: 'orders' written by spark-kafka-backup (2 partitions), 'legacy' a copy of the shapes vector (the
    record shapes of the original tool's tests, offsets with gaps)."""
    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "orders", "orders", partition, max_segment_size=400, fsync=False) as writer:
            for i in range(partition, 8, 2):
                writer.append(sample_record(i))
    write_consumer_offsets(root / "orders", 0, {"billing": 9, "audit": 0}, sync=False)
    legacy = root / "legacy"
    shutil.copytree(SHAPES_TOPIC, legacy)
    for path in legacy.iterdir():
        path.chmod(0o644)
    return root


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _expected_json(topic: str, partition: int, record: Record) -> dict[str, object]:
    names = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime", -2: "CreateTime"}
    return {
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestampType": names[record.timestamp_type],
        "timestamp": record.timestamp,
        "key": b64(record.key),
        "value": b64(record.value),
        "headers": [[key, b64(value)] for key, value in record.headers],
    }


def test_cat_prints_every_record_with_exact_keys(root: Path) -> None:
    lines = run("cat", root, "--topic", "orders").stdout.splitlines()
    objects = [json.loads(line) for line in lines]
    assert all(list(obj) == CAT_KEYS for obj in objects)
    expected = [_expected_json("orders", 0, sample_record(i)) for i in range(0, 8, 2)]
    expected += [_expected_json("orders", 1, sample_record(i)) for i in range(1, 8, 2)]
    assert objects == expected


def test_cat_timestamp_types_and_headers(root: Path) -> None:
    objects = [
        json.loads(line) for line in run("cat", root, "--topic", "orders", "--partition", "1").stdout.splitlines()
    ]
    by_offset = {obj["offset"]: obj for obj in objects}
    assert by_offset[3]["timestampType"] == "LogAppendTime" and by_offset[3]["timestamp"] == 1_700_000_000_001
    assert by_offset[3]["headers"] == [["trace", base64.b64encode(b"1").decode()], ["trace", None]]
    assert by_offset[9]["timestampType"] == "CreateTime" and by_offset[9]["timestamp"] is None  # type -2
    assert by_offset[9]["key"] is None


def test_cat_original_golden_segment(root: Path) -> None:
    objects = [json.loads(line) for line in run("cat", root, "--topic", "legacy").stdout.splitlines()]
    assert [obj["offset"] for obj in objects] == [0, 1, 3, 10]
    assert objects[1]["key"] is None and objects[1]["value"] is None
    assert objects[2]["headers"] == [["", ""], ["null", None], ["value", base64.b64encode(b"test-value").decode()]]
    assert {obj["timestampType"] for obj in objects} == {"NoTimestampType"}


def test_cat_offset_window(root: Path) -> None:
    lines = run("cat", root, "--topic", "legacy", "--from-offset", "2", "--to-offset", "3").stdout.splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [3]


def test_ls_text_and_json(root: Path) -> None:
    text = run("ls", root).stdout
    assert "orders\n  partition 0: 4 records, offsets 0..18" in text
    assert "legacy\n  partition 0: 4 records, offsets 0..10, 7 offsets missing: 2, 4..9, 194 bytes in 1 segment" in text
    listing = json.loads(run("ls", root, "--json").stdout)
    orders = next(t for t in listing if t["topic"] == "orders")
    assert [p["records"] for p in orders["partitions"]] == [4, 4]
    assert sum(len(p["segments"]) for p in orders["partitions"]) > 2  # small segments rolled


def test_offsets_show(root: Path) -> None:
    assert run("offsets", root).stdout.splitlines() == ["orders\t0\taudit\t0", "orders\t0\tbilling\t9"]
    assert json.loads(run("offsets", root, "--json").stdout) == {"orders": {"0": {"audit": 0, "billing": 9}}}


def test_index_show_both_kinds(root: Path) -> None:
    segment_index = root / "legacy" / "segment_partition_000_from_offset_0000000000_index"
    assert run("index", "show", segment_index).stdout.splitlines() == [
        "offset\tposition\tlength",
        "0\t1\t42",
        "1\t43\t24",
        "3\t67\t85",
        "10\t152\t42",
    ]
    shown = run("index", "show", INDEX_VECTORS / "partition_index_four_segments", "--kind", "partition").stdout
    assert shown.splitlines() == ["start_offset\tsegment", "0\ts0", "100\ts100", "200\ts200", "300\ts300"]


def test_index_rebuild_restores_deleted_indexes(root: Path) -> None:
    before = run("cat", root, "--topic", "orders").stdout
    for path in (root / "orders").glob("*index*"):
        path.unlink()
    output = run("index", "rebuild", root / "orders").stdout
    assert "rebuilt index_partition_000" in output and "rebuilt index_partition_001" in output
    assert run("cat", root, "--topic", "orders").stdout == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cat", "{root}/nope"], "backup root is not a directory"),
        (["cat", "{root}", "--topic", "missing"], "topic 'missing' is not in backup"),
        (
            ["cat", "{root}", "--topic", "orders", "--partition", "5"],
            "partition 5 of topic 'orders' is not in the backup",
        ),
        (["cat", "{root}/orders"], "is a topic directory"),
        (["index", "show", "{root}/orders/nothing_index"], "file does not exist"),
    ],
)
def test_user_errors_are_one_line(root: Path, args: list[str], message: str) -> None:
    result = run(*(arg.format(root=root) for arg in args), check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("spark-kafka-backup: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_file_is_one_line_naming_file_and_position(root: Path) -> None:
    records = root / "legacy" / "segment_partition_000_from_offset_0000000000_records"
    data = bytearray(records.read_bytes())
    data[67 + 8 : 67 + 12] = (9).to_bytes(4, "big")  # timestamp type of the record at 67
    records.write_bytes(bytes(data))
    result = run("cat", root, "--topic", "legacy", check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"spark-kafka-backup: error: {records} at byte 75: unknown timestamp type: expected -2, -1, 0 or 1, found 9"
    )


def test_wrong_magic_is_one_line(root: Path) -> None:
    index = root / "orders" / "index_partition_000"
    index.write_bytes(b"\x07" + index.read_bytes()[1:])
    result = run("ls", root, check=False)
    assert result.returncode == 1
    assert (
        result.stderr == f"spark-kafka-backup: error: {index} at byte 0: not a spark-kafka-backup v1 file: "
        "expected magic byte 0x01, found 0x07\n"
    )


def test_unknown_option_is_a_usage_error() -> None:
    result = run("cat", "x", "--frm-offset", "3", check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --frm-offset" in result.stderr
    assert "Traceback" not in result.stderr


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "spark-kafka-backup"
    if not script.exists():
        found = shutil.which("spark-kafka-backup")
        assert found is not None, "the spark-kafka-backup console script is not installed; run ./dev test"
        script = Path(found)
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("spark-kafka-backup ")


def test_verify_of_a_directory_that_is_not_a_backup_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not kafka")
    for directory in (empty, tmp_path):
        result = run("verify", directory, check=False)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr == (
            f"spark-kafka-backup: error: {directory}: not a spark-kafka-backup backup: no topic directory with a "
            "partition index in it, "
            "and no kbackup~state/ (give the backup root, the directory that holds one directory per topic)\n"
        )
    (empty / "kbackup~state").mkdir()  # a continuous backup that has no topic yet: a backup, with nothing in it
    started = run("verify", empty)
    assert started.stdout == f"{empty}: no partitions backed up yet: nothing to verify\n"


def test_an_offset_range_that_ends_before_it_starts_is_a_usage_error(root: Path) -> None:
    result = run("cat", root, "--from-offset", "500", "--to-offset", "100", check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "spark-kafka-backup cat: error: --from-offset 500 is after --to-offset 100 (both inclusive): nothing to print"
    )
    same = run("cat", root, "--topic", "orders", "--from-offset", "6", "--to-offset", "6")
    assert [(r["partition"], r["offset"]) for r in map(json.loads, same.stdout.splitlines())] == [(0, 6)]


def test_offsets_say_when_nothing_is_stored(root: Path) -> None:
    nothing = run("offsets", root, "--topic", "legacy")
    assert nothing.stdout == ""
    assert nothing.stderr == f"spark-kafka-backup: no consumer group offsets are stored for topic 'legacy' in {root}\n"
    as_json = run("offsets", root, "--topic", "orders", "--partition", "1", "--json")
    assert json.loads(as_json.stdout) == {}
    assert "for topic 'orders' partition 1" in as_json.stderr
    stored = run("offsets", root, "--topic", "orders")
    assert stored.stderr == "" and stored.stdout == "orders\t0\taudit\t0\norders\t0\tbilling\t9\n"
