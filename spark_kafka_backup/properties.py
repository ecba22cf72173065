"""Reading Java ``.properties`` files, the original tool's configuration format.

Supported: ``key=value``, ``key: value`` and ``key value`` lines; ``#`` and
``!`` comments; backslash line continuation; the escapes ``\\t \\n \\r \\f \\\\``
and escaped separators. (The original's own scripts write ``topics:NAME``.)
"""

from __future__ import annotations

from pathlib import Path

from spark_kafka_backup.errors import BackupNotFoundError, UsageError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a properties file into a dict (later keys win)."""
    return {key: value for key, (value, _) in parse_properties_with_lines(text).items()}


def parse_properties_with_lines(text: str) -> dict[str, tuple[str, int]]:
    """Each key's value and the (1-based) line where its entry starts; later keys win."""
    result: dict[str, tuple[str, int]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        start = i
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split(line)
        result[key] = (value, start)
    return result


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            key_chars.append(_ESCAPES.get(line[i + 1], line[i + 1]))
            i += 2
            continue
        if char in "=: \t\f":
            break
        key_chars.append(char)
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return "".join(key_chars), _unescape(rest)


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def read_properties(path: Path, *, what: str) -> dict[str, str]:
    """Read a properties file; a missing or unreadable file is a one-line error naming ``what``."""
    return {key: value for key, (value, _) in read_properties_with_lines(path, what=what).items()}


def read_properties_with_lines(path: Path, *, what: str) -> dict[str, tuple[str, int]]:
    """:func:`read_properties` with each key's line number, for errors that point into the file."""
    try:
        if path.is_dir():
            raise UsageError(f"{what} {path} is a directory, not a properties file")
        return parse_properties_with_lines(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackupNotFoundError(f"{what} {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {path}: {exc}") from exc
