"""Certificates and Java stores for a secured local Apache Kafka (tests and demos only).

``make_certificates`` creates a private CA, a broker certificate for
``127.0.0.1`` and ``localhost`` in a PKCS12 key store (what the broker loads)
and a client certificate (for a listener that asks clients for one). The
client's trust stores are made with the JDK's ``keytool`` by
``java_trust_store``, as operators make them: JKS, PKCS12 or a PEM file.
Nothing here is fit for production keys: the CA key stays on disk unprotected.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spark_kafka_backup.errors import SparkKafkaBackupError


class TlsSetupError(SparkKafkaBackupError):
    """The test certificates or stores could not be made."""


@dataclass(frozen=True)
class CertificateSet:
    """Files of a test CA and the certificates it signed, all in one directory."""

    directory: Path
    #: The CA certificate, PEM (what clients trust).
    ca_pem: Path
    #: The broker's key and certificate chain, PKCS12 opened by ``password``.
    broker_keystore: Path
    #: A client's key and certificate chain, PKCS12 opened by ``password`` (for ``ssl.client.auth=required``).
    client_keystore: Path
    #: Its certificate's subject as Kafka's principal names it (``User:`` + this).
    client_subject: str
    password: str


def make_certificates(directory: Path, *, password: str = "kbackup-store-pass") -> CertificateSet:
    """A CA, a broker and a client certificate under ``directory`` (created)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "spark-kafka-backup tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, common),
            ]
        )

    def build(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("spark-kafka-backup test CA")
    ca = (
        build(ca_name, ca_key, ca_name)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    store_encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(10000)
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(password.encode())
    )

    def leaf(common: str, alternative: list[x509.GeneralName], usage: x509.ObjectIdentifier, file: str) -> Path:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = build(name(common), key, ca_name).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if alternative:
            builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        certificate = builder.sign(ca_key, hashes.SHA256())
        path = directory / file
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(common.encode(), key, certificate, [ca], store_encryption)
        )
        return path

    from cryptography.x509.oid import ExtendedKeyUsageOID

    broker = leaf(
        "localhost",
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        ExtendedKeyUsageOID.SERVER_AUTH,
        "broker.p12",
    )
    client = leaf("kbackup-client", [], ExtendedKeyUsageOID.CLIENT_AUTH, "client.p12")
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return CertificateSet(
        directory=directory,
        ca_pem=ca_pem,
        broker_keystore=broker,
        client_keystore=client,
        client_subject="CN=kbackup-client,O=spark-kafka-backup tests",
        password=password,
    )


def java_trust_store(ca_pem: Path, path: Path, store_type: str, password: str) -> Path:
    """A trust store holding the CA of ``ca_pem``, made by ``keytool`` (``store_type`` JKS or PKCS12)."""
    keytool = shutil.which("keytool")
    if keytool is None:
        raise TlsSetupError("keytool (from the JDK) is not on PATH")
    result = subprocess.run(
        [
            keytool,
            "-importcert",
            "-noprompt",
            "-alias",
            "kbackup-test-ca",
            "-file",
            str(ca_pem),
            "-keystore",
            str(path),
            "-storetype",
            store_type,
            "-storepass",
            password,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise TlsSetupError(f"keytool could not make {path}: {(result.stdout + result.stderr).strip()}")
    return path
