"""The restore's profile of what it writes, and the decisions on a target's limits: pure, no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window, selected_records
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.profile import RecordsProfile, kafka_size_bound, profile_partition
from spark_kafka_backup.restore.target_limits import LONG_MAX, Choices, TopicLimits, broker_topic_defaults, judge
from spark_kafka_backup.text import iso_time as iso
from tests.strategies import records

DAY = 86_400_000
NOW = 1_795_334_400_000  # 2026-11-22T08:00:00Z


def kafka_record_size(record: Record) -> int:
    """Kafka's v2 record batch of this record alone, encoded field by field (the reference for the vectorised sum)."""

    def varint(value: int) -> bytes:
        zigzag = (value << 1) ^ (value >> 63)
        out = bytearray()
        while True:
            byte = zigzag & 0x7F
            zigzag >>= 7
            if zigzag:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    def field(data: bytes | None) -> bytes:
        return varint(-1) if data is None else varint(len(data)) + data

    body = b"\x00" + varint(0) + varint(0) + field(record.key) + field(record.value) + varint(len(record.headers))
    for key, value in record.headers:
        body += field(key.encode()) + field(value)
    return 61 + len(varint(len(body))) + len(body)


def _write(root: Path, stored: list[Record], segment_size: int = 700) -> PartitionReader:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=segment_size, fsync=False,
                         ledger=CatalogLedger(root)) as writer:  # fmt: skip
        for record in stored:
            writer.append(record)
    return PartitionReader(root / "t", 0)


@st.composite
def _partitions(draw: st.DrawFn) -> list[Record]:
    count = draw(st.integers(1, 40))
    stamps = st.one_of(st.sampled_from([0, -1, -5, 1, NOW, NOW + 400 * DAY]), st.integers(-(10**13), 10**13))
    found = []
    for offset in range(count):
        record = draw(records(offset=offset * 2))
        if record.timestamp is not None:
            record = record._replace(timestamp=draw(stamps))
        found.append(record)
    return found


