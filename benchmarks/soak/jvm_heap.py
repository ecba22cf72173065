"""A running JVM's heap, read from its performance-data file (``/tmp/hsperfdata_USER/PID``) as ``jstat`` reads it,
without starting a JVM per sample.

The file is a memory map the JVM keeps current (``-XX:+UsePerfData``, on by default). Layout (version 2, byte order
from the prologue):

    prologue  magic u4 (0xcafec0c0, big-endian) | byte_order u1 (0 big, 1 little) | major u1 | minor u1 |
              accessible u1 | used i4 | overflow i4 | mod_time i8 | entry_offset i4 | num_entries i4
    entry     entry_length i4 | name_offset i4 | vector_length i4 | data_type u1 ('J' long, 'B' byte) | flags u1 |
              data_units u1 | data_variability u1 | data_offset i4     (offsets from the entry's start; name NUL-ended)

The soak uses it to tell a JVM whose resident set grows because its heap is still expanding toward ``-Xmx`` from one
whose live data grows: the old generation's *used* bytes (``sun.gc.generation.1.space.0.used``: what survived young
collections, until an old or mixed collection frees it) and heap *committed* (the generations' ``capacity``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

_MAGIC = 0xCAFEC0C0
_PROLOGUE = struct.Struct("=IBBBBiiqii")
_ENTRY = {order: struct.Struct(f"{order}iiiBBBBi") for order in "<>"}
_LONG = {order: struct.Struct(f"{order}q") for order in "<>"}
_MAX_ENTRIES = 100_000
#: A JVM's performance data is 32 KiB by default (``-XX:PerfDataMemorySize``); anything beyond 1 MiB is not read.
_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Heap:
    """MiB: heap used (every space), old generation used, heap committed (every generation's capacity)."""

    used_mib: float
    old_mib: float
    committed_mib: float


def _read_regular(path: Path) -> bytes:
    """At most :data:`_MAX_BYTES` of a regular file (never a FIFO, a device or through a symbolic link)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, _MAX_BYTES)
    finally:
        os.close(fd)


def counters(path: Path) -> dict[str, int]:
    """Every long counter of a performance-data file, by name; empty when it cannot be read or is not one (a
    damaged one gives what was read before the damage)."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError, struct.error):
        data = _read_regular(path)
        if len(data) < _PROLOGUE.size or int.from_bytes(data[:4], "big") != _MAGIC:
            return {}
        order = "<" if data[4] == 1 else ">"
        _, _, _, _, _, _, _, _, entry_at, entries = struct.unpack(order + _PROLOGUE.format[1:], data[: _PROLOGUE.size])
        for _ in range(min(entries, _MAX_ENTRIES)):
            if entry_at < _PROLOGUE.size or entry_at + _ENTRY[order].size > len(data):
                break
            length, name_at, vector, kind, _, _, _, data_at = _ENTRY[order].unpack_from(data, entry_at)
            # Offsets point inside the entry, past its header; an entry is at least its header long.
            if length < _ENTRY[order].size or not (_ENTRY[order].size <= name_at < length):
                break
            name_end = data.find(b"\0", entry_at + name_at, entry_at + length)
            value_at = entry_at + data_at
            if kind == ord("J") and vector == 0 and name_end > 0 and data_at >= name_at and value_at + 8 <= len(data):
                name = data[entry_at + name_at : name_end].decode(errors="replace")
                found[name] = _LONG[order].unpack_from(data, value_at)[0]
            entry_at += length
    return found


def heap(pid: int) -> Heap | None:
    """The heap of the JVM ``pid`` (None: not a JVM, gone, or its performance data is off or elsewhere). Read from
    the performance-data directory of the user the process runs as, only."""
    try:
        user = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        return None
    found = counters(Path("/tmp") / f"hsperfdata_{user}" / str(pid))
    if not found:
        return None
    used = sum(v for k, v in found.items() if k.startswith("sun.gc.generation.") and k.endswith(".used")
               and ".space." in k)  # fmt: skip
    committed = sum(v for k, v in found.items() if k.startswith("sun.gc.generation.") and k.count(".") == 4
                    and k.endswith(".capacity"))  # fmt: skip
    old = found.get("sun.gc.generation.1.space.0.used", 0)
    return Heap(used / 2**20, old / 2**20, committed / 2**20)


def is_jvm(pid: int) -> bool:
    """Whether ``pid`` runs a ``java`` executable."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        return False
