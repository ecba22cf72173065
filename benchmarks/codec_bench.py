"""Codec benchmark: encode and decode N records of the v1 format on one core.

Records: 100-byte values (``--value-size``), keys like ``key-123456``, one
header ``("trace-id", 16 bytes)``, CreateTime timestamps, consecutive offsets.

Reported, each as records/s and MB/s of encoded v1 bytes:

- ``raw join``: the baseline, measured in the same run on the same records:
  concatenating each record's key, value and header bytes with no framing.
  It bounds what any pure-Python per-record codec can do here.
- ``encode``: the scalar reference, :func:`append_record` into one buffer.
- ``decode``: the scalar reference, :func:`decode_records` over that buffer,
  building Record tuples.
- ``encode columns``: :func:`encode_columns` on Arrow batches of
  ``--batch-rows`` records (the sink's path: what a Spark Arrow batch becomes),
  checked byte-identical to ``encode``.
- ``decode columns``: :func:`decode_columns` over the same batches guided by
  their index entries (the restore's path), keys and values gathered into
  Arrow columns.
- ``write``: :class:`PartitionWriter` appending to real files (fsync at close).
- ``read``: :class:`PartitionReader` streaming them back through the indexes.
- ``write batches``: :meth:`PartitionWriter.append_batch` of encoded Arrow
  batches (the sink's path), same files.
- ``read batches``: :meth:`PartitionReader.record_batches`, each record then
  made a :class:`Record` for the producer call (the restore's path).

Ratios are against the raw baseline. ``write`` and ``read`` run in a fresh
process that generates records on the fly, once with N and once with N/10
records: its peak RSS is printed for both and should be the same, since the
file paths stream in bounded chunks.
"""

from __future__ import annotations

import argparse
import filecmp
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_kafka_backup.format.record import Record, append_record, decode_records
from spark_kafka_backup.format.record_columns import EncodedRecords, binary_column, decode_columns, encode_columns
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter


def make_records(count: int, value_size: int) -> list[Record]:
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    header_value = b"0123456789abcdef"
    return [
        Record(i, 0, 1_700_000_000_000 + i, b"key-%06d" % (i % 1_000_000), value, (("trace-id", header_value),))
        for i in range(count)
    ]


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def make_batches(records: list[Record], rows: int) -> list[dict[str, object]]:
    """The records as the column sets the sink receives, ``rows`` at a time (built before timing)."""
    batches = []
    for start in range(0, len(records), rows):
        part = records[start : start + rows]
        batches.append(
            {
                "offsets": np.array([r.offset for r in part], dtype=np.int64),
                "timestamp_types": np.array([r.timestamp_type for r in part], dtype=np.int32),
                "timestamps": np.array([r.timestamp or 0 for r in part], dtype=np.int64),
                "keys": pa.array([r.key for r in part], pa.binary()),
                "values": pa.array([r.value for r in part], pa.binary()),
                "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in part], HEADERS),
            }
        )
    return batches


