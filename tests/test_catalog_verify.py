"""The catalog of a backup and `kbackup verify`: damage is found and named."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from kbackup.catalog.build import rebuild_catalog
from kbackup.catalog.store import catalog_path, read_catalog
from kbackup.catalog.verify import verify_backup
from kbackup.format.record import Record
from kbackup.partition.writer import PartitionWriter
from kbackup.storage import as_local
from tests.backup_builders import write_original_style
from tests.conftest import REPO
from tests.recordgen import sample_record


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Topic 't', partitions 0 and 1, small segments (several finished ones each), with a catalog."""
    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "t", "t", partition, max_segment_size=1000, fsync=False) as writer:
            for i in range(40):
                writer.append(sample_record(i))
    rebuild_catalog(root, ["t"])
    return root


def _segment(root: Path, partition: int, number: int) -> str:
    catalog = read_catalog(root, "t", partition)
    assert catalog is not None
    return catalog.segments[number].name


def kbackup(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbackup", *map(str, args)], capture_output=True, text=True, cwd=REPO)


def test_catalog_describes_every_finished_segment(root: Path) -> None:
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    assert catalog_path(root, "t", 0) == root / ".kbackup" / "catalog" / "t" / "partition_000.json"
    segments = sorted((root / "t").glob("segment_partition_000_*_records"))
    assert len(catalog.segments) == len(segments) - 1 >= 3  # all but the growing last one
    assert sum(entry.records for entry in catalog.segments) < 40
    for entry in catalog.segments:
        data = (root / "t" / f"{entry.name}_records").read_bytes()
        assert entry.records_bytes == len(data)
        assert entry.records_crc32c == crc32c.crc32c(data)
        assert entry.index_crc32c == crc32c.crc32c((root / "t" / f"{entry.name}_index").read_bytes())
    first = catalog.segments[0]
    assert (first.first_offset, first.start_offset) == (0, 0)
    stamped = [t for i in range(first.records) if (t := sample_record(i).timestamp) is not None]
    assert (first.min_timestamp, first.max_timestamp) == (min(stamped), max(stamped))
    spans = [(e.first_offset or 0, e.last_offset or 0) for e in catalog.segments]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_an_intact_backup_verifies(root: Path) -> None:
    reports = verify_backup(root, ["t"], deep=True)
    assert [(r.partition, r.ok, r.records) for r in reports] == [(0, True, 40), (1, True, 40)]
    result = kbackup("verify", root, "--deep")
    assert result.returncode == 0
    assert "t/0: ok" in result.stdout


def test_flipped_bit_is_named(root: Path) -> None:
    name = _segment(root, 0, 1)
    path = root / "t" / f"{name}_records"
    data = bytearray(path.read_bytes())
    data[40] ^= 0x04
    path.write_bytes(bytes(data))
    result = kbackup("verify", root)
    assert result.returncode == 1
    assert "t/0: DAMAGED" in result.stdout
    assert f"error: {name}_records: checksum mismatch: CRC32C" in result.stdout
    assert "t/1: ok" in result.stdout
    # Progress lines first (not a terminal), then the one error line.
    assert result.stderr.splitlines() == [
        "verify: 1/2 partitions (t/0)",
        "verify: 2/2 partitions (t/1)",
        "kbackup: error: 1 of 2 partition(s) failed verification",
    ]


def test_truncated_file_is_named(root: Path) -> None:
    name = _segment(root, 1, 0)
    path = root / "t" / f"{name}_records"
    path.write_bytes(path.read_bytes()[:-10])
    result = kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: {name}_records: truncated:" in result.stdout
    assert f"error: {name}_records: {path.stat().st_size} bytes, the catalog says" in result.stdout


def test_missing_segment_is_named(root: Path) -> None:
    name = _segment(root, 0, 2)
    (root / "t" / f"{name}_records").unlink()
    (root / "t" / f"{name}_index").unlink()
    result = kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: missing segment file(s): {name}_records, {name}_index" in result.stdout


def test_extra_segment_is_named(root: Path) -> None:
    extra = "segment_partition_001_from_offset_0000099999"
    shutil.copyfile(root / "t" / f"{_segment(root, 1, 0)}_records", root / "t" / f"{extra}_records")
    result = kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: extra segment {extra}: not in the partition index" in result.stdout


def test_deep_verify_finds_what_checksums_cannot_without_a_catalog(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False) as writer:
        for i in range(5):
            writer.append(sample_record(i))
    path = next((root / "t").glob("*_records"))
    data = bytearray(path.read_bytes())
    data[9:12] = b"\x00\x00\x07"  # record 0's timestamp type becomes 7
    path.write_bytes(bytes(data))
    assert kbackup("verify", root).returncode == 0  # no catalog: only structure is checked
    result = kbackup("verify", root, "--deep")
    assert result.returncode == 1
    assert "unknown timestamp type" in result.stdout


def test_original_tool_backup_verifies_after_a_catalog_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    first = [
        Record(1000 + i, -2 if i % 2 else 0, None if i % 2 else 1_700_000_000_000 + i, b"k", b"v") for i in range(4)
    ]
    second = [Record(2000 + i, 0, 1_700_000_000_100 + i, None, b"w") for i in range(3)]
    write_original_style(root / "legacy", 0, [first, second])
    result = kbackup("verify", root)
    assert result.returncode == 0
    assert "note: no catalog" in result.stdout and "kbackup catalog rebuild" in result.stdout
    rebuilt = kbackup("catalog", "rebuild", root)
    assert rebuilt.stdout == "legacy/0: 1 finished segment(s), 4 records\n"
    result = kbackup("verify", root, "--deep")
    assert result.returncode == 0
    assert "note" not in result.stdout
    catalog = read_catalog(root, "legacy", 0)
    assert catalog is not None
    entry = catalog.segments[0]
    assert (entry.start_offset, entry.first_offset, entry.last_offset) == (0, 1000, 1003)
    assert (entry.min_timestamp, entry.max_timestamp) == (1_700_000_000_000, 1_700_000_000_002)


def test_segment_finished_after_the_catalog_is_a_note_not_damage(root: Path) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False) as writer:
        for i in range(40, 60):
            writer.append(sample_record(i))
    result = kbackup("verify", root)
    assert result.returncode == 0
    assert "finished segment(s) not in the catalog yet" in result.stdout


def test_the_writer_catalogs_each_segment_it_finishes_and_catches_up(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False, catalog_root=root) as writer:
        for i in range(30):
            writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    segments = sorted((root / "t").glob("*_records"), key=lambda p: int(p.name.split("_")[5]))
    assert [e.name for e in catalog.segments] == [p.name[: -len("_records")] for p in segments[:-1]]
    assert catalog.segments == read_catalog_rebuilt(tmp_path, root)
    # A crash between starting a segment and updating the catalog loses the update; the next roll catches up.
    as_local(catalog_path(root, "t", 0)).unlink()
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False, catalog_root=root) as writer:
        for i in range(30, 45):
            writer.append(sample_record(i))
    caught_up = read_catalog(root, "t", 0)
    assert caught_up is not None
    assert len(caught_up.segments) == len(list((root / "t").glob("*_records"))) - 1
    assert kbackup("verify", root, "--deep").returncode == 0


def read_catalog_rebuilt(tmp_path: Path, root: Path) -> tuple[object, ...]:
    """The catalog an independent rebuild writes for the same files."""
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / ".kbackup")
    rebuild_catalog(copy, ["t"])
    rebuilt = read_catalog(copy, "t", 0)
    assert rebuilt is not None
    return rebuilt.segments
