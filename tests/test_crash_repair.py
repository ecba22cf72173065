"""Reopening repairs every state a crash can leave, losing and duplicating nothing.

Each deterministic test builds one crash state on disk byte by byte; the last
test kills a real writer process with SIGKILL at random moments.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.partition_index import decode_partition_index
from spark_kafka_backup.format.record import encode_record
from spark_kafka_backup.format.segment_index import ENTRY
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.conftest import REPO
from tests.recordgen import sample_record

RECORDS = "segment_partition_000_from_offset_0000000000_records"
INDEX = "segment_partition_000_from_offset_0000000000_index"


@pytest.fixture
def topic_dir(tmp_path: Path) -> Path:
    """A partition holding records 0..9 (offsets 0..27), closed cleanly."""
    directory = tmp_path / "crash"
    with PartitionWriter(directory, "crash", 0, fsync=False) as writer:
        for i in range(10):
            writer.append(sample_record(i))
    return directory


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _reopen_and_finish(topic_dir: Path, *, expect_last: int, upto: int = 12) -> None:
    """Reopen, check the repaired state, replay from record 8 (as a restarted job does), check all."""
    with PartitionWriter(topic_dir, "crash", 0, fsync=False) as writer:
        assert writer.last_offset == expect_last
        repaired_size = (topic_dir / RECORDS).stat().st_size
        repaired_index = (topic_dir / INDEX).stat().st_size
        for i in range(8, upto):
            writer.append(sample_record(i))
    kept = expect_last // 3 + 1
    assert repaired_size == 1 + sum(len(encode_record(sample_record(i))) for i in range(kept))
    assert repaired_index == 1 + 24 * kept
    assert list(PartitionReader(topic_dir, 0).records()) == [sample_record(i) for i in range(upto)]


def test_torn_record_at_the_end_of_the_records_file(topic_dir: Path) -> None:
    _append(topic_dir / RECORDS, encode_record(sample_record(10))[:17])
    _reopen_and_finish(topic_dir, expect_last=27)


def test_whole_record_without_its_index_entry(topic_dir: Path) -> None:
    _append(topic_dir / RECORDS, encode_record(sample_record(10)))
    _reopen_and_finish(topic_dir, expect_last=27)


def test_partial_trailing_index_entry(topic_dir: Path) -> None:
    record = encode_record(sample_record(10))
    size = (topic_dir / RECORDS).stat().st_size
    _append(topic_dir / RECORDS, record)
    _append(topic_dir / INDEX, ENTRY.pack(30, size, len(record))[:11])
    _reopen_and_finish(topic_dir, expect_last=27)
    assert ((topic_dir / INDEX).stat().st_size - 1) % 24 == 0


def test_index_entry_whose_record_never_reached_the_disk(topic_dir: Path) -> None:
    size = (topic_dir / RECORDS).stat().st_size
    _append(topic_dir / INDEX, ENTRY.pack(30, size, len(encode_record(sample_record(10)))))
    _reopen_and_finish(topic_dir, expect_last=27)


def test_index_entry_with_a_torn_record(topic_dir: Path) -> None:
    record = encode_record(sample_record(10))
    size = (topic_dir / RECORDS).stat().st_size
    _append(topic_dir / INDEX, ENTRY.pack(30, size, len(record)))
    _append(topic_dir / RECORDS, record[:-1])
    _reopen_and_finish(topic_dir, expect_last=27)


def test_index_entry_over_zeroed_record_bytes(topic_dir: Path) -> None:
    record = encode_record(sample_record(10))
    size = (topic_dir / RECORDS).stat().st_size
    _append(topic_dir / INDEX, ENTRY.pack(30, size, len(record)))
    _append(topic_dir / RECORDS, bytes(len(record)))
    _reopen_and_finish(topic_dir, expect_last=27)


def test_several_unverified_entries_are_all_dropped(topic_dir: Path) -> None:
    size = (topic_dir / RECORDS).stat().st_size
    lengths = [len(encode_record(sample_record(i))) for i in (10, 11)]
    _append(topic_dir / INDEX, ENTRY.pack(30, size, lengths[0]) + ENTRY.pack(33, size + lengths[0], lengths[1]))
    _append(topic_dir / RECORDS, encode_record(sample_record(10))[:5])
    _reopen_and_finish(topic_dir, expect_last=27)


def test_partial_trailing_partition_index_entry(topic_dir: Path) -> None:
    _append(topic_dir / "index_partition_000", b"\x00\x00\x00\x2dsegm")
    _reopen_and_finish(topic_dir, expect_last=27)
    entries, _ = decode_partition_index((topic_dir / "index_partition_000").read_bytes())
    assert [e.start_offset for e in entries] == [0]


def test_crash_while_creating_a_segment_leaves_no_orphans(topic_dir: Path) -> None:
    # Crash after the new segment's files were renamed into place but before
    # its partition index entry: the files are empty and must go.
    (topic_dir / "segment_partition_000_from_offset_0000000030_index").write_bytes(MAGIC_V1)
    (topic_dir / "segment_partition_000_from_offset_0000000030_records").write_bytes(MAGIC_V1)
    (topic_dir / "segment_partition_000_from_offset_0000000033_index").write_bytes(MAGIC_V1)
    _reopen_and_finish(topic_dir, expect_last=27)
    assert not (topic_dir / "segment_partition_000_from_offset_0000000033_index").exists()
    assert sorted(p.name for p in topic_dir.iterdir()) == ["index_partition_000", INDEX, RECORDS]


def test_tail_segment_with_missing_records_file_is_completed(topic_dir: Path) -> None:
    # A tail segment listed in the partition index whose index file exists
    # (empty) but whose records file does not.
    from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_entry

    name = "segment_partition_000_from_offset_0000000030"
    (topic_dir / f"{name}_index").write_bytes(MAGIC_V1)
    _append(topic_dir / "index_partition_000", encode_entry(PartitionIndexEntry(name, 30)))
    with PartitionWriter(topic_dir, "crash", 0, fsync=False) as writer:
        assert writer.last_offset == 27
        writer.append(sample_record(10))
    assert (topic_dir / f"{name}_records").read_bytes() == MAGIC_V1 + encode_record(sample_record(10))
    assert list(PartitionReader(topic_dir, 0).records()) == [sample_record(i) for i in range(11)]


def test_missing_index_with_data_is_an_error_not_a_truncation(topic_dir: Path) -> None:
    before = (topic_dir / RECORDS).read_bytes()
    (topic_dir / INDEX).unlink()
    with pytest.raises(FormatError, match="spark-kafka-backup index rebuild"):
        PartitionWriter(topic_dir, "crash", 0, fsync=False)
    assert (topic_dir / RECORDS).read_bytes() == before


def test_segment_with_data_missing_from_partition_index_is_an_error(topic_dir: Path) -> None:
    (topic_dir / "segment_partition_000_from_offset_0000000099_records").write_bytes(
        MAGIC_V1 + encode_record(sample_record(33))
    )
    with pytest.raises(FormatError, match="missing from the partition index"):
        PartitionWriter(topic_dir, "crash", 0, fsync=False)


def _lines(child: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """Lines of the child's stdout as they come; ``None`` at its end."""
    lines: queue.Queue[str | None] = queue.Queue()
    assert child.stdout is not None
    stdout = child.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _run_until_done(
    directory: Path,
    rng: random.Random,
    *,
    total: int,
    step_kills: bool,
    attempts: int = 14,
    catalog: bool = False,
    compression: str | None = None,
    after_kill: Callable[[], None] | None = None,
) -> int:
    """Run the child repeatedly, killing it, until it finishes; return the number of kills.

    Each restart replays from the record after the last acknowledged one, as a
    restarted backup job replays its last uncommitted micro-batch.
    """
    acked = -1
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if catalog:
        env["KBACKUP_TEST_CATALOG"] = "1"
    if compression:
        env["KBACKUP_TEST_COMPRESSION"] = compression
    for attempt in range(attempts):
        last_attempt = attempt == attempts - 1
        command = [
            sys.executable,
            "-m",
            "tests.crash_child",
            str(directory),
            str(acked + 1),
            str(total),
            "100",
            "6000",
            "256",
        ]
        if step_kills and not last_attempt:
            command.append(str(rng.randint(1, 400)))
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
        lines = _lines(child)
        resumed = (lines.get(timeout=60) or "").split()
        assert resumed[:1] == ["resumed"]
        if acked >= 0:
            # Everything acknowledged before the kill is still there.
            assert resumed[1] != "None" and int(resumed[1]) >= sample_record(acked).offset
        # Time kills: after a random number of acknowledgements plus a random
        # delay. Step kills: the child kills itself at a chosen call.
        acks_before_kill = 10**9 if (last_attempt or step_kills) else rng.randint(1, 25)
        done = ended = False
        while acks_before_kill > 0:
            line = lines.get(timeout=120)
            if line is None:
                ended = True
                break
            done = done or line == "done"
            if line.startswith("acked"):
                acked = int(line.split()[1])
                acks_before_kill -= 1
        if not ended and child.poll() is None:
            time.sleep(rng.uniform(0, 0.01))
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        while not ended and (line := lines.get(timeout=60)) is not None:
            if line.startswith("acked"):
                acked = int(line.split()[1])
            done = done or line == "done"
        if done:
            # "done" is printed after close(); a kill racing the exit changes nothing.
            assert child.returncode in (0, -signal.SIGKILL)
            assert acked == total - 1
            return attempt  # every earlier attempt was killed
        assert child.returncode == -signal.SIGKILL
        if after_kill is not None:
            after_kill()
    raise AssertionError("the writer never finished")


