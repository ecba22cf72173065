"""Words for counts in what kbackup prints: "1 segment", "2 segments", "0 records"."""

from __future__ import annotations


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun`` in the right number (``plural`` when adding an "s" is wrong)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
