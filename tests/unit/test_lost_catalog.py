"""A catalog that was kept and is lost: the marker written before a partition's first segment, and who refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.integrity import bad_segments, unverifiable_segments
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import catalog_path, cataloged_marker_path, mark_cataloged, read_catalog
from spark_kafka_backup.catalog.verify import verify_partition
from spark_kafka_backup.errors import DamagedBackupError, FormatError
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.backup_builders import write_original_style
from tests.recordgen import sample_record


def _backup(root: Path, count: int, *, max_segment_size: int = 1 << 20) -> None:
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root),
                         max_segment_size=max_segment_size) as writer:  # fmt: skip
        for i in range(count):
            writer.append(sample_record(i))


def test_the_catalog_and_its_marker_exist_before_the_first_segment(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    writer = PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root))
    try:
        assert writer.segments == []  # a kill now leaves no segment, and a catalog to go on from
        catalog = read_catalog(root, "t", 0)
        assert catalog is not None and catalog.segments == () and catalog.tail is None
        assert Path(str(cataloged_marker_path(root, "t", 0))).is_file()
    finally:
        writer.close()


def test_a_lost_catalog_leaves_every_segment_unchecked(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _backup(root, 40, max_segment_size=1000)
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and len(catalog.segments) >= 3
    assert bad_segments(root, "t", 0) == [] and unverifiable_segments(root, "t", 0) == []
    Path(str(catalog_path(root, "t", 0))).unlink()
    unchecked = bad_segments(root, "t", 0)
    names = [entry.name for entry in catalog.segments] + [catalog.tail.name if catalog.tail else ""]
    assert [bad.name for bad in unchecked] == names
    assert "is missing, though spark-kafka-backup kept one" in unchecked[0].reason
    assert all(bad.reason == "unchecked: its checksums are lost with the catalog" for bad in unchecked[1:])
    # Only the segments a window reaches, as for checksum failures.
    second = catalog.segments[1]
    window = unverifiable_segments(root, "t", 0, from_offset=second.first_offset, to_offset=second.last_offset)
    assert [bad.name for bad in window] == [second.name]
    assert unverifiable_segments(root, "t", 0) == bad_segments(root, "t", 0)
    report = verify_partition(root, "t", 0)
    assert not report.ok and any("is missing, though" in error for error in report.errors)


def test_a_single_segment_partition_is_held_to_its_catalog_too(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _backup(root, 5)
    shutil.rmtree(Path(str(catalog_path(root, "t", 0))).parent)
    report = verify_partition(root, "t", 0)
    assert not report.ok
    with pytest.raises(DamagedBackupError, match=r"topic 't' partition 0: its catalog .* is missing"):
        _backup(root, 6)


def test_the_originals_backups_have_no_marker_and_stay_readable(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    write_original_style(root / "t", 0, [[sample_record(i) for i in range(3)], [sample_record(i) for i in range(3, 6)]])
    assert unverifiable_segments(root, "t", 0) == [] and verify_partition(root, "t", 0).ok
    _backup(root, 9)  # kbackup goes on with it: catalogs what it finds, the marker first
    assert read_catalog(root, "t", 0) is not None
    assert Path(str(cataloged_marker_path(root, "t", 0))).is_file()
    assert verify_partition(root, "t", 0).ok


def test_a_kill_between_a_first_catalog_and_its_marker_is_no_false_alarm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original tool's files, cataloged for the first time (a rebuild, or kbackup going on with them): killed
    after the catalog, before the marker. Nothing reads as a lost catalog, and the next catalog write adds the
    marker."""
    from spark_kafka_backup.catalog import store
    from spark_kafka_backup.catalog.build import rebuild_catalog

    root = tmp_path / "backup"
    write_original_style(root / "t", 0, [[sample_record(i) for i in range(3)], [sample_record(i) for i in range(3, 6)]])
    real = store.write_whole  # type: ignore[attr-defined]

    def killed_at_the_marker(location: object, data: bytes, *, sync: bool = True) -> None:
        if "cataloged" in str(location):
            raise KeyboardInterrupt("killed")
        real(location, data, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "write_whole", killed_at_the_marker)
    with pytest.raises(KeyboardInterrupt):
        rebuild_catalog(root, ["t"])
    monkeypatch.setattr(store, "write_whole", real)
    assert read_catalog(root, "t", 0) is not None
    assert not Path(str(cataloged_marker_path(root, "t", 0))).exists()
    assert verify_partition(root, "t", 0).ok and unverifiable_segments(root, "t", 0) == []
    _backup(root, 9)
    assert Path(str(cataloged_marker_path(root, "t", 0))).is_file()


def test_a_refusal_names_five_segments_and_counts_the_rest() -> None:
    from spark_kafka_backup.catalog.integrity import damage_text

    assert damage_text(["a", "b"]) == "a; b"
    assert damage_text([str(n) for n in range(5)]) == "0; 1; 2; 3; 4"
    assert damage_text([str(n) for n in range(8)]) == "0; 1; 2; 3; 4; and 3 more segments"


def _placeholder(root: Path) -> None:
    """An empty partition as the backup prepares thousands at once: its catalog unsynced and unmarked."""
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root, sync=False)) as writer:
        writer.ensure_segment(0)


def test_placeholders_prepared_together_are_marked_by_their_preparer_after_its_sync(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _placeholder(root)
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.tail is not None and catalog.tail.records == 0
    marker = Path(str(cataloged_marker_path(root, "t", 0)))
    assert not marker.exists()  # a power loss must not find a marker before its catalog's bytes
    mark_cataloged(root, "t", 0)
    assert marker.is_file()


def test_a_power_loss_before_the_preparers_sync_leaves_a_partition_the_backup_goes_on_with(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _placeholder(root)
    Path(str(catalog_path(root, "t", 0))).write_bytes(b"")  # what a power loss leaves of a new file never synced
    assert read_catalog(root, "t", 0) is None
    assert verify_partition(root, "t", 0).ok
    _backup(root, 5)  # the partition's next writer
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.tail is not None and catalog.tail.records == 5
    assert Path(str(cataloged_marker_path(root, "t", 0))).is_file()
    assert verify_partition(root, "t", 0).ok and bad_segments(root, "t", 0) == []


def test_an_empty_catalog_of_a_marked_partition_is_damage(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _backup(root, 3)
    Path(str(catalog_path(root, "t", 0))).write_bytes(b"")
    with pytest.raises(FormatError, match=r"partition_000\.json"):
        read_catalog(root, "t", 0)
    assert not verify_partition(root, "t", 0).ok
