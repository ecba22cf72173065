"""Offsets the source skipped while the backup read them (transaction markers, aborted records) are transaction
offsets, not missing ones (issue 30): ``ls``, ``describe``, the report and their JSON keep "missing" for what is
not there and nothing explains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.catalog.topics import record_topic
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.partition_index import encode_partition_index
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.report.html import render_report
from spark_kafka_backup.report.summary import summarize_backup, summarize_partition
from tests.conftest import REPO
from tests.kafka_helpers import run_kbackup


def _write(root: Path, topic: str, offsets: list[int], *, segment_size: int = 1 << 20) -> None:
    with PartitionWriter(root / topic, topic, 0, fsync=False, ledger=CatalogLedger(root),
                         max_segment_size=segment_size) as writer:  # fmt: skip
        for offset in offsets:
            writer.append(Record(offset, 0, 1000 + offset, b"k", b"v"))


# 0..39 records, 40 a commit marker, 41..50 an aborted transaction and its marker at 51, then 52..59.
PAYMENTS = [*range(0, 40), *range(52, 60)]


def test_offsets_a_backup_read_through_are_transaction_offsets_everywhere(tmp_path: Path) -> None:
    _write(tmp_path, "payments", PAYMENTS)
    assert read_catalog(tmp_path, "payments", 0).read_from == 0  # type: ignore[union-attr]

    summary = summarize_partition(tmp_path, "payments", 0)
    assert (summary.missing, summary.skipped) == (0, 12)
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(40, 51)]
    assert summary.gaps == [] and [(r.first, r.last) for r in summary.covered] == [(0, 59)]

    listed = run_kbackup("ls", tmp_path, check=True).stdout
    assert "partition 0: 48 records, offsets 0..59, 12 transaction offsets: 40..51, " in listed
    assert "missing" not in listed
    described = run_kbackup("describe", tmp_path, check=True).stdout
    assert "offsets 0..59, 12 transaction offsets: 40..51," in described and "missing" not in described

    for command in ("ls", "describe"):
        document = json.loads(run_kbackup(command, tmp_path, "--json", check=True).stdout)
        topics = document if command == "ls" else document["topics"]
        partition = topics[0]["partitions"][0]
        assert partition["missingOffsets"] == 0 and partition["missingRanges"] == []
        assert partition["transactionOffsets"] == 12
        assert partition["transactionRanges"] == [{"first": 40, "last": 51}]

    page = render_report(summarize_backup(tmp_path), generated_at=0)
    assert '<span class="skipped">12 transaction offsets: 40..51</span>' in page
    assert '<span class="ok">none</span>' in page and 'class="bad"' not in page
    assert 'class="gap"' not in page  # not drawn as a gap in the offsets timeline


def test_on_a_compacted_topic_the_word_says_compaction_too(tmp_path: Path) -> None:
    _write(tmp_path, "ledger", PAYMENTS)
    record_topic(tmp_path, "ledger", 1, {"cleanup.policy": "compact"})
    assert "12 compacted or transaction offsets: 40..51" in run_kbackup("ls", tmp_path, check=True).stdout
    assert json.loads(run_kbackup("describe", tmp_path, "--json", check=True).stdout)["topics"][0]["compacted"]


def test_a_catalog_that_does_not_know_where_reading_began_calls_them_missing(tmp_path: Path) -> None:
    """A backup written before spark-kafka-backup recorded ``readFrom`` (or a catalog rebuilt from the files): nothing
    vouches that the offsets were read, so they stay missing."""
    _write(tmp_path, "old", PAYMENTS)
    written = read_catalog(tmp_path, "old", 0)
    assert written is not None
    write_catalog(tmp_path, replace(written, read_from=None))
    summary = summarize_partition(tmp_path, "old", 0)
    assert (summary.missing, summary.skipped) == (12, 0)
    assert "12 offsets missing: 40..51" in run_kbackup("ls", tmp_path, check=True).stdout

    # The next writer vouches from its first record on: the gap before it stays missing, the ones after are not.
    _write(tmp_path, "old", [70, 71, 75])
    assert read_catalog(tmp_path, "old", 0).read_from == 70  # type: ignore[union-attr]
    summary = summarize_partition(tmp_path, "old", 0)
    assert [(r.first, r.last) for r in summary.missing_ranges] == [(40, 51), (60, 69)]
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(72, 74)]

    run_kbackup("catalog", "rebuild", tmp_path, check=True)
    assert read_catalog(tmp_path, "old", 0).read_from is None  # type: ignore[union-attr]
    assert summarize_partition(tmp_path, "old", 0).skipped == 0


def test_the_offsets_of_a_lost_segment_are_missing_not_transaction_offsets(tmp_path: Path) -> None:
    """A finished segment that is gone from the partition (its files and its index entry) although the catalog
    names it: what it held is missing, whatever ``readFrom`` says."""
    _write(tmp_path, "t", [*range(0, 5), *range(6, 90)], segment_size=600)
    reader = PartitionReader(tmp_path / "t", 0)
    assert len(reader.segments) >= 4 and reader.segments[1].start_offset > 6
    lost = reader.segments[2]
    catalog = read_catalog(tmp_path, "t", 0)
    assert isinstance(catalog, PartitionCatalog)
    entry = next(e for e in catalog.segments if e.name == lost.name)
    for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
        (tmp_path / "t" / (lost.name + suffix)).unlink()
    kept = [segment for segment in reader.segments if segment.name != lost.name]
    (tmp_path / "t" / "index_partition_000").write_bytes(encode_partition_index(kept))

    summary = summarize_partition(tmp_path, "t", 0)
    assert entry.first_offset is not None and entry.last_offset is not None
    assert [(r.first, r.last) for r in summary.missing_ranges] == [(entry.first_offset, entry.last_offset)]
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(5, 5)]  # the one before it is still known
    assert summary.gaps != []


def test_a_copy_of_the_original_tools_backup_has_no_transaction_offsets(tmp_path: Path) -> None:
    from tests.conftest import SHAPES_TOPIC

    shutil.copytree(SHAPES_TOPIC, tmp_path / "legacy")
    summary = summarize_partition(tmp_path, "legacy", 0)
    assert (summary.missing, summary.skipped) == (7, 0)


# -- what vouches, and what does not (found by a hostile probe) -------------------------------------------------


def _records(offsets: list[int] | range) -> list[Record]:
    return [Record(offset, 0, 1000 + offset, b"k", b"v" * 20) for offset in offsets]


def _lose(root: Path, topic: str, name: str) -> None:
    """A segment gone from disk, and the partition index rebuilt without it (as ``spark-kafka-backup index rebuild``
    does)."""
    for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
        (root / topic / (name + suffix)).unlink()
    run_kbackup("index", "rebuild", root / topic, check=True)


def test_a_lost_newest_segment_is_named_by_verify_and_refused_by_the_next_writer(tmp_path: Path) -> None:
    _write(tmp_path, "t", list(range(50)), segment_size=600)
    newest = PartitionReader(tmp_path / "t", 0).segments[-1]
    _lose(tmp_path, "t", newest.name)
    with pytest.raises(FormatError, match=f"committed in segment {newest.name} .* committed records are lost"):
        _write(tmp_path, "t", [50, 51])
    verified = run_kbackup("verify", tmp_path)
    assert verified.returncode == 1 and f"missing segment {newest.name}: the catalog records" in verified.stdout


def test_a_lost_segment_stays_missing_after_the_object_writer_publishes_again(tmp_path: Path) -> None:
    from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter

    def publish(offsets: range) -> None:
        # The object store's writer, on a local directory: what it publishes is the same code on a bucket.
        with ObjectPartitionWriter(tmp_path / "t", "t", 0, max_segment_size=600,  # type: ignore[arg-type]
                                   ledger=CatalogLedger(tmp_path)) as writer:  # fmt: skip
            for record in _records(offsets):
                writer.append(record)

    publish(range(0, 90))
    lost = PartitionReader(tmp_path / "t", 0).segments[2]
    _lose(tmp_path, "t", lost.name)
    publish(range(90, 95))
    summary = summarize_partition(tmp_path, "t", 0)
    assert (summary.missing, summary.skipped) == (12, 0)
    assert f"missing segment {lost.name}: named in the catalog" in run_kbackup("verify", tmp_path).stdout


def test_a_segment_holding_less_than_its_catalog_entry_vouches_for_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "t", list(range(90)), segment_size=600)
    damaged = PartitionReader(tmp_path / "t", 0).segments[1]
    records = tmp_path / "t" / (damaged.name + RECORDS_SUFFIX)
    records.write_bytes(records.read_bytes()[:200])  # its last records gone
    rebuilt = run_kbackup("index", "rebuild", tmp_path / "t")
    assert "bytes from 171 on are not indexed" in rebuilt.stdout + rebuilt.stderr  # the torn record is named
    summary = summarize_partition(tmp_path, "t", 0)
    assert summary.skipped == 0 and summary.missing > 0


def test_segments_copied_in_from_another_backup_vouch_for_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "t", list(range(50)), segment_size=600)
    other = tmp_path / "other"
    _write(other, "t", list(range(100, 150)), segment_size=600)
    copied = PartitionReader(other / "t", 0).segments
    for segment in copied:
        for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
            shutil.copyfile(other / "t" / (segment.name + suffix), tmp_path / "t" / (segment.name + suffix))
    own = PartitionReader(tmp_path / "t", 0).segments
    (tmp_path / "t" / "index_partition_000").write_bytes(encode_partition_index([*own, *copied]))
    summary = summarize_partition(tmp_path, "t", 0)
    assert [(r.first, r.last) for r in summary.missing_ranges] == [(50, 99)] and summary.skipped == 0


def test_a_first_run_killed_before_it_closed_has_recorded_where_it_began(tmp_path: Path) -> None:
    child = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from spark_kafka_backup.catalog.ledger import CatalogLedger\n"
        "from spark_kafka_backup.format.record import Record\n"
        "from spark_kafka_backup.partition.writer import PartitionWriter\n"
        f"root = Path({str(tmp_path)!r})\n"
        "w = PartitionWriter(root / 't', 't', 0, fsync=False, ledger=CatalogLedger(root), max_segment_size=600)\n"
        "for o in [*range(0, 40), *range(52, 60)]:\n"
        "    w.append(Record(o, 0, 1000 + o, b'k', b'v' * 20))\n"
        "w.flush()\n"
        "os._exit(9)\n"
    )
    subprocess.run([sys.executable, "-c", child], check=False, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    catalog = read_catalog(tmp_path, "t", 0)
    assert catalog is not None and catalog.segments and catalog.read_from == 0


def test_a_merge_never_spans_a_lost_segment(tmp_path: Path) -> None:
    _write(tmp_path, "t", [*range(0, 5), *range(6, 90)], segment_size=600)
    lost = PartitionReader(tmp_path / "t", 0).summaries()[2]
    _lose(tmp_path, "t", lost.name)
    merged = run_kbackup("merge", tmp_path, "--max-segment-size", "100000")
    assert merged.returncode == 0 and "merged 2 segments into 1 segment" in merged.stdout, merged.stdout
    summary = summarize_partition(tmp_path, "t", 0)
    assert [(r.first, r.last) for r in summary.missing_ranges] == [(lost.first_offset, lost.last_offset)]
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(5, 5)]
