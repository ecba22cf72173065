"""The one-byte version marker that opens every v1 binary file.

Records files, segment indexes and partition indexes all start with ``0x01``.
Files from before mid 2019 have no marker: their first byte is the high byte
of an int64 offset or an int32 length, which is ``0x00`` in practice. spark-kafka-backup
refuses them unless the caller asks for the legacy reading explicitly.
"""

from __future__ import annotations

from spark_kafka_backup.errors import MagicByteError

MAGIC_V1 = b"\x01"


def check_magic(head: bytes, *, file: str, legacy: bool = False) -> int:
    """Return where the content starts after the marker (1, or 0 for legacy files).

    ``head`` is the start of the file (at least its first byte when there is
    one). ``legacy`` accepts a file without the marker when its first byte is
    ``0x00``; an empty file is then an empty legacy file.
    """
    if head[:1] == MAGIC_V1:
        return 1
    if legacy and (not head or head[:1] == b"\x00"):
        return 0
    if not head:
        raise MagicByteError("file is empty", file=file, position=0, expected="magic byte 0x01", found="end of file")
    found = f"0x{head[0]:02x}"
    hint = ""
    if head[:1] == b"\x00":
        hint = " (a file from before the v1 magic byte; read it with --legacy-no-magic)"
    raise MagicByteError(
        "not a spark-kafka-backup v1 file" + hint,
        file=file,
        position=0,
        expected="magic byte 0x01",
        found=found,
    )
