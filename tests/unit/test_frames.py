"""The compressed records file codec (spark_kafka_backup/format/frames.py): pure bytes, no files."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.frames import (
    CODECS,
    FRAME_ENTRY,
    HEADER,
    TRAILER,
    FramedReader,
    compress_frames,
    is_framed,
)


def _plain(size: int) -> bytes:
    """A v1-like records file: the magic byte, then JSON-ish values that compress, then random bytes that do not."""
    text = b"".join(b'{"order": %d, "status": "shipped", "items": [1, 2, 3]}' % i for i in range(size // 60 + 1))
    return b"\x01" + (text[: size // 2] + os.urandom(size - size // 2))[: size - 1]


def _reader(data: bytes) -> FramedReader:
    return FramedReader(lambda length, position: data[position : position + length], len(data), file="seg_records")


@pytest.mark.parametrize("codec", sorted(set(CODECS) - {"none"}))
def test_every_codec_round_trips_and_reads_any_range(codec: str) -> None:
    plain = _plain(300_000)
    stored = b"".join(compress_frames([plain[:1000], plain[1000:]], codec, frame_size=64 << 10))
    assert is_framed(stored) and not is_framed(plain)
    reader = _reader(stored)
    assert reader.size == len(plain) and reader.table.frames == 5 and reader.table.codec == codec
    assert reader.pread(len(plain), 0) == plain
    for position, length in ((0, 1), (65_535, 2), (100_000, 200_000), (299_999, 10), (300_000, 5)):
        assert reader.pread(length, position) == plain[position : position + length]


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 5000),
    frame=st.integers(1, 700),
    reads=st.lists(st.tuples(st.integers(0, 5100), st.integers(0, 900))),
)
def test_reads_equal_the_plain_bytes(size: int, frame: int, reads: list[tuple[int, int]]) -> None:
    plain = bytes(range(256)) * (size // 256) + bytes(size % 256)
    reader = _reader(b"".join(compress_frames([plain], "lz4", frame_size=frame)))
    for position, length in reads:
        assert reader.pread(length, position) == plain[position : position + length]


def test_a_flipped_bit_in_a_frame_names_the_frame_and_its_byte() -> None:
    stored = bytearray(b"".join(compress_frames([_plain(200_000)], "zstd", frame_size=50_000)))
    reader = _reader(bytes(stored))
    second = int(reader.table.stored_starts[1])
    stored[second + 20] ^= 0x10
    damaged = _reader(bytes(stored))
    assert damaged.pread(10, 0) == reader.pread(10, 0)  # the other frames still read
    with pytest.raises(FormatError, match=rf"seg_records at byte {second}: frame 1 "):
        damaged.pread(10, 60_000)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:30], "the trailer is damaged or the file is cut short|at least"),
        (lambda b: b[:-1], "the trailer is damaged or the file is cut short"),
        (lambda b: b[:4] + b"\x07" + b[5:], "unknown compressed records version"),
        (lambda b: b[:5] + b"\x09" + b[6:], "unknown compression codec: expected 0 \\(none\\) or 1 \\(zstd\\)"),
        (lambda b: b[:8] + struct.pack(">I", 1 << 31) + b[12:], "implausible frame size"),
        # A frame count of 4 billion: refused from the file's size, never allocated.
        (lambda b: b[: -TRAILER.size] + struct.pack(">I", 0xFFFFFFFF) + b[-TRAILER.size + 4 :],
         "the frame count does not fit the file"),
        (lambda b: b[:-TRAILER.size - FRAME_ENTRY.size] + bytes(FRAME_ENTRY.size) + b[-TRAILER.size:],
         "the frame table does not match its checksum"),
        (lambda b: b"\x01" + b[1:], "not a compressed records file"),
    ],
)  # fmt: skip
def test_damaged_headers_trailers_and_tables_are_one_clear_error(damage: object, message: str) -> None:
    stored = b"".join(compress_frames([_plain(20_000)], "gzip", frame_size=8192))
    broken = damage(stored)  # type: ignore[operator]
    with pytest.raises(FormatError, match=message):
        _reader(broken)


def test_an_empty_plain_file_is_one_empty_frame_and_bad_arguments_are_refused() -> None:
    stored = b"".join(compress_frames([], "zstd"))
    assert len(stored) > HEADER.size + TRAILER.size and _reader(stored).pread(10, 0) == b""
    with pytest.raises(ValueError, match="unknown codec 'brotli'"):
        list(compress_frames([b"x"], "brotli"))
    with pytest.raises(ValueError, match="frame size 0"):
        list(compress_frames([b"x"], "zstd", frame_size=0))


def test_lz4_and_zstd_frames_are_the_standard_formats() -> None:
    """Each frame alone is a standard LZ4 frame / zstd frame (other tools can decode them)."""
    stored = b"".join(compress_frames([b"abc" * 1000], "lz4"))
    assert stored[HEADER.size : HEADER.size + 4] == bytes.fromhex("04224d18")
    stored = b"".join(compress_frames([b"abc" * 1000], "zstd"))
    assert stored[HEADER.size : HEADER.size + 4] == bytes.fromhex("28b52ffd")


# -- encrypted frames -----------------------------------------------------------------


KEK = bytes(range(32))
OTHER = bytes(range(1, 33))


def _sealed(plain: bytes, codec: str = "zstd", frame_size: int = 4096) -> bytes:
    from spark_kafka_backup.format.encryption import FileCipher

    return b"".join(compress_frames([plain], codec, frame_size=frame_size, cipher=FileCipher.new(KEK)))


def _open(data: bytes, *keys: bytes) -> FramedReader:
    from spark_kafka_backup.format.encryption import KeyRing

    return FramedReader(lambda n, at: data[at : at + n], len(data), file="seg_records", keys=KeyRing.of(keys))


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_encrypted_frames_round_trip_with_the_key_and_say_which_key_without_it(codec: str) -> None:
    from spark_kafka_backup.errors import DecryptionKeyError
    from spark_kafka_backup.format.encryption import key_id

    plain = _plain(20_000)
    sealed = _sealed(plain, codec)
    assert plain[1000:1100] not in sealed  # nothing readable
    assert _open(sealed, OTHER, KEK).pread(len(plain), 0) == plain
    reader = _open(sealed)
    assert reader.size == len(plain) and reader.key_id == key_id(KEK).hex()  # sizes need no key
    with pytest.raises(DecryptionKeyError, match=rf"seg_records is encrypted with key id {key_id(KEK).hex()}; no key"):
        reader.pread(1, 0)
    with pytest.raises(DecryptionKeyError, match=rf"the key\(s\) given have id\(s\) {key_id(OTHER).hex()}"):
        _open(sealed, OTHER).pread(1, 0)


def test_a_flipped_bit_swapped_frames_or_a_cut_file_fail_authentication() -> None:
    from spark_kafka_backup.format.frames import read_frame_table

    sealed = _sealed(_plain(20_000), frame_size=4096)
    table = read_frame_table(lambda n, at: sealed[at : at + n], len(sealed), file="f")
    starts, lengths = table.stored_starts, table.stored_lengths
    flipped = bytearray(sealed)
    flipped[int(starts[2]) + 5] ^= 1
    with pytest.raises(FormatError, match=rf"at byte {int(starts[2])}: frame 2 fails authentication"):
        _open(bytes(flipped), KEK).pread(10, 2 * 4096)
    assert _open(bytes(flipped), KEK).pread(10, 0) == _open(sealed, KEK).pread(10, 0)  # the others still read
    # Frames 0 and 1 swapped (the table swapped too, so that its checksum holds).
    a, b = (sealed[int(starts[i]) : int(starts[i] + lengths[i])] for i in (0, 1))
    entries = sealed[-TRAILER.size - table.frames * FRAME_ENTRY.size : -TRAILER.size]
    swapped_table = entries[12:24] + entries[:12] + entries[24:]
    body = sealed[: int(starts[0])] + b + a + sealed[int(starts[2]) : -TRAILER.size - len(entries)]
    import crc32c

    trailer = TRAILER.pack(table.frames, table.plain_size, crc32c.crc32c(swapped_table), b"KBZ\x8b", 1, b"\0\0\0")
    with pytest.raises(FormatError, match="frame 0 fails authentication"):
        _open(body + swapped_table + trailer, KEK).pread(10, 0)
    # Cut after frame 0 (table and trailer rewritten consistently): frame 0 was sealed as not the last.
    cut = sealed[: int(starts[1])] + entries[:12]
    cut += TRAILER.pack(1, 4096, crc32c.crc32c(entries[:12]), b"KBZ\x8b", 1, b"\0\0\0")
    with pytest.raises(FormatError, match="frame 0 fails authentication"):
        _open(cut, KEK).pread(10, 0)


def test_key_files_take_raw_hex_or_base64_keys() -> None:
    import base64

    from spark_kafka_backup.errors import DecryptionKeyError
    from spark_kafka_backup.format.encryption import parse_key

    assert parse_key(KEK, source="k") == KEK
    assert parse_key(KEK.hex().encode() + b"\n", source="k") == KEK
    assert parse_key(base64.b64encode(KEK) + b"\n", source="k") == KEK
    with pytest.raises(DecryptionKeyError, match=r"key\.txt does not hold a 256-bit key: expected 32 bytes"):
        parse_key(b"short", source="key.txt")
    for text in (b"correct horse battery staple 123", bytes(16).hex().encode()):  # 32 printable bytes: not a key
        assert len(text) == 32
        with pytest.raises(DecryptionKeyError, match="does not hold a 256-bit key"):
            parse_key(text, source="key.txt")
