"""Argparse types: numbers above 0, byte counts, durations and umasks, each refused in one line that says what was
expected. Pure: the jobs, the commands and the connector properties all read numbers through these.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.fsutil import parse_umask


def umask(text: str) -> int:
    """An argparse type: an octal umask (see :func:`spark_kafka_backup.fsutil.parse_umask`)."""
    try:
        return parse_umask(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0."""
    return int(_above_zero(text, int, "a whole number"))


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_count(text: str) -> int:
    """An argparse type: a byte count above 0, optionally with a binary unit (``512K``, ``20M``, ``1G``)."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = cleaned[-1:] if cleaned[-1:] in _BYTE_UNITS else ""
    digits = cleaned[: len(cleaned) - len(unit)]
    value = int(digits) * _BYTE_UNITS[unit] if digits.isascii() and digits.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a byte count > 0 such as 1048576, 512K, 20M or 1G, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    return _above_zero(text, float, "a number")


def _above_zero(text: str, parse: Callable[[str], float], what: str) -> float:
    try:
        value = parse(text)
    except ValueError:
        value = 0
    if not 0 < value < math.inf:  # NaN and infinity are not numbers a setting can take
        raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}")
    return value


def duration_ms(text: str) -> int:
    """An argparse type: a duration (``7d``, ``12h``, ``30m``, ``90s``, ``500ms``) in milliseconds."""
    match = re.fullmatch(r"(\d+)\s*(ms|s|m|h|d|w)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 7d, 12h, 30m, 90s, not {text!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}[match[2]]
    return int(match[1]) * unit


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def positive_count(text: str) -> int:
    """An argparse type: a whole number above 0 (the commands' wording)."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number > 0, got 0")
    return value


def parse_time(text: str, flag: str) -> int:
    """Epoch milliseconds from digits, or from ISO 8601 (UTC when no zone is given)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"{flag} takes ISO 8601 (2026-11-22T08:00:00Z) or epoch milliseconds, not {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
