"""Reading Java trust and key stores (JKS, JCEKS, PKCS12, PEM) into the PEM text librdkafka takes.

A Java Kafka client names its CA certificates with ``ssl.truststore.location``
(JKS by default, PKCS12 or PEM by ``ssl.truststore.type``) and its own
certificate with ``ssl.keystore.*``. librdkafka takes PEM text instead
(``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``), so the job reads
the stores once, on the driver, and the PEM text travels to the executors with
the other client settings: no store file has to exist on the workers.

The functions here take the store's bytes and never open paths; ``label``
names the store in errors (its file and the setting it came from).

JKS and JCEKS layout (big-endian; Java's ``sun.security.provider.JavaKeyStore``)::

    u32 magic           0xFEEDFEED (JKS) or 0xCECECECE (JCEKS)
    u32 version         1 or 2 (2 adds a certificate type before each certificate)
    u32 count           entries that follow
    count x entry:
        u32 tag         1 private key, 2 trusted certificate, 3 secret key (JCEKS)
        u16 n, n bytes  alias (modified UTF-8)
        u64             creation time, ms since the epoch
        tag 2:          [u16 n, n bytes: type "X.509" if version 2] u32 n, n bytes: DER certificate
        tag 1:          u32 n, n bytes: protected key; u32 k; k x ([type] u32 n, DER certificate)
    20 bytes            SHA-1 of password (UTF-16BE) + b"Mighty Aphrodite" + every byte before it

Only trusted-certificate entries are read (a private key in JKS is protected by
a proprietary scheme; such a key store must be converted to PKCS12). The
trailer is checked when a password is given, as Java does: it is how a wrong
password or a damaged file shows.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from dataclasses import dataclass

from spark_kafka_backup.errors import UsageError

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

_JKS_MAGIC = 0xFEEDFEED
_JCEKS_MAGIC = 0xCECECECE
_TAG_PRIVATE_KEY = 1
_TAG_TRUSTED_CERT = 2
_TAG_SECRET_KEY = 3
_DIGEST_SALT = b"Mighty Aphrodite"
_DIGEST_SIZE = 20

#: Store types as Java names them (``ssl.truststore.type``); Java's default is JKS.
STORE_TYPES = ("JKS", "JCEKS", "PKCS12", "PEM")


class _Cursor:
    """Reads big-endian fields of a store, refusing any length that runs past its end."""

    def __init__(self, data: bytes, label: str) -> None:
        self.data = data
        self.position = 0
        self.label = label

    def take(self, size: int, what: str) -> bytes:
        end = self.position + size
        if end > len(self.data):
            raise UsageError(
                f"{self.label}: {what} at byte {self.position} needs {size} bytes, "
                f"the store has {len(self.data) - self.position} left (truncated or not a key store)"
            )
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def u16(self, what: str) -> int:
        value: int = _U16.unpack(self.take(2, what))[0]
        return value

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.take(4, what))[0]
        return value

    def certificate(self, version: int) -> bytes:
        if version == 2:
            self.take(self.u16("certificate type length"), "certificate type")
        return self.take(self.u32("certificate length"), "certificate")


def jks_certificates(data: bytes, password: str | None, *, label: str) -> list[bytes]:
    """The DER certificates of a JKS or JCEKS store's trusted-certificate entries, in store order."""
    cursor = _Cursor(data, label)
    magic = cursor.u32("magic number")
    if magic not in (_JKS_MAGIC, _JCEKS_MAGIC):
        raise UsageError(f"{label}: not a JKS key store (magic number {magic:#010x}, expected 0xfeedfeed)")
    version = cursor.u32("version")
    if version not in (1, 2):
        raise UsageError(f"{label}: JKS version {version} is not 1 or 2")
    count = cursor.u32("entry count")
    certificates: list[bytes] = []
    for _ in range(count):
        entry_at = cursor.position
        tag = cursor.u32("entry tag")
        cursor.take(cursor.u16("alias length"), "alias")
        _U64.unpack(cursor.take(8, "entry time"))
        if tag == _TAG_TRUSTED_CERT:
            certificates.append(cursor.certificate(version))
        elif tag == _TAG_PRIVATE_KEY:
            cursor.take(cursor.u32("protected key length"), "protected key")
            for _ in range(cursor.u32("certificate chain length")):
                cursor.certificate(version)
        elif tag == _TAG_SECRET_KEY:
            raise UsageError(f"{label}: the entry at byte {entry_at} is a secret key; a trust store holds certificates")
        else:
            raise UsageError(f"{label}: unknown entry tag {tag} at byte {entry_at} (expected 1 or 2)")
    signed = cursor.position
    digest = cursor.take(_DIGEST_SIZE, "integrity digest")
    if cursor.position != len(data):
        raise UsageError(f"{label}: {len(data) - cursor.position} unexpected bytes after the integrity digest")
    if password is not None:
        expected = hashlib.sha1(
            password.encode("utf-16-be") + _DIGEST_SALT + data[:signed], usedforsecurity=False
        ).digest()
        if not hmac.compare_digest(expected, digest):
            raise UsageError(f"{label}: the password does not open this key store (or the file is damaged)")
    return certificates


