"""Compressed segments on real files: written by the partition writer, read by every reader (no broker, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.errors import FormatError, OffsetConflictError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_segment_index
from spark_kafka_backup.partition.records_file import FramedHandle, compress_records_file, open_records
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.kafka_helpers import run_kbackup
from tests.recordgen import sample_record

RECORDS = 300


def _write(root: Path, offsets: range, compression: str | None) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=4000, fsync=False, ledger=CatalogLedger(root),
                         compression=compression) as writer:  # fmt: skip
        for i in offsets:
            writer.append(sample_record(i))


def _records_files(root: Path) -> list[Path]:
    return sorted((root / "t").glob("segment_partition_000_*_records"))


@pytest.fixture(params=["zstd", "lz4", "gzip"])
def mixed(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Partition t/0: plain segments written without compression, then compressed ones after a reopen."""
    root = tmp_path / "backup"
    _write(root, range(0, RECORDS // 2), None)
    _write(root, range(RECORDS // 2, RECORDS), request.param)
    return root


def test_finished_segments_are_compressed_and_every_reader_gets_the_same_records(mixed: Path) -> None:
    files = _records_files(mixed)
    framed = [is_framed(path.read_bytes()[:4]) for path in files]
    assert framed[-1] is False  # the newest segment is still appended to
    assert True in framed and False in framed[:-1]  # mixed: plain ones from the first writer, compressed after
    reader = PartitionReader(mixed / "t", 0)
    assert list(reader.records()) == [sample_record(i) for i in range(RECORDS)]  # offsets 0, 3, 6, ...
    assert [r.offset for r in reader.records(from_offset=750)] == list(range(750, 3 * RECORDS, 3))
    batches = [r for batch in reader.record_batches(360, 780) for r in batch.records()]
    assert [r.offset for r in batches] == list(range(360, 781, 3))
    # The catalog names codec, plain size and frames of compressed segments, and its checksums are the stored
    # bytes': verify (deep: every record decoded) passes.
    catalog = read_catalog(mixed, "t", 0)
    assert catalog is not None
    for entry in catalog.segments:
        path = mixed / "t" / f"{entry.name}_records"
        assert entry.records_bytes == path.stat().st_size
        handle = open_records(path)
        with_codec = isinstance(handle, FramedHandle)
        assert (entry.compression is not None) == with_codec
        if with_codec:
            assert entry.plain_bytes == handle.size > entry.records_bytes
        handle.close()
    assert all(report.ok for report in verify_backup(mixed, ["t"], deep=True))


def test_replays_are_checked_against_compressed_segments(mixed: Path) -> None:
    with PartitionWriter(mixed / "t", "t", 0, max_segment_size=4000, fsync=False, compression="zstd") as writer:
        for i in range(140, 200):
            assert writer.append(sample_record(i)) is False  # stored: a no-op
        changed = sample_record(170)
        with pytest.raises(OffsetConflictError, match="offset 510"):
            writer.append(Record(510, changed.timestamp_type, changed.timestamp, b"other", changed.value))


def test_the_cli_reads_compressed_backups(mixed: Path) -> None:
    cat = run_kbackup("cat", mixed, check=True)
    assert [json.loads(line)["offset"] for line in cat.stdout.splitlines()] == list(range(0, 3 * RECORDS, 3))
    listing = run_kbackup("ls", mixed, check=True).stdout
    assert "partition 0: 300 records" in listing
    compressed = [line for line in listing.splitlines() if line.endswith(" bytes (zstd)") or line.endswith("(lz4)")
                  or line.endswith("(gzip)")]  # fmt: skip
    assert len(compressed) >= 2
    assert run_kbackup("verify", mixed, "--deep").returncode == 0
    assert run_kbackup("describe", mixed).returncode == 0


def test_index_rebuild_reads_a_compressed_records_file(mixed: Path) -> None:
    path = next(p for p in _records_files(mixed) if is_framed(p.read_bytes()[:4]))
    index = path.with_name(path.name.replace("_records", "_index"))
    before = index.read_bytes()
    index.unlink()
    rebuilt = rebuild_segment_index(path, index)
    assert index.read_bytes() == before and rebuilt.bad_tail_position is None


def test_a_damaged_frame_is_named_and_verify_reports_the_segment(mixed: Path) -> None:
    path = next(p for p in _records_files(mixed) if is_framed(p.read_bytes()[:4]))
    data = bytearray(path.read_bytes())
    data[40] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=rf"{path}.*frame 0"):
        list(PartitionReader(mixed / "t", 0).records())
    result = run_kbackup("verify", mixed)
    assert result.returncode == 1
    assert f"{path.name}: checksum mismatch" in result.stdout


def test_time_ranges_of_compressed_segments_match_the_plain_ones_across_frame_boundaries(tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.build import segment_time_range

    root = tmp_path / "backup"
    _write(root, range(0, 120), None)
    records = _records_files(root)[0]
    index = records.with_name(records.name.replace("_records", "_index"))
    plain = segment_time_range(records, index)
    stamps = [r.timestamp for r in PartitionReader(root / "t", 0).records() if r.timestamp_type in (0, 1)]
    assert plain[0] is not None and plain[0] >= min(s for s in stamps if s is not None)
    compress_records_file(records, "lz4", frame_size=97)  # records' timestamp fields cross many frame boundaries
    assert segment_time_range(records, index) == plain


def test_a_crash_between_compressing_a_segment_and_cataloging_it_damages_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's prefix of the then-newest segment is checked against its plain bytes, compressed or not."""
    from spark_kafka_backup.catalog.integrity import bad_segments

    root = tmp_path / "backup"
    _write(root, range(0, 40), None)
    monkeypatch.setattr(CatalogLedger, "segments_finished", lambda *args, **kwargs: (_ for _ in ()).throw(SystemExit))
    with pytest.raises(SystemExit):
        _write(root, range(40, 300), "zstd")  # "killed" after compressing, before the catalog names the segment
    assert any(is_framed(path.read_bytes()[:4]) for path in _records_files(root))
    assert bad_segments(root, "t", 0) == []
    monkeypatch.undo()
    assert run_kbackup("cat", root).returncode == 0
    _write(root, range(40, 300), "zstd")  # the rerun replays and catches the catalog up
    assert all(report.ok for report in verify_backup(root, ["t"], deep=True))


# -- encrypted segments -----------------------------------------------------------------

KEK = bytes(range(32))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_encrypted_segments_need_their_key_to_be_read_but_not_to_be_verified(
    tmp_path: Path,
    compression: str | None,
) -> None:
    from spark_kafka_backup.errors import DecryptionKeyError
    from spark_kafka_backup.format.encryption import KeyRing, key_id

    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=4000, fsync=False, ledger=CatalogLedger(root),
                         compression=compression, encryption_key=KEK) as writer:  # fmt: skip
        for i in range(RECORDS):
            writer.append(sample_record(i))
    sealed = [p for p in _records_files(root) if is_framed(p.read_bytes()[:4])]
    assert len(sealed) == len(_records_files(root)) - 1
    assert b"value-7-" not in sealed[0].read_bytes()  # nothing readable at rest
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and {e.key_id for e in catalog.segments} == {key_id(KEK).hex()}
    assert all(report.ok for report in verify_backup(root, ["t"]))  # sizes and checksums of the ciphertext
    with pytest.raises(DecryptionKeyError, match=f"is encrypted with key id {key_id(KEK).hex()}; no key was given"):
        list(PartitionReader(root / "t", 0).records())
    assert list(PartitionReader(root / "t", 0, keys=KeyRing.of([KEK])).records()) == [
        sample_record(i) for i in range(RECORDS)
    ]
    assert all(report.ok for report in verify_backup(root, ["t"], deep=True, keys=KeyRing.of([KEK])))


def test_the_cli_takes_the_key_from_a_file_or_a_variable_and_names_a_missing_or_wrong_one(
    tmp_path: Path,
) -> None:
    from spark_kafka_backup.format.encryption import key_id

    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=4000, fsync=False, ledger=CatalogLedger(root),
                         compression="lz4", encryption_key=KEK) as writer:  # fmt: skip
        for i in range(RECORDS):
            writer.append(sample_record(i))
    key_file = tmp_path / "kek.hex"
    key_file.write_text(KEK.hex() + "\n")
    other = tmp_path / "other.hex"
    other.write_text(bytes(32).hex())
    missing = run_kbackup("cat", root)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert f"is encrypted with key id {key_id(KEK).hex()}; no key was given" in missing.stderr
    wrong = run_kbackup("cat", root, "--encryption-key-file", other)
    assert wrong.returncode == 1 and f"the key(s) given have id(s) {key_id(bytes(32)).hex()}" in wrong.stderr
    cat = run_kbackup("cat", root, "--encryption-key-file", key_file, check=True)
    assert len(cat.stdout.splitlines()) == RECORDS
    assert run_kbackup("verify", root).returncode == 0  # no key needed for checksums
    deep = run_kbackup("verify", root, "--deep")
    assert deep.returncode == 1 and "no key was given" in deep.stdout
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.kafka_helpers import job_env

    env = {**job_env(), "MY_KEK": KEK.hex()}
    by_env = subprocess.run([sys.executable, "-m", "spark_kafka_backup", "verify", str(root), "--deep",
                             "--encryption-key-env", "MY_KEK"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=120)  # fmt: skip
    assert by_env.returncode == 0, by_env.stdout + by_env.stderr
    bad = run_kbackup("cat", root, "--encryption-key-file", tmp_path / "nothing")
    assert bad.returncode == 1 and "cannot read the key file" in bad.stderr
    assert os.environ.get("MY_KEK") is None


def test_a_segment_left_unsealed_by_a_kill_is_sealed_when_the_partition_is_reopened(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "backup"

    def write(offsets: range) -> None:
        with PartitionWriter(root / "t", "t", 0, max_segment_size=4000, fsync=False, ledger=CatalogLedger(root),
                             encryption_key=KEK) as writer:  # fmt: skip
            for i in offsets:
                writer.append(sample_record(i))

    write(range(0, 100))
    monkeypatch.setattr(PartitionWriter, "_seal_previous", lambda self: (_ for _ in ()).throw(SystemExit))
    with pytest.raises(SystemExit):
        write(range(100, 300))  # "killed" right after starting a segment, before sealing the one before
    monkeypatch.undo()
    plain = [p.name for p in _records_files(root)[:-1] if not is_framed(p.read_bytes()[:4])]
    assert len(plain) == 1
    write(range(100, 300))  # the rerun replays, and seals what the kill left plain
    assert all(is_framed(p.read_bytes()[:4]) for p in _records_files(root)[:-1])
    ring = KeyRing.of([KEK])
    assert all(report.ok for report in verify_backup(root, ["t"], deep=True, keys=ring))
    assert list(PartitionReader(root / "t", 0, keys=ring).records()) == [sample_record(i) for i in range(RECORDS)]


def test_a_backup_sealed_under_two_keys_reads_with_both(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    second = bytes(range(40, 72))
    for key, offsets in ((KEK, range(0, 150)), (second, range(150, 300))):
        with PartitionWriter(root / "t", "t", 0, max_segment_size=4000, fsync=False, ledger=CatalogLedger(root),
                             encryption_key=key) as writer:  # fmt: skip
            for i in offsets:
                writer.append(sample_record(i))
    files = []
    for number, key in enumerate((KEK, second)):
        files.append(tmp_path / f"k{number}")
        files[-1].write_text(key.hex())
    one = run_kbackup("cat", root, "--encryption-key-file", files[0])
    assert one.returncode == 1 and "the key(s) given have id(s)" in one.stderr
    both = run_kbackup("cat", root, "--encryption-key-file", files[0], "--encryption-key-file", files[1], check=True)
    assert len(both.stdout.splitlines()) == RECORDS


def test_the_newest_segment_is_sealed_at_a_clean_stop_and_the_next_run_starts_a_new_one(
    tmp_path: Path,
) -> None:
    """What a snapshot (or a stopped continuous backup) does on local disk, and what the next run finds."""
    from spark_kafka_backup.catalog.store import catalog_path
    from spark_kafka_backup.format.encryption import KeyRing
    from spark_kafka_backup.storage import as_local

    root = tmp_path / "backup"
    options: dict[str, object] = {"compression": "zstd", "encryption_key": KEK, "max_segment_size": 4000}
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), **options) as writer:  # type: ignore[arg-type]
        for i in range(60):
            writer.append(sample_record(i))
        assert writer.seal_newest() and not writer.seal_newest()  # sealed once
    assert all(is_framed(path.read_bytes()[:4]) for path in _records_files(root))  # nothing plain at rest
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.tail is None
    assert [e.name for e in catalog.segments] == [s.name for s in PartitionReader(root / "t", 0).segments]
    assert all(report.ok for report in verify_backup(root, ["t"]))  # the ciphertext's checksums, without the key
    ring = KeyRing.of([KEK])
    assert all(report.ok and not report.notes for report in verify_backup(root, ["t"], deep=True, keys=ring))

    # A kill between sealing and cataloging: the catalog still describes the newest segment as an open prefix.
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), **options) as writer:  # type: ignore[arg-type]
        for i in range(55, 80):  # five replayed against the sealed segment, then new records
            writer.append(sample_record(i))
    stored = as_local(catalog_path(root, "t", 0))
    before_seal = stored.read_bytes()
    with PartitionWriter(root / "t", "t", 0, fsync=False, **options) as writer:  # type: ignore[arg-type]
        assert writer.seal_newest()
    stored.write_bytes(before_seal)
    assert all(report.ok for report in verify_backup(root, ["t"], deep=True, keys=ring))
    # The next run catalogs the sealed segment, starts a new one for its records, and reads back exactly.
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), **options) as writer:  # type: ignore[arg-type]
        assert writer.last_offset == sample_record(79).offset
        for i in range(80, 90):
            writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 0)
    names = [s.name for s in PartitionReader(root / "t", 0).segments]
    assert catalog is not None and [e.name for e in catalog.segments] == names[:-1]
    assert list(PartitionReader(root / "t", 0, keys=ring).records()) == [sample_record(i) for i in range(90)]
    assert all(report.ok and not report.notes for report in verify_backup(root, ["t"], deep=True, keys=ring))


def test_an_empty_sealed_placeholder_is_appended_to_after_a_copy_down_from_object_storage(tmp_path: Path) -> None:
    """An empty partition backed up to a store has one compressed empty segment; a local writer takes it over."""
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), compression="zstd") as writer:
        writer.ensure_segment(0)
    (placeholder,) = _records_files(root)
    compress_records_file(placeholder, "zstd", sync=False)
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root), compression="zstd") as writer:
        for i in range(3):
            writer.append(sample_record(i))
    assert list(PartitionReader(root / "t", 0).records()) == [sample_record(i) for i in range(3)]
    assert len(_records_files(root)) == 1
    assert all(report.ok and not report.notes for report in verify_backup(root, ["t"], deep=True))
