"""What spark-kafka-backup prints: words for counts ("1 segment", "2 segments") and names shown safely.

Names come from places spark-kafka-backup does not control: a consumer group id is any string, a backup's directory may
be named by anyone with write access to it. Text output and log lines show every control character of a name as a
visible escape (``\\x1b``, ``\\x0a``; ``\\u2028`` above U+00FF), along with the line separators and the
bidirectional overrides of Unicode, so no terminal sequence runs and no row of tab-separated output is forged.
JSON output escapes them itself and is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

# C0 and C1 controls, DEL, and what shows nothing or reorders what follows: the soft hyphen, zero-width
# characters, the line and paragraph separators, bidirectional marks, embeddings and isolates, the BOM.
_UNSAFE = "\x00-\x1f\x7f-\x9f\xad\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_IN_NAME = re.compile(f"[{_UNSAFE}]")
_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# Inside a JSON document only characters JSON leaves raw are unsafe (C0 is always escaped by the encoder).
_IN_JSON = re.compile("[\x7f-\x9f\xad\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(name: object) -> str:
    """``name`` with every control character (newline and tab too) as a visible escape: one field, one line."""
    return _IN_NAME.sub(_escape, str(name))


def shown_text(text: str) -> str:
    """``text`` with control characters escaped, keeping its newlines and tabs (lines and columns it was built
    with; the names in it went through :func:`shown`)."""
    return _IN_TEXT.sub(_escape, text)


def shown_json(text: str) -> str:
    """A JSON text with the characters an encoder leaves raw (DEL, C1, Unicode separators and overrides) as
    ``\\u`` escapes: the same document, nothing a terminal acts on."""
    return _IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


class TerminalText:
    """A text stream that writes what it is given through ``escape`` (:func:`shown_text` for the CLI's text output,
    :func:`shown_json` for its JSON)."""

    def __init__(self, stream: TextIO, escape: Callable[[str], str] = shown_text) -> None:
        self._stream = stream
        self._escape = escape

    def write(self, text: str) -> int:
        self._stream.write(self._escape(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun`` in the right number (``plural`` when adding an "s" is wrong)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def iso_time(epoch_ms: int) -> str:
    """An epoch millisecond as ISO 8601 UTC, ``2026-11-26T06:23:13.000Z`` (negative ones too: before 1970)."""
    seconds, millis = divmod(epoch_ms, 1000)
    try:
        moment = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"epoch ms {epoch_ms}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis:03d}Z"
