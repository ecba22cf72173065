"""Ranges lost at the source: their records, and how describe, ls and the report tell them from damage. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.catalog.ledger import CatalogLedger
from kbackup.catalog.source_gaps import INFERRED, SourceGap, describe_gaps, gap_path, merge, read_gaps, record_gap
from kbackup.errors import KbackupError
from kbackup.format.record import Record
from kbackup.partition.reader import PartitionReader
from kbackup.partition.writer import PartitionWriter
from kbackup.report.html import render_report
from kbackup.report.summary import missing_offsets, summarize_backup, summarize_partition


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
    with pytest.raises(KbackupError) as failure:  # a format error, or a file too large to be one
        read_gaps(tmp_path, "t")
    assert str(path) in str(failure.value)
    assert len(str(failure.value).splitlines()) == 1


def test_lost_offsets_are_not_missing_ones_and_are_drawn_apart(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False, ledger=CatalogLedger(tmp_path)) as writer:
        for offset in [*range(0, 10), *range(50, 60), 62, 63]:  # 10..49 deleted at the source, 60..61 markers
            writer.append(Record(offset, 0, 1000 + offset, b"k", b"v"))
    record_gap(tmp_path, "t", 0, 10, 49)
    summary = summarize_partition(tmp_path, "t", 0)
    assert summary.missing == 2 and [(r.first, r.last) for r in summary.missing_ranges] == [(60, 61)]
    assert [(g.first, g.last) for g in summary.lost_at_source] == [(10, 49)]
    assert [(g.first, g.last) for g in summary.gaps] == [(60, 61)]  # a lost range is not drawn as a gap
    assert missing_offsets(PartitionReader(tmp_path / "t", 0), lost_at_source=summary.lost_at_source)[0] == 2
    assert missing_offsets(PartitionReader(tmp_path / "t", 0))[0] == 42
    page = render_report(summarize_backup(tmp_path), generated_at=0)
    assert 'class="lost"' in page and "40 offsets deleted at the source before they were read: 10..49" in page
    assert "offsets 10..49 deleted at the source before the backup read them" in page