@pytest.mark.long
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "crash"
    kills = _run_until_done(directory, random.Random(20261122), total=20_000, step_kills=False)
    assert kills >= 3
    assert list(PartitionReader(directory, 0).records()) == [sample_record(i) for i in range(20_000)]


# CI time: in the long tier; the quick tier covers kill -9 in the quick tier:
# test_sigkill_at_file_system_calls_loses_and_duplicates_nothing[1]
@pytest.mark.long
def test_sigkill_with_catalog_leaves_a_backup_that_verifies_at_every_kill(tmp_path: Path) -> None:
    """Kills at chosen calls while the writer also maintains the catalog: after every kill, unrepaired, it verifies."""
    from spark_kafka_backup.catalog.verify import verify_partition

    directory = tmp_path / "crash"
    findings: list[list[str]] = []

    def check() -> None:
        findings.append(verify_partition(tmp_path, "crash", 0).errors)

    kills = _run_until_done(directory, random.Random(11), total=3_000, step_kills=True, catalog=True, after_kill=check)
    assert kills >= 5
    assert findings and all(errors == [] for errors in findings), findings
    final = verify_partition(tmp_path, "crash", 0, deep=True)
    assert final.ok and final.records == 3_000


# CI time: in the long tier; the quick tier covers kill -9 in the quick tier:
# test_sigkill_at_file_system_calls_loses_and_duplicates_nothing[1]
@pytest.mark.long
def test_sigkill_while_compressing_finished_segments_leaves_a_backup_that_verifies(tmp_path: Path) -> None:
    """The same kills with compression on: a kill while a finished segment is compressed (its temporary copy
    synced, renamed, the directory synced) leaves it plain or compressed, whole; the catalog follows."""
    from spark_kafka_backup.catalog.verify import verify_partition
    from spark_kafka_backup.format.frames import is_framed

    directory = tmp_path / "crash"
    findings: list[list[str]] = []

    def check() -> None:
        findings.append(verify_partition(tmp_path, "crash", 0).errors)

    kills = _run_until_done(directory, random.Random(7), total=3_000, step_kills=True, catalog=True,
                            compression="lz4", after_kill=check)  # fmt: skip
    assert kills >= 5
    assert findings and all(errors == [] for errors in findings), findings
    final = verify_partition(tmp_path, "crash", 0, deep=True)
    assert final.ok and final.records == 3_000
    assert list(PartitionReader(directory, 0).records()) == [sample_record(i) for i in range(3_000)]
    assert sum(is_framed(path.read_bytes()[:4]) for path in directory.glob("*_records")) >= 5


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.long), pytest.param(3, marks=pytest.mark.long)])
def test_sigkill_at_file_system_calls_loses_and_duplicates_nothing(tmp_path: Path, seed: int) -> None:
    """Kills at chosen write/fsync/truncate/rename calls, torn writes included, across segment rolls."""
    directory = tmp_path / "crash"
    kills = _run_until_done(directory, random.Random(seed), total=3_000, step_kills=True)
    assert kills >= 5
    assert list(PartitionReader(directory, 0).records()) == [sample_record(i) for i in range(3_000)]