def pkcs12_contents(data: bytes, password: str | None, *, label: str) -> tuple[list[bytes], bytes | None]:
    """A PKCS12 store's certificates (DER: its own first, then the others) and its private key (PKCS8 DER)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        store = pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except ValueError as exc:
        if password is None:
            raise UsageError(f"{label}: cannot be read without its password (not given)") from exc
        raise UsageError(
            f"{label}: not a PKCS12 store this password opens (wrong password, damaged file or another type; "
            "set ssl.truststore.type / ssl.keystore.type)"
        ) from exc
    certificates = [store.cert.certificate] if store.cert is not None else []
    certificates += [entry.certificate for entry in store.additional_certs]
    key = None
    if store.key is not None:
        key = store.key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    return [cert.public_bytes(serialization.Encoding.DER) for cert in certificates], key


def pem_certificates(text: bytes, *, label: str) -> list[bytes]:
    """The DER certificates of PEM text (any other PEM blocks are left out)."""
    certificates = []
    for block in _pem_blocks(text, label):
        if block.kind == "CERTIFICATE":
            certificates.append(block.der)
    return certificates


def pem_private_key(text: bytes, password: str | None, *, label: str) -> bytes:
    """The private key of PEM text as unencrypted PKCS8 DER (``password`` opens an encrypted one)."""
    from cryptography.hazmat.primitives import serialization

    for block in _pem_blocks(text, label):
        if block.kind.endswith("PRIVATE KEY"):
            pem = _pem(block.kind, block.der).encode()
            try:
                key = serialization.load_pem_private_key(pem, None if password is None else password.encode())
            except (ValueError, TypeError) as exc:
                raise UsageError(f"{label}: the private key cannot be read with the given ssl.key.password") from exc
            return key.private_bytes(
                serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
    raise UsageError(f"{label}: no PRIVATE KEY block")


def certificates_pem(certificates: list[bytes]) -> str:
    """DER certificates as PEM text."""
    return "".join(_pem("CERTIFICATE", der) for der in certificates)


def private_key_pem(key: bytes) -> str:
    """A PKCS8 DER private key as PEM text (a secret: it is redacted wherever settings are shown)."""
    return _pem("PRIVATE KEY", key)


def trusted_certificates(data: bytes, store_type: str | None, password: str | None, *, label: str) -> list[bytes]:
    """The CA certificates of a trust store of ``store_type`` (None: recognised by its first bytes)."""
    kind = (store_type or store_type_of(data)).upper()
    if kind in ("JKS", "JCEKS"):
        certificates = jks_certificates(data, password, label=label)
    elif kind == "PKCS12":
        certificates = pkcs12_contents(data, password, label=label)[0]
    elif kind == "PEM":
        certificates = pem_certificates(data, label=label)
    else:
        raise UsageError(f"{label}: store type {store_type!r} is not one of {', '.join(STORE_TYPES)}")
    if not certificates:
        raise UsageError(f"{label}: holds no certificate to trust")
    return certificates


def store_type_of(data: bytes) -> str:
    """The type of a store whose settings do not name it, from its first bytes: JKS, PEM or PKCS12."""
    if data[:4] in (_U32.pack(_JKS_MAGIC), _U32.pack(_JCEKS_MAGIC)):
        return "JKS"
    if data.lstrip()[:10] == b"-----BEGIN":
        return "PEM"
    return "PKCS12"


@dataclass(frozen=True)
class _PemBlock:
    kind: str
    der: bytes


def _pem_blocks(text: bytes, label: str) -> list[_PemBlock]:
    blocks = []
    kind: str | None = None
    body: list[bytes] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith(b"-----BEGIN ") and line.endswith(b"-----"):
            kind, body = line[11:-5].decode("ascii", "replace"), []
        elif line.startswith(b"-----END ") and kind is not None:
            try:
                blocks.append(_PemBlock(kind, base64.b64decode(b"".join(body), validate=True)))
            except ValueError as exc:
                raise UsageError(f"{label}: line {number}: the {kind} block is not valid base64") from exc
            kind = None
        elif kind is not None and b":" not in line:
            body.append(line)
    if not blocks:
        raise UsageError(f"{label}: no PEM block (-----BEGIN ...-----) in it")
    return blocks


def _pem(kind: str, der: bytes) -> str:
    encoded = base64.b64encode(der).decode()
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"
