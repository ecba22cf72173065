"""Codec for a compressed records file: a v1 records file cut into independently compressed frames.

A finished segment's records file may be stored compressed under its own
name (``--compression``, issue 18). Its *content* stays the exact bytes of
the plain v1 records file, magic byte included, so the segment index keeps
its positions: a reader maps a position to its frame, decompresses that one
frame and takes the bytes from it. Reading from an offset is a seek plus one
frame, never the whole file.

Byte layout (integers big-endian)::

    header (16 bytes)
      magic            4 bytes  0x8B 'K' 'B' 'Z'  (never 0x01: the original tool refuses the file
                                                   instead of misreading it)
      version          uint8    1
      codec            uint8    0 none (encrypted only), 1 zstd, 2 lz4 (LZ4 frame format), 3 gzip
      flags            uint16   bit 0: encrypted (the other bits 0)
      frame size       uint32   uncompressed bytes per frame (the last frame may hold fewer)
      reserved         uint32   0
    encryption block   80 bytes, only when encrypted (spark_kafka_backup/format/encryption.py)
    frames             each frame's compressed (then, encrypted, sealed) bytes, one after the other
    frame table, per frame (12 bytes):
      stored length    uint32   its compressed bytes
      plain length     uint32   its uncompressed bytes
      plain crc32c     uint32   CRC32C of its uncompressed bytes
    trailer (24 bytes)
      frames           uint32   entries in the frame table
      plain size       uint64   the uncompressed file's size (sum of the plain lengths)
      table crc32c     uint32   CRC32C of the frame table
      magic            4 bytes  'K' 'B' 'Z' 0x8B
      version          uint8    1
      reserved         3 bytes  0

A frame's stored position is 16 (96 when encrypted) plus the stored lengths before it; its plain
position is the plain lengths before it. Every frame but the last holds
exactly ``frame size`` plain bytes. The file's size must be 16 + the stored
lengths + 12 per frame + 24; anything else is a :class:`FormatError` naming
the file and byte, before any large allocation (lengths are checked against
the file's size and the frame size first).

This module works on bytes and a ``pread(length, position)`` function; it never opens a path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import crc32c
import numpy as np

from spark_kafka_backup.errors import FormatError, TruncatedError
from spark_kafka_backup.format.encryption import BLOCK_SIZE, KEY_ID_SIZE, FileCipher, KeyRing

MAGIC = b"\x8bKBZ"
END_MAGIC = b"KBZ\x8b"
VERSION = 1
HEADER = struct.Struct(">4sBBHII")
FRAME_ENTRY = struct.Struct(">III")
TRAILER = struct.Struct(">IQI4sB3s")

#: Codec numbers in the header, by the name ``--compression`` takes.
CODECS = {"none": 0, "zstd": 1, "lz4": 2, "gzip": 3}
ENCRYPTED = 0x0001
CODEC_NAMES = {number: name for name, number in CODECS.items()}

#: Compression levels: those of the command-line tools' defaults (``zstd -3``, ``gzip -6``; lz4's default).
LEVELS: dict[str, int | None] = {"none": None, "zstd": 3, "lz4": None, "gzip": 6}

#: Plain bytes per frame by default: a read from an offset decompresses at most this much.
DEFAULT_FRAME_SIZE = 1 << 20
#: The largest frame size a file may declare (a corrupt header must not make a reader allocate more).
MAX_FRAME_SIZE = 64 << 20


def is_framed(head: bytes) -> bool:
    """Whether a file starting with ``head`` (at least 4 bytes) is a compressed records file."""
    return head[:4] == MAGIC


class _Stored:
    """The codec ``none``: frames stored as they are (an encrypted file without compression)."""

    def compress(self, data: bytes, asbytes: bool = True) -> bytes:
        return data

    def decompress(self, data: bytes, decompressed_size: int = 0, asbytes: bool = True) -> bytes:
        return data


def _codec(name: str, level: int | None = None) -> object:
    import pyarrow as pa

    if name == "none":
        return _Stored()
    return pa.Codec(name, compression_level=level) if level is not None else pa.Codec(name)


def compress_frames(
    chunks: Iterable[bytes],
    codec: str,
    *,
    frame_size: int = DEFAULT_FRAME_SIZE,
    level: int | None = None,
    cipher: FileCipher | None = None,
) -> Iterator[bytes]:
    """The compressed file, in pieces, of the plain bytes ``chunks`` (any sizes) cut into frames of ``frame_size``;
    each frame sealed with ``cipher`` when given (see :mod:`spark_kafka_backup.format.encryption`)."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    if not 0 < frame_size <= MAX_FRAME_SIZE:
        raise ValueError(f"frame size {frame_size} is outside 1..{MAX_FRAME_SIZE}")
    if codec == "none" and cipher is None:
        raise ValueError("the codec none is for encrypted files only")
    compressor = _codec(codec, level if level is not None else LEVELS[codec])
    header = HEADER.pack(MAGIC, VERSION, CODECS[codec], ENCRYPTED if cipher else 0, frame_size, 0)
    yield header
    if cipher is not None:
        yield cipher.block
    table = bytearray()
    frames = 0
    plain_size = 0
    pending = bytearray()

    def frame(plain: bytes, last: bool) -> bytes:
        nonlocal frames, plain_size
        stored: bytes = compressor.compress(plain, asbytes=True)  # type: ignore[attr-defined]
        if cipher is not None:
            stored = cipher.seal(header, frames, last, stored)
        # Encrypted: no checksum of the plain bytes in the clear (it would let anyone test guesses of a frame's
        # content); the frame's authentication tag checks it instead.
        table.extend(FRAME_ENTRY.pack(len(stored), len(plain), 0 if cipher is not None else crc32c.crc32c(plain)))
        frames += 1
        plain_size += len(plain)
        return stored

    # A full frame is held back until more bytes follow: the last frame is sealed as the last.
    for chunk in chunks:
        pending += chunk
        while len(pending) > frame_size:
            yield frame(bytes(pending[:frame_size]), last=False)
            del pending[:frame_size]
    yield frame(bytes(pending), last=True)
    yield bytes(table)
    yield TRAILER.pack(frames, plain_size, crc32c.crc32c(table), END_MAGIC, VERSION, b"\0\0\0")


