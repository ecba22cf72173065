"""Ranges lost at the source: their records, and how describe, ls and the report tell them from damage. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.source_gaps import (
    INFERRED,
    SourceGap,
    describe_gaps,
    gap_path,
    merge,
    read_gaps,
    record_gap,
)
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.report.html import render_report
from spark_kafka_backup.report.summary import missing_offsets, summarize_backup, summarize_partition


def test_a_range_recorded_again_keeps_the_wider_and_overlapping_ones_merge(tmp_path: Path) -> None:
    record_gap(tmp_path, "t", 0, 100, 199)
    record_gap(tmp_path, "t", 0, 100, 150)  # a rerun that found less: the wider stays
    record_gap(tmp_path, "t", 0, 200, 249, how=INFERRED)  # adjacent: one range, inferred in part
    record_gap(tmp_path, "t", 1, 5, 5)
    assert [(g.partition, g.first, g.last, g.how) for g in read_gaps(tmp_path, "t")] == [
        (0, 100, 249, INFERRED),
        (1, 5, 5, "read"),
    ]
    assert [(g.first, g.last) for g in read_gaps(tmp_path, "t", 1)] == [(5, 5)]
    assert read_gaps(tmp_path, "other") == []
    assert merge([SourceGap("t", 0, 10, 20), SourceGap("t", 0, 30, 40)]) == [
        SourceGap("t", 0, 10, 20),
        SourceGap("t", 0, 30, 40),
    ]
    assert (
        describe_gaps(read_gaps(tmp_path, "t", 0))
        == "150 offsets deleted at the source before they were read: 100..249"
    )


@pytest.mark.parametrize(
    "content",
    [b"{", b"[" * 200_000 + b"]" * 200_000, b'{"version": 2}', b'{"version": 1, "topic": "t", "partition": 0, '
     b'"first": 9, "last": 3}', b'{"version": 1, "topic": "u", "partition": 0, "first": 1, "last": 3}'],
)  # fmt: skip
def test_a_damaged_gap_record_is_one_error_naming_its_file(tmp_path: Path, content: bytes) -> None:
    path = Path(str(gap_path(tmp_path, "t", 0, 1)))
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(SparkKafkaBackupError) as failure:  # a format error, or a file too large to be one
        read_gaps(tmp_path, "t")
    assert str(path) in str(failure.value)
    assert len(str(failure.value).splitlines()) == 1


def test_lost_offsets_are_not_missing_ones_and_are_drawn_apart(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False, ledger=CatalogLedger(tmp_path)) as writer:
        for offset in [*range(0, 10), *range(50, 60), 62, 63]:  # 10..49 deleted at the source, 60..61 markers
            writer.append(Record(offset, 0, 1000 + offset, b"k", b"v"))
    record_gap(tmp_path, "t", 0, 10, 49)
    summary = summarize_partition(tmp_path, "t", 0)
    # The writer read on from its first record: 60..61 the source skipped (transaction offsets), nothing missing.
    assert summary.missing == 0 and summary.skipped == 2
    assert [(r.first, r.last) for r in summary.skipped_ranges] == [(60, 61)]
    assert [(g.first, g.last) for g in summary.lost_at_source] == [(10, 49)]
    assert summary.gaps == []  # neither a lost range nor transaction offsets are drawn as a gap
    reader = PartitionReader(tmp_path / "t", 0)
    catalog = read_catalog(tmp_path, "t", 0)
    assert missing_offsets(reader, lost_at_source=summary.lost_at_source, catalog=catalog)[0][0] == 0
    assert missing_offsets(reader, lost_at_source=summary.lost_at_source)[0][0] == 2  # no catalog: not known
    assert missing_offsets(reader)[0][0] == 42
    page = render_report(summarize_backup(tmp_path), generated_at=0)
    assert 'class="lost"' in page and "40 offsets deleted at the source before they were read: 10..49" in page
    assert "offsets 10..49 deleted at the source before the backup read them" in page


def test_numbers_out_of_range_are_one_error_too(tmp_path: Path) -> None:
    path = Path(str(gap_path(tmp_path, "t", 0, 1)))
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "topic": "t", "partition": 0, "first": 1, "last": 3, "seenAt": 1e400}')
    with pytest.raises(SparkKafkaBackupError, match="not a valid source gap record"):
        read_gaps(tmp_path, "t")


def test_verify_calls_a_gap_record_over_held_records_wrong(tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.verify import verify_partition

    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False, ledger=CatalogLedger(tmp_path)) as writer:
        for offset in [*range(0, 10), *range(20, 30)]:
            writer.append(Record(offset, 0, 1000 + offset, b"k", b"v"))
    record_gap(tmp_path, "t", 0, 10, 19)
    assert verify_partition(tmp_path, "t", 0).ok
    record_gap(tmp_path, "t", 0, 25, 26)  # a tampered record: those offsets are held
    report = verify_partition(tmp_path, "t", 0)
    assert not report.ok and "covers records the backup holds" in report.errors[0]


def test_the_job_reports_what_was_recorded_since_it_started_by_content_not_by_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from spark_kafka_backup.backup.source_loss import SourceLossReport
    from spark_kafka_backup.kafka.topics import TopicSelection

    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        writer.ensure_segment(0)
    record_gap(tmp_path, "t", 0, 100, 199)  # an earlier run's
    report = SourceLossReport(tmp_path, TopicSelection.from_list("t"), every=0)
    report.poll(now=True)
    assert report.gaps == []
    monkeypatch.setattr(time, "time", lambda: 1.0)  # an executor whose clock is far behind the driver's
    record_gap(tmp_path, "t", 0, 200, 209)  # adjacent to the old one: counted alone
    record_gap(tmp_path, "t", 0, 100, 150)  # found again by a rerun (the wider one is kept): reported again
    report.poll(now=True)
    assert [(g.first, g.last) for g in report.gaps] == [(100, 209)]
    assert report.describe() == "110 offsets in 1 range: t/0 offsets 100..209"
