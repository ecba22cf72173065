"""The options of the ``kbackup`` data source, read into typed settings (pure: no Spark, no files).

``spark.read.format("kbackup").option(NAME, VALUE).load(ROOT)``; Spark hands option names over in lower case, and
every value is text. An unknown option, or a value of the wrong shape, is one error naming it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_kafka_backup.argtypes import byte_count, parse_time
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.partition.selection import Window

#: Option names as documented (Spark gives them in lower case) and what each takes.
OPTIONS = {
    "path": "the backup root (load's argument): a directory or s3://, gs:// or az:// prefix",
    "topics": "topics to read, comma-separated (default: all)",
    "partitions": "partitions to read, comma-separated (default: all)",
    "fromOffset": "first offset to read, in every partition read",
    "toOffset": "last offset to read (inclusive)",
    "fromTimestamp": "only records at or after this time (ISO 8601 or epoch ms)",
    "toTimestamp": "only records at or before this time (ISO 8601 or epoch ms)",
    "encryptionKeyFile": "key files of encrypted segments, comma-separated (read where the tasks run)",
    "encryptionKeyEnv": "environment variables holding keys of encrypted segments, comma-separated",
    "verify": "check segments against the catalog's checksums before reading them (default true)",
    "skipBadSegments": "leave out damaged segments instead of failing (default false)",
    "allowUnauthenticated": "with keys: read segments no seal vouches for (default false)",
    "legacyNoMagic": "files written before the v1 magic byte existed (default false)",
    "maxBytesPerTask": "whole segments per task up to this many stored bytes (default 128M)",
    "logPlan": "say on standard error how many segments each plan reads of how many (default true)",
    "columns": "the columns a query reads, comma-separated (default all): key, value, headers and the two times not "
    "named are null",
}
#: Every column of the rows.
ROW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
_BY_LOWER = {name.lower(): name for name in OPTIONS}
#: The jobs' flags the library's errors name, and the option of the data source that does the same.
_FLAG_OPTIONS = {
    "--encryption-key-file": "encryptionKeyFile",
    "--encryption-key-env": "encryptionKeyEnv",
    "--skip-bad-segments": "skipBadSegments",
    "--allow-unauthenticated": "allowUnauthenticated",
    "--legacy-no-magic": "legacyNoMagic",
}
_FLAG_WORD = re.compile("|".join(re.escape(flag) + r"(?![\w-])" for flag in _FLAG_OPTIONS))
_BOOLEANS = {"true": True, "false": False}

DEFAULT_TASK_BYTES = 128 << 20


@dataclass(frozen=True)
class ScanOptions:
    root: str
    topics: tuple[str, ...] | None = None
    partitions: frozenset[int] | None = None
    window: Window = field(default_factory=Window)
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    verify: bool = True
    skip_bad_segments: bool = False
    allow_unauthenticated: bool = False
    legacy: bool = False
    task_bytes: int = DEFAULT_TASK_BYTES
    log_plan: bool = True
    #: The columns filled (``None``: all); the others are null.
    columns: frozenset[str] | None = None


def scan_options(given: Mapping[str, str]) -> ScanOptions:
    """The settings ``given`` (the data source's options) name; one :class:`UsageError` for the first wrong one."""
    options: dict[str, str] = {}
    for key, value in given.items():
        if key.lower() == "paths":
            raise UsageError("kbackup data source: one backup root per read: load(ROOT), not several paths")
        name = _BY_LOWER.get(key.lower())
        if name is None:
            raise UsageError(f"kbackup data source: unknown option {key!r} (options: {', '.join(sorted(OPTIONS))})")
        options[name] = value
    root = options.get("path", "").strip()
    if not root:
        raise UsageError(
            "kbackup data source: no backup root: spark.read.format('kbackup').load('/backups/prod') "
            "(a directory or an s3://, gs:// or az:// prefix)"
        )
    window = Window(
        _offset(options, "fromOffset"),
        _offset(options, "toOffset"),
        _time(options, "fromTimestamp"),
        _time(options, "toTimestamp"),
    )
    if window.from_offset is not None and window.to_offset is not None and window.from_offset > window.to_offset:
        raise UsageError("kbackup data source: option fromOffset is above toOffset")
    if window.from_time is not None and window.to_time is not None and window.from_time > window.to_time:
        raise UsageError("kbackup data source: option fromTimestamp is after toTimestamp")
    keys: tuple[tuple[str | None, str | None], ...] = tuple(
        (file, None) for file in _listed(options, "encryptionKeyFile")
    )
    keys += tuple((None, env) for env in _listed(options, "encryptionKeyEnv"))
    topics = _listed(options, "topics")
    return ScanOptions(
        root=root,
        topics=tuple(dict.fromkeys(topics)) if topics else None,
        partitions=frozenset(_partition(text) for text in _listed(options, "partitions")) or None,
        window=window,
        key_sources=keys,
        verify=_flag(options, "verify", True),
        skip_bad_segments=_flag(options, "skipBadSegments", False),
        allow_unauthenticated=_flag(options, "allowUnauthenticated", False),
        legacy=_flag(options, "legacyNoMagic", False),
        task_bytes=_bytes(options.get("maxBytesPerTask")),
        log_plan=_flag(options, "logPlan", True),
        columns=_columns(options),
    )


def in_option_words(text: str) -> str:
    """An error's text with each of the jobs' flags it names replaced by the option of the data source that does the
    same (``--encryption-key-file FILE`` -> ``option encryptionKeyFile FILE``)."""
    return _FLAG_WORD.sub(lambda found: "option " + _FLAG_OPTIONS[found.group(0)], text)


def in_flag_words(text: str) -> str:
    """The inverse of :func:`in_option_words`: a data source's error in the words of a job that read through it."""
    for flag, option in _FLAG_OPTIONS.items():
        text = re.sub(rf"(?:(?:the )?option )?\b{option}\b", flag, text)
    return text


def _listed(options: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in options.get(name, "").split(",") if item.strip()]


def _partition(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise UsageError(f"kbackup data source: option partitions takes partition numbers, not {text!r}")
    return int(text)


def _offset(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    if not (text.strip().isascii() and text.strip().isdigit()):
        raise UsageError(f"kbackup data source: option {name} takes an offset (a whole number >= 0), not {text!r}")
    return int(text)


def _time(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    return None if text is None else parse_time(text, f"kbackup data source: option {name}")


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in _BOOLEANS:
        raise UsageError(f"kbackup data source: option {name} takes true or false, not {text!r}")
    return _BOOLEANS[text.strip().lower()]


def _columns(options: Mapping[str, str]) -> frozenset[str] | None:
    if "columns" not in options:
        return None
    named = _listed(options, "columns")
    unknown = [name for name in named if name not in ROW_COLUMNS]
    if unknown:
        raise UsageError(
            f"kbackup data source: option columns names {', '.join(map(repr, unknown))}, not a column of the rows "
            f"({', '.join(ROW_COLUMNS)})"
        )
    return frozenset(named)


def _bytes(text: str | None) -> int:
    if text is None:
        return DEFAULT_TASK_BYTES
    try:
        return byte_count(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"kbackup data source: option maxBytesPerTask: {exc}") from exc
