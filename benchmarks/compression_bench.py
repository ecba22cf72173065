"""Compressed segments: size ratio, compression speed and read speed per codec, on three kinds of values.

Values (``--records`` records each, keys like ``order-123456``, CreateTime timestamps):

- ``json``: JSON documents such as an order service emits (ids, a status and a country from small vocabularies,
  amounts, ISO timestamps), 150-250 bytes;
- ``avro``: the same fields encoded as schemaless Avro binary with fastavro (what a Schema Registry producer sends,
  minus its 5-byte prefix), 40-60 bytes;
- ``random``: random bytes, 200 bytes (already compressed or encrypted payloads).

For each kind the records are written once as a plain partition with :class:`PartitionWriter` (segments of
``--segment-mib``); that write is the baseline. Then, for each codec, a copy of the partition has every records
file compressed with :func:`compress_records_file` (what the backup does to each finished segment), and the whole
partition is read back with :meth:`PartitionReader.record_batches` (the restore's path) and compared with the
plain read measured in the same run.

Reported per kind and codec: stored size / plain size, compression MB/s of plain bytes (and as a share of the plain
write's time: the extra work a backup does per byte), and read records/s with its ratio to the plain read.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import compress_records_file
from spark_kafka_backup.partition.writer import PartitionWriter

CODECS = ("zstd", "lz4", "gzip")
STATUSES = ("created", "paid", "packed", "shipped", "delivered", "returned")
COUNTRIES = ("DE", "FR", "NL", "US", "GB", "PL", "IT", "ES")
SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "items", "type": "int"},
        {"name": "at", "type": "long"},
    ],
}


def _order(rng: random.Random, i: int) -> dict[str, object]:
    return {
        "id": 10_000_000 + i,
        "customer": f"customer-{rng.randrange(50_000):05d}",
        "status": rng.choice(STATUSES),
        "country": rng.choice(COUNTRIES),
        "amount": round(rng.uniform(1, 900), 2),
        "items": rng.randrange(1, 12),
        "at": 1_764_000_000_000 + i * 37,
    }


def values(kind: str, count: int) -> list[bytes]:
    rng = random.Random(18)
    if kind == "json":
        return [
            json.dumps({**_order(rng, i), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_764_000_000 + i)),
                        "note": rng.choice(("", "gift", "express delivery requested"))}).encode()
            for i in range(count)
        ]  # fmt: skip
    if kind == "avro":
        from fastavro import parse_schema, schemaless_writer

        schema = parse_schema(SCHEMA)
        out = []
        for i in range(count):
            buffer = io.BytesIO()
            schemaless_writer(buffer, schema, _order(rng, i))
            out.append(buffer.getvalue())
        return out
    return [os.urandom(200) for _ in range(count)]


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def write(root: Path, records: list[Record], segment_size: int) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=segment_size) as writer:
        for record in records:
            writer.append(record)


def read(root: Path) -> int:
    return sum(len(batch) for batch in PartitionReader(root / "t", 0).record_batches())


def compress_all(paths: list[Path], codec: str) -> None:
    for path in paths:
        compress_records_file(path, codec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--segment-mib", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbackup-compression-bench-"))
    print(f"{args.records} records per kind, segments of {args.segment_mib} MiB, in {work}")
    print("| values | codec | stored / plain | compress MB/s | compress time / plain write time "
          "| read records/s | vs plain read |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    try:
        for kind in ("json", "avro", "random"):
            payloads = values(kind, args.records)
            records = [Record(i, 0, 1_764_000_000_000 + i, b"order-%06d" % i, v) for i, v in enumerate(payloads)]
            plain = work / kind / "plain"
            write_seconds = seconds(partial(write, plain, records, args.segment_mib << 20))
            plain_bytes = sum(path.stat().st_size for path in (plain / "t").glob("*_records"))
            read_plain = seconds(partial(read, plain))
            write_rate = plain_bytes / 1e6 / write_seconds
            print(f"| {kind} | none (baseline) | 1.000 ({plain_bytes / 1e6:.1f} MB) | | 1.00 (write "
                  f"{write_rate:.0f} MB/s) | {args.records / read_plain:,.0f} | 1.00 |")  # fmt: skip
            for codec in CODECS:
                copy = work / kind / codec
                shutil.copytree(plain, copy)
                copied = sorted((copy / "t").glob("*_records"))
                compress = seconds(partial(compress_all, copied, codec))
                stored = sum(path.stat().st_size for path in copied)
                read_seconds = seconds(partial(read, copy))
                assert read(copy) == args.records
                print(f"| {kind} | {codec} | {stored / plain_bytes:.3f} | {plain_bytes / 1e6 / compress:.0f} "
                      f"| {compress / write_seconds:.2f} | {args.records / read_seconds:,.0f} "
                      f"| {read_plain / read_seconds:.2f} |")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