def timed(label: str, seconds: float, count: int, nbytes: int, baseline: float | None) -> str:
    rate = count / seconds
    ratio = "" if baseline is None else f"  ({rate / baseline:5.2f}x raw)"
    return f"{label:<8} {rate:>12,.0f} records/s  {nbytes / seconds / 1e6:8.1f} MB/s  {seconds:6.2f} s{ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs for the in-memory figures")
    parser.add_argument("--batch-rows", type=int, default=10_000, help="records per Arrow batch (Spark's default)")
    parser.add_argument("--files-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.files_only:
        files_only(args.records, args.value_size, args.batch_rows)
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    records = make_records(args.records, args.value_size)
    batches = make_batches(records, args.batch_rows)
    gc.collect()
    gc.disable()  # the codec allocates no cycles; keep collector pauses out of the figures

    best_raw = best_encode = best_decode = best_columns = best_decode_columns = float("inf")
    encoded: list[EncodedRecords] = []
    buffer = bytearray()
    for _ in range(args.repeat):
        start = time.perf_counter()
        parts = []
        for record in records:
            parts.append(record.key or b"")
            parts.append(record.value or b"")
            for _key, value in record.headers:
                parts.append(value or b"")
        raw = b"".join(parts)
        best_raw = min(best_raw, time.perf_counter() - start)
        del parts, raw

        buffer = bytearray(b"\x01")
        start = time.perf_counter()
        for record in records:
            append_record(buffer, record)
        best_encode = min(best_encode, time.perf_counter() - start)

        data = bytes(buffer)
        start = time.perf_counter()
        count = 0
        for _ in decode_records(data, 1, len(data)):
            count += 1
        best_decode = min(best_decode, time.perf_counter() - start)
        assert count == len(records)

        start = time.perf_counter()
        encoded = [encode_columns(**batch) for batch in batches]  # type: ignore[arg-type]
        best_columns = min(best_columns, time.perf_counter() - start)

        start = time.perf_counter()
        count = 0
        position = 1
        for piece in encoded:
            starts = piece.bounds[:-1] + position
            columns = decode_columns(piece.data, piece.offsets, starts, piece.lengths, base=position)
            buf = np.frombuffer(piece.data, dtype=np.uint8)
            binary_column(buf, columns.key_starts, columns.key_lengths)
            binary_column(buf, columns.value_starts, columns.value_lengths)
            count += len(columns)
            position += len(piece.data)
        best_decode_columns = min(best_decode_columns, time.perf_counter() - start)
        assert count == len(records)
    assert b"".join(bytes(piece.data) for piece in encoded) == bytes(buffer[1:]), "columnar bytes differ"
    nbytes = len(buffer) - 1
    raw_rate = len(records) / best_raw

    gc.enable()
    del records, batches, encoded
    files_full = run_files_child(args.records, args.value_size, args.batch_rows)
    files_tenth = run_files_child(args.records // 10, args.value_size, args.batch_rows)
    count = args.records

    print(f"{count:,} records, {args.value_size}-byte values, {nbytes / 1e6:.1f} MB encoded, one core")
    print(timed("raw join", best_raw, count, nbytes, None))
    print(timed("encode", best_encode, count, nbytes, raw_rate))
    print(timed("decode", best_decode, count, nbytes, raw_rate))
    print(timed("encode columns", best_columns, count, nbytes, raw_rate))
    print(timed("decode columns", best_decode_columns, count, nbytes, raw_rate))
    print(timed("write", files_full["write"], count, nbytes, raw_rate))
    print(timed("read", files_full["read"], count, nbytes, raw_rate))
    print(timed("write batches", files_full["write_batches"], count, nbytes, raw_rate))
    print(timed("read batches", files_full["read_batches"], count, nbytes, raw_rate))
    print(
        f"peak RSS of the file write+read process: {files_full['rss_mib']:,.0f} MiB for {count:,} records, "
        f"{files_tenth['rss_mib']:,.0f} MiB for {count // 10:,}"
    )


def run_files_child(count: int, value_size: int, batch_rows: int) -> dict[str, float]:
    """Time writer and reader in a fresh process that generates records on the fly."""
    command = [sys.executable, __file__, "--files-only", "--records", str(count), "--value-size", str(value_size)]
    output = subprocess.run(
        [*command, "--batch-rows", str(batch_rows)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(output)
    return result


def files_only(count: int, value_size: int, batch_rows: int) -> None:
    """Child mode: write and read ``count`` records through the files; print JSON figures."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    header = (("trace-id", b"0123456789abcdef"),)
    with tempfile.TemporaryDirectory() as tmp:
        topic_dir = Path(tmp) / "bench"
        start = time.perf_counter()
        with PartitionWriter(topic_dir, "bench", 0) as writer:
            for i in range(count):
                writer.append(Record(i, 0, 1_700_000_000_000 + i, b"key-%06d" % (i % 1_000_000), value, header))
        write_seconds = time.perf_counter() - start
        start = time.perf_counter()
        seen = sum(1 for _ in PartitionReader(topic_dir, 0).records())
        read_seconds = time.perf_counter() - start
        assert seen == count
        start = time.perf_counter()
        seen = sum(1 for batch in PartitionReader(topic_dir, 0).record_batches() for _ in batch.records())
        read_batches_seconds = time.perf_counter() - start
        assert seen == count
        batch_seconds = 0.0
        with PartitionWriter(Path(tmp) / "batches", "bench", 0) as writer:
            for first in range(0, count, batch_rows):
                # Building the batch is the source's work, not the writer's: only the append is timed.
                (batch,) = make_batches(
                    [
                        Record(i, 0, 1_700_000_000_000 + i, b"key-%06d" % (i % 1_000_000), value, header)
                        for i in range(first, min(count, first + batch_rows))
                    ],
                    batch_rows,
                )
                start = time.perf_counter()
                writer.append_batch(encode_columns(**batch))  # type: ignore[arg-type]
                batch_seconds += time.perf_counter() - start
            start = time.perf_counter()
        batch_seconds += time.perf_counter() - start  # the closing sync
        names = sorted(p.name for p in topic_dir.iterdir())
        assert names == sorted(p.name for p in (Path(tmp) / "batches").iterdir()), "batch files differ"
        _same, differ, errors = filecmp.cmpfiles(topic_dir, Path(tmp) / "batches", names, shallow=False)
        assert not differ, f"batch files differ: {differ}"
        assert not errors, f"batch files unreadable: {errors}"
    print(
        json.dumps(
            {
                "write": write_seconds,
                "read": read_seconds,
                "write_batches": batch_seconds,
                "read_batches": read_batches_seconds,
                "rss_mib": peak_rss_mib(),
            }
        )
    )


def peak_rss_mib() -> float:
    """This process's peak resident memory.

    ``VmHWM`` belongs to the current address space; ``ru_maxrss`` would also
    count the forked parent's memory before ``exec`` on Linux.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
