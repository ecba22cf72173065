"""Codec for a v1 consumer offsets file (``consumer_offsets_partition_PPP``).

The file is a JSON object mapping each consumer group id to its committed
offset on that partition, for example ``{"billing":1200,"audit":0}``. The
original writes it compact (no spaces); spark-kafka-backup writes it compact with keys
sorted so the same state always gives the same bytes. Offsets are integers
in ``[0, 2**63)``; anything else is a :class:`FormatError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from spark_kafka_backup.errors import EncodingError, FormatError
from spark_kafka_backup.format.json_document import nesting_depth

#: A consumer offsets file larger than this is refused before it is parsed.
MAX_FILE_SIZE = 256 * 1024 * 1024


def encode_consumer_offsets(offsets: Mapping[str, int]) -> bytes:
    """Return the file's bytes for ``{group: committed offset}``."""
    for group, offset in offsets.items():
        if not isinstance(group, str) or isinstance(offset, bool) or not isinstance(offset, int):
            raise EncodingError(f"consumer offsets need str groups and int offsets: {group!r}: {offset!r}")
        if not 0 <= offset < 2**63:
            raise EncodingError(f"group {group!r}: offset {offset} is outside [0, 2**63)")
    return json.dumps(dict(sorted(offsets.items())), separators=(",", ":"), ensure_ascii=False).encode()


def decode_consumer_offsets(data: bytes, *, file: str = "<bytes>") -> dict[str, int]:
    """Parse a consumer offsets file into ``{group: committed offset}``."""
    if len(data) > MAX_FILE_SIZE:
        raise FormatError(
            "consumer offsets file is too large",
            file=file,
            expected=f"at most {MAX_FILE_SIZE} bytes",
            found=f"{len(data)} bytes",
        )
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise FormatError(
            "consumer offsets file is not UTF-8",
            file=file,
            position=exc.start,
            expected="UTF-8 JSON",
        ) from exc
    depth = nesting_depth(data)
    if depth > 1:
        raise FormatError(
            "consumer offsets file nests too deeply", file=file, expected='a JSON object {"group": offset}',
            found=f"{depth} levels",
        )  # fmt: skip
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"consumer offsets file is not valid JSON ({exc.msg})",
            file=file,
            position=len(text[: exc.pos].encode()),
            expected='a JSON object {"group": offset}',
        ) from exc
    if not isinstance(parsed, dict):
        raise FormatError(
            "consumer offsets file is not a JSON object",
            file=file,
            position=0,
            expected='a JSON object {"group": offset}',
            found=type(parsed).__name__,
        )
    for group, offset in parsed.items():
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**63:
            raise FormatError(
                f"consumer group {group!r} has an invalid committed offset",
                file=file,
                expected="an integer offset >= 0",
                found=json.dumps(offset),
            )
    return parsed