@dataclass(frozen=True)
class FrameTable:
    """Where each frame lives, in both files."""

    codec: str
    frame_size: int
    plain_size: int
    #: The file's first 16 bytes, and its encryption block (``None``: not encrypted).
    header: bytes
    encryption: bytes | None
    stored_starts: np.ndarray  # int64, one per frame
    stored_lengths: np.ndarray
    plain_starts: np.ndarray
    plain_lengths: np.ndarray
    crcs: np.ndarray

    @property
    def frames(self) -> int:
        return len(self.plain_starts)


def read_frame_table(pread: Callable[[int, int], bytes], size: int, *, file: str) -> FrameTable:
    """Check a compressed file's header, trailer and frame table (three small reads) and return the table."""
    minimum = HEADER.size + TRAILER.size
    if size < minimum:
        raise TruncatedError(f"a compressed records file is at least {minimum} bytes", file=file, position=0,
                             found=f"{size} bytes")  # fmt: skip
    header = pread(HEADER.size, 0)
    magic, version, codec, flags, frame_size, _ = HEADER.unpack(header)
    if magic != MAGIC:
        raise FormatError("not a compressed records file", file=file, position=0, expected=MAGIC.hex(),
                          found=magic.hex())  # fmt: skip
    if version != VERSION:
        raise FormatError("unknown compressed records version", file=file, position=4, expected=str(VERSION),
                          found=str(version))  # fmt: skip
    if codec not in CODEC_NAMES:
        raise FormatError("unknown compression codec", file=file, position=5,
                          expected=" or ".join(f"{n} ({name})" for n, name in CODEC_NAMES.items()),
                          found=str(codec))  # fmt: skip
    if not 0 < frame_size <= MAX_FRAME_SIZE:
        raise FormatError("implausible frame size", file=file, position=8, expected=f"1..{MAX_FRAME_SIZE}",
                          found=str(frame_size))  # fmt: skip
    if flags & ~ENCRYPTED or (codec == CODECS["none"] and not flags & ENCRYPTED):
        raise FormatError("unknown flags, or no codec without encryption", file=file, position=6,
                          expected="flags 0 or 1 (encrypted), codec none only when encrypted",
                          found=f"flags {flags}, codec {codec}")  # fmt: skip
    first = HEADER.size + (BLOCK_SIZE if flags & ENCRYPTED else 0)
    if size < first + TRAILER.size:
        raise TruncatedError("the file ends inside its encryption block", file=file, position=HEADER.size,
                             found=f"{size} bytes")  # fmt: skip
    encryption = pread(BLOCK_SIZE, HEADER.size) if flags & ENCRYPTED else None
    at = size - TRAILER.size
    frames, plain_size, table_crc, end, end_version, _ = TRAILER.unpack(pread(TRAILER.size, at))
    if end != END_MAGIC or end_version != VERSION:
        raise FormatError("the trailer is damaged or the file is cut short", file=file, position=at + 16,
                          expected=END_MAGIC.hex(), found=end.hex())  # fmt: skip
    table_at = at - frames * FRAME_ENTRY.size
    if frames == 0 or table_at < first:
        fits = (at - first) // FRAME_ENTRY.size
        raise FormatError("the frame count does not fit the file", file=file, position=at,
                          expected=f"1..{fits} frames", found=str(frames))  # fmt: skip
    table = pread(frames * FRAME_ENTRY.size, table_at)
    if crc32c.crc32c(table) != table_crc:
        raise FormatError("the frame table does not match its checksum", file=file, position=table_at)
    entries = np.frombuffer(table, dtype=">u4").reshape(frames, 3).astype(np.int64)
    stored_lengths, plain_lengths, crcs = entries[:, 0], entries[:, 1], entries[:, 2]
    stored_starts = first + np.concatenate(([0], np.cumsum(stored_lengths)[:-1]))
    plain_starts = np.concatenate(([0], np.cumsum(plain_lengths)[:-1]))
    if int(stored_lengths.sum()) != table_at - first:
        raise FormatError("the frames do not fill the file up to the frame table", file=file, position=table_at,
                          expected=f"{table_at - first} bytes of frames",
                          found=f"{int(stored_lengths.sum())}")  # fmt: skip
    if (
        int(plain_lengths.sum()) != plain_size
        or bool((plain_lengths[:-1] != frame_size).any())
        or int(plain_lengths[-1]) > frame_size
    ):
        raise FormatError("the frame table's plain lengths are inconsistent", file=file, position=table_at,
                          expected=f"frames of {frame_size} bytes summing to {plain_size}")  # fmt: skip
    return FrameTable(CODEC_NAMES[codec], frame_size, plain_size, header, encryption, stored_starts, stored_lengths,
                      plain_starts, plain_lengths, crcs)  # fmt: skip


