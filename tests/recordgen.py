"""Deterministic records for writer tests (also used by the crash child process)."""

from __future__ import annotations

from spark_kafka_backup.format.record import Record


def sample_record(i: int, *, value_size: int = 100) -> Record:
    """Record number ``i``: offset ``3 * i`` (gaps of 2), all field kinds in rotation."""
    kind = i % 4
    return Record(
        offset=3 * i,
        timestamp_type=(0, 1, -1, -2)[kind],
        timestamp=1_700_000_000_000 + i if kind < 2 else None,
        key=None if kind == 3 else f"key-{i}".encode(),
        value=b"" if kind == 2 else (f"value-{i}-".encode() * value_size)[:value_size],
        headers=(("trace", f"{i}".encode()), ("trace", None)) if kind == 1 else (),
    )
