"""Java trust and key stores read into librdkafka's PEM settings (stores made by the JDK's keytool)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.tls import CertificateSet, java_trust_store, make_certificates
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.kafka.java_client_settings import librdkafka_settings
from spark_kafka_backup.kafka.key_stores import jks_certificates


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateSet:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def jks(certificates: CertificateSet) -> Path:
    return java_trust_store(certificates.ca_pem, certificates.directory / "trust.jks", "JKS", "trust-pass")


def translate(settings: dict[str, str]) -> dict[str, str]:
    return librdkafka_settings(settings, source="client.properties")


@pytest.mark.parametrize("store_type", ["JKS", "PKCS12"])
def test_a_keytool_trust_store_becomes_the_ca_pem(certificates: CertificateSet, store_type: str) -> None:
    store = java_trust_store(certificates.ca_pem, certificates.directory / f"t.{store_type}", store_type, "trust-pass")
    settings = {"ssl.truststore.location": str(store), "ssl.truststore.password": "trust-pass"}
    # The type named, and left to Java's default (JKS) or to the file's first bytes.
    for extra in ({"ssl.truststore.type": store_type}, {}):
        result = translate({**settings, **extra, "security.protocol": "SSL"})
        assert result == {"security.protocol": "SSL", "ssl.ca.pem": certificates.ca_pem.read_text()}


def test_a_pem_trust_store_by_file_and_inline(certificates: CertificateSet) -> None:
    pem = certificates.ca_pem.read_text()
    by_file = translate({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certificates.ca_pem)})
    inline = translate({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem})
    assert by_file == inline == {"ssl.ca.pem": pem}


def test_a_pkcs12_key_store_becomes_certificate_and_key(certificates: CertificateSet) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    result = translate(
        {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(certificates.client_keystore),
            "ssl.keystore.password": certificates.password,
        }
    )
    chain = x509.load_pem_x509_certificates(result["ssl.certificate.pem"].encode())
    key = serialization.load_pem_private_key(result["ssl.key.pem"].encode(), None)
    assert chain[0].subject.rfc4514_string() == certificates.client_subject
    assert chain[0].public_key() == key.public_key()
    assert chain[1].public_bytes(serialization.Encoding.PEM).decode() == certificates.ca_pem.read_text()


def test_wrong_password_damage_and_missing_files_are_one_line_each(certificates: CertificateSet, jks: Path) -> None:
    cases: list[tuple[dict[str, str], str]] = [
        (
            {"ssl.truststore.location": str(jks), "ssl.truststore.password": "wrong"},
            f"client.properties: ssl.truststore.location {jks}: the password does not open this key store",
        ),
        (
            {"ssl.truststore.location": str(certificates.directory / "absent.jks")},
            f"client.properties: ssl.truststore.location {certificates.directory / 'absent.jks'}: cannot be read",
        ),
        (
            {"ssl.truststore.location": str(jks), "ssl.truststore.type": "BKS"},
            "store type 'BKS' is not one of JKS, JCEKS, PKCS12, PEM",
        ),
        (
            {"ssl.truststore.location": str(certificates.client_keystore)},
            "cannot be read without its password",
        ),
        (
            {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "no pem here"},
            "client.properties: ssl.truststore.certificates: no PEM block",
        ),
    ]
    for settings, message in cases:
        with pytest.raises(UsageError) as caught:
            translate(settings)
        assert message in str(caught.value) and "\n" not in str(caught.value), settings


def test_a_truncated_or_absurd_jks_names_the_byte_and_allocates_nothing(jks: Path) -> None:
    data = jks.read_bytes()
    assert jks_certificates(data, "trust-pass", label="t.jks")  # the whole store reads
    with pytest.raises(UsageError, match=r"t\.jks: integrity digest at byte \d+ needs 20 bytes"):
        jks_certificates(data[:-5], None, label="t.jks")
    # The certificate length (after magic, version, count, tag, alias, time, type) set to 2 GiB.
    alias_length = int.from_bytes(data[16:18], "big")
    type_at = 18 + alias_length + 8
    length_at = type_at + 2 + int.from_bytes(data[type_at : type_at + 2], "big")
    absurd = data[:length_at] + (2**31).to_bytes(4, "big") + data[length_at + 4 :]
    with pytest.raises(UsageError, match=rf"certificate at byte {length_at + 4} needs 2147483648 bytes"):
        jks_certificates(absurd, None, label="t.jks")
    with pytest.raises(UsageError, match="not a JKS key store"):
        jks_certificates(b"\x00" * 64, None, label="t.jks")
    # A flipped bit inside a certificate: the digest says so when the password is given.
    flipped = bytearray(data)
    flipped[length_at + 40] ^= 1
    with pytest.raises(UsageError, match="password does not open this key store \\(or the file is damaged\\)"):
        jks_certificates(bytes(flipped), "trust-pass", label="t.jks")


def test_a_jks_key_store_is_refused_with_the_command_that_converts_it(
    certificates: CertificateSet, tmp_path: Path
) -> None:
    import subprocess

    jks_keys = tmp_path / "client.jks"
    subprocess.run(
        ["keytool", "-importkeystore", "-noprompt", "-srckeystore", str(certificates.client_keystore),
         "-srcstoretype", "PKCS12", "-srcstorepass", certificates.password, "-destkeystore", str(jks_keys),
         "-deststoretype", "JKS", "-deststorepass", certificates.password],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"keytool -importkeystore -srckeystore .*client.jks .*-deststoretype PKCS12"):
        translate({"ssl.keystore.location": str(jks_keys), "ssl.keystore.password": certificates.password})
