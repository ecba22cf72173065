"""``spark-kafka-backup describe`` and ``spark-kafka-backup report``; the report is checked in a real headless Chromium.

The browser is Debian's chromium (``/usr/bin/chromium``, installed by
``.ci/run``; ``KBACKUP_TEST_CHROMIUM`` overrides the path) driven by
Playwright: the page must load without console errors, and a screenshot must
show, for each partition, green where the backup covers offsets and red at
each gap, at the places the covered ranges and gaps say.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.report.summary import OffsetRange, summarize_backup
from tests.kafka_helpers import run_kbackup

NOW = int(time.time() * 1000)
CHROMIUM = os.environ.get("KBACKUP_TEST_CHROMIUM", "/usr/bin/chromium")


def write(root: Path, topic: str, partition: int, offsets: list[int], *, segment: int = 4000) -> None:
    with PartitionWriter(
        root / topic, topic, partition, max_segment_size=segment, fsync=False, ledger=CatalogLedger(root)
    ) as writer:
        for offset in offsets:
            writer.append(Record(offset, 0, NOW - 3_600_000 + offset * 1000, b"k", b"v" * 50, ()))


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """orders/0: 0..399 with a gap 200..259 and a lone missing offset 99, written as by a spark-kafka-backup that did
    not record where it began reading (``readFrom``): nothing vouches for them, so they are missing; orders/1: 120..299
    (older ones gone to retention); orders/2: empty. Two groups, one checkpoint. (Offsets the source skipped are
    tests/test_transaction_offsets.py's.)"""
    root = tmp_path / "backup"
    write(root, "orders", 0, [o for o in range(400) if o != 99 and not 200 <= o < 260])
    written = read_catalog(root, "orders", 0)
    assert written is not None and written.read_from == 0
    write_catalog(root, replace(written, read_from=None))
    write(root, "orders", 1, list(range(120, 300)))
    with PartitionWriter(root / "orders", "orders", 2, fsync=False) as writer:
        writer.ensure_segment(0)
    write_consumer_offsets(root / "orders", 0, {"billing": 150, "audit": 390})
    write_consumer_offsets(root / "orders", 1, {"billing": 200})
    checkpoints.record_completed(root, {"billing": {("orders", 0): 150}}, {("orders", 0): 400}, NOW)
    return root


def test_summary_coverage_gaps_and_missing_offsets(backup: Path) -> None:
    summary = summarize_backup(backup)
    (orders,) = summary.topics
    p0, p1, p2 = orders.partitions
    assert p0.covered == [OffsetRange(0, 199), OffsetRange(260, 399)]
    assert p0.gaps == [OffsetRange(200, 259)]
    assert p0.missing == 61 and p0.records == 339
    assert (p1.first_offset, p1.last_offset, p1.gaps, p1.missing) == (120, 299, [], 0)
    assert (p2.records, p2.covered, p2.first_offset) == (0, [], None)
    assert p0.groups == {"audit": 390, "billing": 150}
    assert p0.min_timestamp == NOW - 3_600_000 and p0.max_timestamp == NOW - 3_600_000 + 399_000
    assert [c.id for c in summary.checkpoints] == [1]


def test_describe_text_and_json(backup: Path, tmp_path: Path) -> None:
    text = run_kbackup("describe", backup)
    assert text.returncode == 0, text.stderr
    assert "  partition 0: 339 records, offsets 0..399, 61 offsets missing: 99, 200..259, " in text.stdout
    assert "    group billing: 150" in text.stdout
    document = json.loads(run_kbackup("describe", backup, "--json").stdout)
    partition = document["topics"][0]["partitions"][0]
    assert partition["gaps"] == [{"first": 200, "last": 259}]
    assert partition["missingOffsets"] == 61
    assert partition["missingRanges"] == [{"first": 99, "last": 99}, {"first": 200, "last": 259}]
    # The same offsets, written the same way, in ls (text and JSON) and in the report.
    listed = run_kbackup("ls", backup, "--topic", "orders", "--partition", "0").stdout
    assert "partition 0: 339 records, offsets 0..399, 61 offsets missing: 99, 200..259, " in listed
    as_json = json.loads(run_kbackup("ls", backup, "--topic", "orders", "--json").stdout)[0]["partitions"][0]
    assert (as_json["missingOffsets"], as_json["missingRanges"]) == (61, partition["missingRanges"])
    assert as_json["bytes"] == partition["bytes"]  # "bytes": the records files, in ls and describe alike
    page = tmp_path / "report.html"
    assert run_kbackup("report", backup, "--output", page).returncode == 0
    assert "61 offsets missing: 99, 200..259" in page.read_text()
    assert document["checkpoints"][0]["status"] == "completed"
    listing = json.loads(run_kbackup("ls", backup, "--json").stdout)
    assert [p["partition"] for p in listing[0]["partitions"]] == [0, 1, 2]


def test_report_in_headless_chromium(backup: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    written = run_kbackup("report", backup, "--output", page_file)
    assert written.returncode == 0, written.stderr
    text = page_file.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text, "self-contained"

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            boxes = {}
            for kind in ("covered", "gap", "before"):
                for element in page.query_selector_all(f"svg.offsets rect.{kind}"):
                    key = (kind, int(element.get_attribute("data-partition") or -1),
                           int(element.get_attribute("data-first") or -1))  # fmt: skip
                    boxes[key] = element.bounding_box()
        finally:
            browser.close()
    assert problems == []

    expected = {
        ("covered", 0, 0), ("covered", 0, 260), ("gap", 0, 200), ("covered", 1, 120), ("before", 1, 0),
    }  # fmt: skip
    assert set(boxes) == expected, "each partition's covered ranges and gaps, nothing for the empty one"
    pixels = _load_png(shot)
    green, red, grey = (0x2E, 0x9D, 0x57), (0xD9, 0x3B, 0x3B), (0xC9, 0xCE, 0xD6)
    for (kind, partition, first), box in boxes.items():
        assert box is not None
        colour = {"covered": green, "gap": red, "before": grey}[kind]
        x, y = int(box["x"] + box["width"] / 2), int(box["y"] + box["height"] / 2)
        assert _near(pixels(x, y), colour), f"{kind} {partition}/{first} drawn at ({x}, {y}) as {pixels(x, y)}"
    # The gap sits between the two covered ranges of partition 0, and spans 60 of 400 offsets.
    left, gap, right = boxes[("covered", 0, 0)], boxes[("gap", 0, 200)], boxes[("covered", 0, 260)]
    assert left and gap and right
    assert left["x"] + left["width"] == pytest.approx(gap["x"], abs=1)
    assert gap["x"] + gap["width"] == pytest.approx(right["x"], abs=1)
    assert gap["width"] == pytest.approx(left["width"] * 60 / 200, rel=0.05)
    # Partition 1 starts at offset 120 of 400: its grey part is 30 % of the track.
    before = boxes[("before", 1, 0)]
    assert before and before["width"] == pytest.approx((left["width"] + gap["width"] + right["width"]) * 0.3, rel=0.05)


def _near(found: tuple[int, int, int], wanted: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(found, wanted, strict=True))


def _load_png(path: Path) -> Callable[[int, int], tuple[int, int, int]]:
    """A pixel reader for an RGB(A) PNG (zlib only; no imaging library needed)."""
    import struct
    import zlib

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, [], b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), "8-bit RGB or RGBA"
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        rows.append(line)
        previous = line

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        line = rows[y]
        return line[x * channels], line[x * channels + 1], line[x * channels + 2]

    return pixel