class FramedReader:
    """The plain bytes of a compressed records file, by position: ``pread`` decompresses only the frames it needs.

    Holds the last frame it decompressed (reads from one offset onwards stay within one frame at a time).
    """

    def __init__(
        self, pread: Callable[[int, int], bytes], size: int, *, file: str, keys: KeyRing | None = None
    ) -> None:
        """``keys``: the key-encryption keys an encrypted file may need; asked for at the first frame read (sizes
        and the frame table are readable without them)."""
        self._pread = pread
        self.file = file
        self.table = read_frame_table(pread, size, file=file)
        self._codec = _codec(self.table.codec)
        self._keys = keys or KeyRing({})
        self._cipher: FileCipher | None = None
        self._cached: tuple[int, bytes] | None = None

    @property
    def key_id(self) -> str | None:
        """The id (hex) of the key-encryption key an encrypted file needs, ``None`` when not encrypted."""
        block = self.table.encryption
        return block[:KEY_ID_SIZE].hex() if block is not None else None

    @property
    def size(self) -> int:
        return self.table.plain_size

    def frame(self, number: int) -> bytes:
        """Frame ``number``'s plain bytes, checked against its CRC32C."""
        if self._cached is not None and self._cached[0] == number:
            return self._cached[1]
        table = self.table
        start, length = int(table.stored_starts[number]), int(table.stored_lengths[number])
        stored = self._pread(length, start)
        if table.encryption is not None:
            if self._cipher is None:
                self._cipher = FileCipher.open(table.encryption, self._keys, file=self.file)
            last = number == table.frames - 1
            stored = self._cipher.unseal(table.header, number, last, stored, file=self.file, position=start)
        expected = int(table.plain_lengths[number])
        try:
            plain: bytes = self._codec.decompress(stored, decompressed_size=expected, asbytes=True)  # type: ignore[attr-defined]
        except Exception as exc:  # the codec's own error: the frame is damaged
            raise FormatError(f"frame {number} does not decompress ({exc})", file=self.file, position=start) from exc
        crc = int(table.crcs[number])
        if len(plain) != expected or (table.encryption is None and crc32c.crc32c(plain) != crc):
            raise FormatError(f"frame {number} does not match its checksum", file=self.file, position=start,
                              expected=f"{expected} bytes with CRC32C {int(table.crcs[number]):08x}",
                              found=f"{len(plain)} bytes with CRC32C {crc32c.crc32c(plain):08x}")  # fmt: skip
        self._cached = (number, plain)
        return plain

    def pread(self, length: int, position: int) -> bytes:
        """Up to ``length`` plain bytes from ``position`` (fewer at the end, like a file's pread)."""
        if position < 0:
            raise ValueError(f"negative position {position}")
        end = min(position + max(length, 0), self.size)
        if position >= end:
            return b""
        first = position // self.table.frame_size
        last = (end - 1) // self.table.frame_size
        parts = []
        for number in range(first, last + 1):
            plain = self.frame(number)
            base = number * self.table.frame_size
            parts.append(plain[max(position - base, 0) : end - base])
        return b"".join(parts)
