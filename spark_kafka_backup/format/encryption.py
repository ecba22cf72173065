"""AES-256-GCM encryption of a compressed records file's frames (``formats/compressed-records.md``).

Each encrypted file has its own random 256-bit **data key**; the file's
encryption block (after the 16-byte header) holds it wrapped by the user's
256-bit **key-encryption key** (KEK)::

    key id        16 bytes  SHA-256("kbackup-kek-v1" || KEK)[:16]: names the KEK without revealing it
    wrap nonce    12 bytes  random
    wrapped key   48 bytes  AES-256-GCM(KEK, wrap nonce, data key, aad = "kbackup-dek-v1" || key id)
    nonce prefix   4 bytes  random; frame n's nonce is this prefix || uint64 n (big-endian)

Frame n is stored as AES-256-GCM(data key, nonce, compressed frame, aad)
with ``aad = header || encryption block || uint64 n || uint8 last`` (last
is 1 for the file's final frame): a changed byte anywhere in a frame, frames
swapped, or frames cut off the end fail authentication. The frame table's
stored length includes the 16-byte tag.

Nothing here is hand-made cryptography: AES-GCM is the ``cryptography``
package's; this module only lays out bytes and names the keys.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spark_kafka_backup.errors import DecryptionKeyError, FormatError

KEY_SIZE = 32
KEY_ID_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
PREFIX_SIZE = 4
BLOCK_SIZE = KEY_ID_SIZE + NONCE_SIZE + KEY_SIZE + TAG_SIZE + PREFIX_SIZE  # 80
_DEK_AAD = b"kbackup-dek-v1"
_FRAME = struct.Struct(">QB")


_MAC_INFO = b"kbackup-seal-record-v1"


def record_mac(kek: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 of ``body`` under a key derived from ``kek`` (HKDF-SHA256, info ``kbackup-seal-record-v1``):
    what authenticates a partition's seal record (``formats/catalog.md``). The KEK itself never keys anything
    but the wrapping of data keys."""
    import hmac

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    mac_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_MAC_INFO).derive(kek)
    return hmac.new(mac_key, body, hashlib.sha256).digest()


def key_id(kek: bytes) -> bytes:
    """The 16 bytes that name a key-encryption key in files and the catalog."""
    return hashlib.sha256(b"kbackup-kek-v1" + kek).digest()[:KEY_ID_SIZE]


@dataclass(frozen=True)
class KeyRing:
    """Key-encryption keys by key id (picklable: a restore task carries the ones it needs)."""

    keys: Mapping[bytes, bytes] = field(repr=False)

    def __repr__(self) -> str:
        return f"KeyRing(ids={self.describe()})"

    @classmethod
    def of(cls, keks: Iterable[bytes]) -> KeyRing:
        found = {}
        for kek in keks:
            if len(kek) != KEY_SIZE:
                raise ValueError(f"a key-encryption key is {KEY_SIZE} bytes, not {len(kek)}")
            found[key_id(kek)] = kek
        return cls(found)

    def describe(self) -> str:
        return ", ".join(sorted(k.hex() for k in self.keys)) or "none"


class FileCipher:
    """The data key of one file: seals frames when writing, opens them when reading."""

    def __init__(self, dek: bytes, block: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(dek)
        self.block = block
        self.key_id = block[:KEY_ID_SIZE]
        self._prefix = block[-PREFIX_SIZE:]

    @classmethod
    def new(cls, kek: bytes) -> FileCipher:
        """A fresh data key for a new file, wrapped by ``kek``."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        dek = os.urandom(KEY_SIZE)
        nonce = os.urandom(NONCE_SIZE)
        identity = key_id(kek)
        wrapped = AESGCM(kek).encrypt(nonce, dek, _DEK_AAD + identity)
        return cls(dek, identity + nonce + wrapped + os.urandom(PREFIX_SIZE))

    @classmethod
    def open(cls, block: bytes, keys: KeyRing, *, file: str) -> FileCipher:
        """The data key of a file from its encryption block; :class:`DecryptionKeyError` without the right KEK."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        identity = block[:KEY_ID_SIZE]
        kek = keys.keys.get(identity)
        if kek is None:
            given = f"the key(s) given have id(s) {keys.describe()}" if keys.keys else "no key was given"
            raise DecryptionKeyError(
                f"{file} is encrypted with key id {identity.hex()}; {given} "
                "(--encryption-key-file FILE or --encryption-key-env VAR)"
            )
        nonce = block[KEY_ID_SIZE : KEY_ID_SIZE + NONCE_SIZE]
        wrapped = block[KEY_ID_SIZE + NONCE_SIZE : -PREFIX_SIZE]
        try:
            dek = AESGCM(kek).decrypt(nonce, wrapped, _DEK_AAD + identity)
        except InvalidTag as exc:
            raise FormatError("the wrapped data key fails authentication (the file was changed)", file=file,
                              position=16 + KEY_ID_SIZE) from exc  # fmt: skip
        return cls(dek, block)

    def _nonce(self, number: int) -> bytes:
        return self._prefix + number.to_bytes(8, "big")

    def seal(self, header: bytes, number: int, last: bool, data: bytes) -> bytes:
        return self._aead.encrypt(self._nonce(number), data, header + self.block + _FRAME.pack(number, last))

    def unseal(self, header: bytes, number: int, last: bool, data: bytes, *, file: str, position: int) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(self._nonce(number), data, header + self.block + _FRAME.pack(number, last))
        except InvalidTag as exc:
            raise FormatError(f"frame {number} fails authentication (changed, damaged or moved)", file=file,
                              position=position) from exc  # fmt: skip


def parse_key(data: bytes, *, source: str) -> bytes:
    """A 256-bit key from a key file's or variable's content: 32 raw bytes, 64 hex digits or base64 of 32 bytes.

    32 bytes that are all printable text (a passphrase, a shorter key in hex) are refused, not taken as a raw key:
    a random raw key is printable text with negligible probability.
    """
    import base64
    import binascii

    text = data.strip()
    if len(data) == KEY_SIZE and not (data.isascii() and data.decode("ascii").isprintable()):
        return data
    try:
        if len(text) == 2 * KEY_SIZE:
            return bytes.fromhex(text.decode("ascii"))
        decoded = base64.b64decode(text, validate=True)
        if len(decoded) == KEY_SIZE:
            return decoded
    except (ValueError, binascii.Error, UnicodeDecodeError):
        pass
    raise DecryptionKeyError(
        f"{source} does not hold a 256-bit key: expected 32 bytes, 64 hex digits or base64 of 32 bytes "
        "(make one with: openssl rand -hex 32)"
    )