@settings(max_examples=25, deadline=None)
@given(stored=_partitions(), low=st.integers(0, 90), span=st.integers(0, 90), by_time=st.booleans())
def test_profile_equals_a_record_by_record_scan(stored: list[Record], low: int, span: int, by_time: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        reader = _write(root, stored)
        catalog = read_catalog(root, "t", 0)
        windows = [Window(), Window(from_offset=low, to_offset=low + span)]
        if by_time:
            windows.append(Window(from_time=-(10**12), to_time=NOW))
        for window in windows:
            chosen = list(selected_records(reader, window))
            stamped = [r.timestamp for r in chosen if r.timestamp_type in (0, 1) and r.timestamp not in (None, -1)]
            zeros = [r.offset for r in chosen if r.timestamp_type in (0, 1) and r.timestamp == 0]
            sizes = [kafka_record_size(r) for r in chosen]
            for keys in (False, True):
                for limit in (None, 10):  # 10: every bound is above it, so every size is measured
                    found = profile_partition(reader, window, catalog, keys=keys, size_limit=limit)
                    assert found.records == len(chosen)
                    assert found.oldest == (min(stamped) if stamped else None), window
                    assert found.newest == (max(stamped) if stamped else None), window
                    assert found.zero_stamped == len(zeros)
                    assert found.zero_stamped_at == [(0, o) for o in zeros[:5]]
                    if sizes:
                        assert found.largest >= max(sizes)
                        assert found.largest == max(sizes) or not found.largest_exact
                    if limit == 10 and sizes:
                        assert found.largest_exact and found.largest == max(sizes)
                        assert found.largest_at is not None
                        assert kafka_record_size(next(r for r in chosen if r.offset == found.largest_at[1])) == max(
                            sizes
                        )
                    if keys:
                        keyless = [r.offset for r in chosen if r.key is None]
                        assert found.keyless == len(keyless)
                        assert found.keyless_at == [(0, o) for o in keyless[:5]]
                    else:
                        assert found.keyless is None


def test_a_cataloged_segment_of_no_timestamps_has_no_time_range(tmp_path: Path) -> None:
    """The catalog counts Kafka's -1 among timestamps; a profile does not (found by the property above)."""
    stored = [Record(i, 0, -1, None, b"x" * 40) for i in range(40)] + [Record(40, 0, -5, None, b"y")]
    reader = _write(tmp_path, stored)
    catalog = read_catalog(tmp_path, "t", 0)
    assert catalog is not None and len(catalog.segments) > 2
    assert [e.min_timestamp for e in catalog.segments][:2] == [-1, -1]
    found = profile_partition(reader, Window(), catalog)
    assert (found.oldest, found.newest, found.records) == (-5, -5, 41)
    assert profile_partition(reader, Window(to_offset=39), catalog).oldest is None


@given(stored=st.lists(records(offset=0), min_size=1, max_size=1))
def test_the_size_bound_from_a_stored_length_holds(stored: list[Record]) -> None:
    from spark_kafka_backup.format.record import encode_record

    record = stored[0]
    assert kafka_size_bound(len(encode_record(record))) >= kafka_record_size(record)


# -- decisions ------------------------------------------------------------------------------------


def _profile(**fields: object) -> RecordsProfile:
    profile = RecordsProfile(records=10, oldest=NOW - DAY, newest=NOW, largest=500, largest_at=(0, 3))
    for name, value in fields.items():
        setattr(profile, name, value)
    return profile


def test_limits_from_settings() -> None:
    assert TopicLimits.from_config({"retention.ms": "604800000"}).retention_ms == 604_800_000
    assert TopicLimits.from_config({"retention.ms": "-1"}).retention_ms is None
    compacted = TopicLimits.from_config({"retention.ms": "1000", "retention.bytes": "5", "cleanup.policy": "compact"})
    assert compacted.compacted and compacted.retention_ms is None and compacted.retention_bytes is None
    both = TopicLimits.from_config({"retention.ms": "1000", "cleanup.policy": "compact, delete"})
    assert both.compacted and both.retention_ms == 1000
    assert TopicLimits.from_config({"message.timestamp.before.max.ms": str(LONG_MAX)}).before_max_ms is None
    assert TopicLimits.from_config({"message.timestamp.after.max.ms": "3600000"}).after_max_ms == 3_600_000
    # The broker's retention: ms over minutes over hours, as Kafka reads them; and the other defaults.
    assert broker_topic_defaults({"log.retention.hours": "168"})["retention.ms"] == str(7 * DAY)
    assert broker_topic_defaults({"log.retention.hours": "168", "log.retention.minutes": "10"})["retention.ms"] == (
        "600000"
    )
    assert broker_topic_defaults({"log.retention.hours": "1", "log.retention.ms": "5"})["retention.ms"] == "5"
    defaults = broker_topic_defaults({"message.max.bytes": "1048588", "log.message.timestamp.after.max.ms": "3600000"})
    assert defaults["max.message.bytes"] == "1048588" and defaults["message.timestamp.after.max.ms"] == "3600000"


def test_created_topics_get_settings_that_keep_the_records_and_say_so() -> None:
    config = {
        "retention.ms": str(7 * DAY),
        "retention.bytes": "1000",
        "message.timestamp.after.max.ms": "3600000",
        "message.timestamp.before.max.ms": str(30 * DAY),
        "max.message.bytes": "400",
    }
    profile = _profile(oldest=NOW - 365 * DAY, newest=NOW + 30 * DAY)
    verdict = judge("tgt", "src", config, profile, created=True, choices=Choices(), largest_partition_bytes=5000,
                    now_ms=NOW)  # fmt: skip
    assert verdict.problems == []
    assert verdict.settings == {
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "message.timestamp.after.max.ms": str(LONG_MAX),
        "message.timestamp.before.max.ms": str(LONG_MAX),
        "max.message.bytes": "500",
    }
    assert len(verdict.notes) == 5 and all(note.startswith("tgt: created with ") for note in verdict.notes)
    assert verdict.batch_limit == 500
    assert "the oldest restored record (2025-11-22T08:00:00.000Z)" in verdict.notes[0]

    # A value the user gave is theirs: then it is checked like an existing topic's.
    mine = Choices(given=frozenset({"retention.ms"}))
    given = judge("tgt", "src", {"retention.ms": str(7 * DAY)}, profile, created=True, choices=mine,
                  largest_partition_bytes=0, now_ms=NOW)  # fmt: skip
    assert given.settings == {} and len(given.problems) == 1
    assert "give a larger --topic-config retention.ms" in given.problems[0]
    assert "--accept-retention-loss" in given.problems[0]


def test_existing_topics_are_refused_naming_the_setting_its_value_and_a_way_on() -> None:
    profile = _profile(oldest=NOW - 365 * DAY, newest=NOW + 30 * DAY, largest=2000)
    config = {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(7 * DAY),
        "retention.bytes": "1000",
        "message.timestamp.after.max.ms": "3600000",
        "max.message.bytes": "1500",
    }
    verdict = judge("tgt", "src", config, profile, created=False, choices=Choices(), largest_partition_bytes=5000,
                    now_ms=NOW)  # fmt: skip
    assert verdict.settings == {}
    text = "\n".join(verdict.problems)
    assert len(verdict.problems) == 5, text
    assert "target topic 'tgt' has cleanup.policy=compact,delete" in text and "--allow-compacted-target" in text
    assert f"retention.ms={7 * DAY}" in text and "raise retention.ms of 'tgt' first" in text
    assert "up to 5000 bytes into one partition, more than retention.bytes=1000" in text
    assert "the newest restored records (2026-12-22T08:00:00.000Z) under message.timestamp.after.max.ms=3600000" in text
    assert "2000 bytes as a record batch (partition 0 offset 3), more than max.message.bytes=1500" in text

    accepting = judge("tgt", "src", config, profile, created=False, largest_partition_bytes=5000, now_ms=NOW,
                      choices=Choices(accept_retention_loss=True, allow_compacted_target=True))  # fmt: skip
    assert len(accepting.problems) == 2  # the broker would still reject: timestamp and size


def test_compaction_rejects_keyless_records_and_a_created_compacted_topic_says_so() -> None:
    keyless = _profile(keyless=3, keyless_at=[(1, 7), (1, 9), (2, 0)])
    created = judge("tgt", "src", {"cleanup.policy": "compact"}, keyless, created=True, choices=Choices(),
                    largest_partition_bytes=0, now_ms=NOW)  # fmt: skip
    assert created.problems == [
        "target topic 'tgt' has cleanup.policy=compact: the broker rejects records without a key, and 3 restored "
        "record(s) have none (first: partition 1 offset 7); restore into --topic-config cleanup.policy=delete"
    ]
    keyed = judge("tgt", "src", {"cleanup.policy": "compact"}, _profile(keyless=0), created=True, choices=Choices(),
                  largest_partition_bytes=0, now_ms=NOW)  # fmt: skip
    assert keyed.problems == [] and "created with cleanup.policy=compact as backed up" in keyed.notes[0]


def test_records_stamped_zero_are_refused_unless_restamping_is_accepted() -> None:
    profile = _profile(oldest=0, zero_stamped=7, zero_stamped_at=[(0, 1), (0, 4), (1, 2), (1, 3), (2, 9)])
    refused = judge("tgt", "src", {}, profile, created=True, choices=Choices(), largest_partition_bytes=0, now_ms=NOW)
    assert refused.problems == [
        "7 record(s) of 'src' are stamped 0 (1970-01-01T00:00:00.000Z; partition:offset 0:1, 0:4, 1:2, 1:3, 2:9, "
        "...): librdkafka, the producer under spark-kafka-backup, sends a timestamp of 0 as 'now', so they would come "
        "back with "
        "the restore's time; --restamp-zero-timestamps accepts that"
    ]
    accepted = judge("tgt", "src", {}, profile, created=True, choices=Choices(restamp_zero_timestamps=True),
                     largest_partition_bytes=0, now_ms=NOW)  # fmt: skip
    assert accepted.problems == [] and "--restamp-zero-timestamps" in accepted.notes[0]
    # A LogAppendTime target accepted with --restamp stamps every record anew: timestamps are not judged.
    restamped = judge("tgt", "src", {"retention.ms": "1"}, profile, created=False, choices=Choices(),
                      largest_partition_bytes=0, now_ms=NOW, restamped=True)  # fmt: skip
    assert restamped.problems == []


def test_records_too_large_for_any_request_are_refused_for_created_topics_too() -> None:
    huge = _profile(largest=200_000_000)
    verdict = judge("tgt", "src", {}, huge, created=True, choices=Choices(), largest_partition_bytes=0, now_ms=NOW)
    assert len(verdict.problems) == 1 and "socket.request.max.bytes=104857600" in verdict.problems[0]
    big = judge("tgt", "src", {"max.message.bytes": "1048588"}, _profile(largest=3_000_000), created=True,
                choices=Choices(), largest_partition_bytes=0, now_ms=NOW)  # fmt: skip
    assert big.settings == {"max.message.bytes": "3000000"} and big.producer_message_bytes == 3_000_000


def test_iso_times_before_1970_and_out_of_range() -> None:
    assert iso(-5) == "1969-12-31T23:59:59.995Z"
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(-(2**62)) == f"epoch ms {-(2**62)}"


def test_a_created_topic_does_not_take_a_broker_default_that_restamps_or_compacts() -> None:
    """The backup records only settings made on the source topic: the target broker's defaults fill the rest."""
    from spark_kafka_backup.restore.plan import TopicPlan, _override_broker_defaults

    topic = TopicPlan("src", "tgt", None, 1, {})
    _override_broker_defaults(topic, {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"},
                              restamp=False)  # fmt: skip
    assert topic.config == {"message.timestamp.type": "CreateTime", "cleanup.policy": "delete"}
    assert len(topic.notes) == 2 and "target broker's default LogAppendTime" in topic.notes[0]
    kept = TopicPlan("src", "tgt", None, 1, {"cleanup.policy": "compact"})
    _override_broker_defaults(kept, {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"},
                              restamp=True)  # fmt: skip
    assert kept.config == {"cleanup.policy": "compact"} and kept.notes == []


def test_a_tail_that_is_its_whole_segment_is_answered_from_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's newest segment stays the catalog's tail: with its time range and its files holding exactly the
    committed prefix, the profile is the catalog's; a catalog older than the files (records written since) reads it."""
    import spark_kafka_backup.restore.profile as profile_module

    stored = [Record(i, 0, NOW + i, b"k", b"v" * (i % 7)) for i in range(30)]
    reader = _write(tmp_path, stored[:20], segment_size=1 << 20)  # one segment: the tail
    before = read_catalog(tmp_path, "t", 0)
    assert before is not None and not before.segments and before.tail is not None and before.tail.times
    scanned = profile_partition(reader, Window(), None)  # no catalog: every record read

    from spark_kafka_backup.partition.segment_batches import iter_segment_batches

    read: list[object] = []

    def reading(*args: Any, **options: Any) -> Any:
        read.append(args)
        return iter_segment_batches(*args, **options)

    monkeypatch.setattr(profile_module, "iter_segment_batches", reading)
    quick = profile_partition(reader, Window(), before)
    assert read == [] and (quick.records, quick.oldest, quick.newest) == (scanned.records, NOW, NOW + 19)
    assert quick.largest >= scanned.largest  # a bound from the index, as for a finished segment
    assert quick.stored_bytes == scanned.stored_bytes + 1  # the file with its magic byte, as for a finished one

    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=1 << 20, fsync=False,
                         ledger=CatalogLedger(tmp_path)) as writer:  # fmt: skip
        for record in stored[20:]:
            writer.append(record)
    grown = profile_partition(PartitionReader(tmp_path / "t", 0), Window(), before)
    assert read and (grown.records, grown.newest) == (30, NOW + 29)  # the files are past the old tail: read
