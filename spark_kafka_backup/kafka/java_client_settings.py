"""Turning a Java Kafka client's settings (``--command-config``) into librdkafka's.

The original tool ran on the Java client, so its users' command-config files
hold Java settings. Most keys are the same in librdkafka; the ones that are
not are translated here:

- ``sasl.jaas.config`` of the PLAIN and SCRAM login modules becomes
  ``sasl.username`` / ``sasl.password``; of the OAUTHBEARER login module,
  librdkafka's OIDC client credentials (``sasl.oauthbearer.method=oidc``,
  ``sasl.oauthbearer.client.id`` / ``client.secret`` / ``scope``) or its
  unsecured development tokens;
- a trust store (``ssl.truststore.location`` of type JKS, JCEKS, PKCS12 or PEM,
  or ``ssl.truststore.certificates``) is read here and becomes ``ssl.ca.pem``;
- a key store (PKCS12 or PEM, or ``ssl.keystore.certificate.chain`` and
  ``ssl.keystore.key``) becomes ``ssl.certificate.pem`` and ``ssl.key.pem``;
  a JKS key store is refused with the command that converts it;
- ``max.request.size`` is librdkafka's ``message.max.bytes``.

Store files are read once, where the settings are made (the driver), so the
executors need no copy of them. This module is the boundary that reads them;
:mod:`spark_kafka_backup.kafka.key_stores` decodes the bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.kafka import key_stores

_JAAS = re.compile(
    r"(?P<module>[\w.]+)\s+required\s*(?P<options>.*?);?\s*$",
    re.S,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

#: Java's trust and key store settings; they are read and become PEM settings (see the module docstring).
_STORE_KEYS = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.type",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
    }
)

#: Java client settings that librdkafka knows under another name.
_RENAMED = {
    # The largest request a producer sends (a record batch must fit): librdkafka's message.max.bytes.
    "max.request.size": "message.max.bytes",
}

#: For a librdkafka setting made from others, the Java settings it comes from (for errors that name a line).
JAVA_SOURCES = {
    **{new: (old,) for old, new in _RENAMED.items()},
    "sasl.username": ("sasl.jaas.config",),
    "sasl.password": ("sasl.jaas.config",),
    **{
        key: ("sasl.jaas.config",)
        for key in (
            "sasl.oauthbearer.method",
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.scope",
            "sasl.oauthbearer.extensions",
            "sasl.oauthbearer.config",
            "enable.sasl.oauthbearer.unsecure.jwt",
        )
    },
    "ssl.ca.pem": ("ssl.truststore.location", "ssl.truststore.certificates"),
    "ssl.certificate.pem": ("ssl.keystore.location", "ssl.keystore.certificate.chain"),
    "ssl.key.pem": ("ssl.keystore.location", "ssl.keystore.key"),
}

#: Java client settings with no meaning for librdkafka that are safe to drop.
_IGNORED = {"sasl.login.callback.handler.class", "client.dns.lookup", "ssl.endpoint.identification.algorithm.java"}


def librdkafka_settings(java: Mapping[str, str], *, source: str) -> dict[str, str]:
    """Translate ``java`` settings; ``source`` names where they came from, for errors."""
    result: dict[str, str] = {}
    if any(key in _STORE_KEYS for key in java):
        result.update(_from_stores(java, source=source))
    for key, value in java.items():
        if key in _IGNORED or key in _STORE_KEYS:
            continue
        if key == "sasl.jaas.config":
            result.update(_from_jaas(value, source=source))
        elif key in _RENAMED:
            result[_RENAMED[key]] = value
        elif key == "ssl.endpoint.identification.algorithm":
            result["ssl.endpoint.identification.algorithm"] = value or "none"
        else:
            result[key] = value
    return result


def _from_jaas(text: str, *, source: str) -> dict[str, str]:
    match = _JAAS.match(text.strip())
    if match is None:
        raise UsageError(f"{source}: sasl.jaas.config is not of the form 'LoginModule required key=\"value\" ...;'")
    module = match["module"]
    options = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(match["options"])}
    if module.endswith(("PlainLoginModule", "ScramLoginModule")):
        if "username" not in options or "password" not in options:
            raise UsageError(f"{source}: sasl.jaas.config for {module} needs username and password")
        return {"sasl.username": options["username"], "sasl.password": options["password"]}
    if module.endswith("OAuthBearerLoginModule"):
        return _oauthbearer(module, options, source=source)
    raise UsageError(
        f"{source}: sasl.jaas.config uses {module}; give librdkafka's settings instead "
        "(e.g. sasl.kerberos.* or sasl.oauthbearer.*)"
    )


def _oauthbearer(module: str, options: Mapping[str, str], *, source: str) -> dict[str, str]:
    """OAUTHBEARER: OIDC client credentials (KIP-768), or the unsecured tokens of development clusters.

    The token endpoint (``sasl.oauthbearer.token.endpoint.url``) has the same key in both clients.
    ``extension_NAME="value"`` options are SASL extensions.
    """
    extensions = ",".join(
        f"{key[len('extension_') :]}={value}" for key, value in options.items() if key.startswith("extension_")
    )
    result = {"sasl.oauthbearer.extensions": extensions} if extensions else {}
    if "clientId" in options or "clientSecret" in options:
        if "clientId" not in options or "clientSecret" not in options:
            raise UsageError(f"{source}: sasl.jaas.config for {module} needs clientId and clientSecret (OIDC)")
        result.update(
            {
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": options["clientId"],
                "sasl.oauthbearer.client.secret": options["clientSecret"],
            }
        )
        if "scope" in options:
            result["sasl.oauthbearer.scope"] = options["scope"]
        return result
    if "unsecuredLoginStringClaim_sub" in options:
        # Kafka's unsecured JWTs (no signature): for development clusters only, as in the Java client.
        claims = [f"principal={options['unsecuredLoginStringClaim_sub']}"]
        if "unsecuredLoginListClaim_scope" in options:
            claims.append(f"scope={options['unsecuredLoginListClaim_scope']}")
        result.update({"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(claims)})
        return result
    raise UsageError(
        f"{source}: sasl.jaas.config for {module} needs clientId and clientSecret (OIDC) or "
        "unsecuredLoginStringClaim_sub (unsecured tokens)"
    )


def _from_stores(java: Mapping[str, str], *, source: str) -> dict[str, str]:
    """``ssl.ca.pem`` from the trust store, ``ssl.certificate.pem`` and ``ssl.key.pem`` from the key store."""
    result: dict[str, str] = {}
    if "ssl.truststore.certificates" in java:
        text = java["ssl.truststore.certificates"].encode()
        label = f"{source}: ssl.truststore.certificates"
        result["ssl.ca.pem"] = key_stores.certificates_pem(key_stores.pem_certificates(text, label=label))
    elif "ssl.truststore.location" in java:
        location = java["ssl.truststore.location"]
        label = f"{source}: ssl.truststore.location {location}"
        certificates = key_stores.trusted_certificates(
            _read_store(location, label),
            java.get("ssl.truststore.type"),
            java.get("ssl.truststore.password") or None,
            label=label,
        )
        result["ssl.ca.pem"] = key_stores.certificates_pem(certificates)
    key_password = java.get("ssl.key.password") or None
    if "ssl.keystore.certificate.chain" in java or "ssl.keystore.key" in java:
        label = f"{source}: ssl.keystore.certificate.chain / ssl.keystore.key"
        chain = java.get("ssl.keystore.certificate.chain", "").encode()
        key = java.get("ssl.keystore.key", "").encode()
        result["ssl.certificate.pem"] = key_stores.certificates_pem(key_stores.pem_certificates(chain, label=label))
        result["ssl.key.pem"] = key_stores.private_key_pem(key_stores.pem_private_key(key, key_password, label=label))
    elif "ssl.keystore.location" in java:
        location = java["ssl.keystore.location"]
        label = f"{source}: ssl.keystore.location {location}"
        data = _read_store(location, label)
        kind = (java.get("ssl.keystore.type") or key_stores.store_type_of(data)).upper()
        password = java.get("ssl.keystore.password") or None
        if kind == "PEM":
            certificates = key_stores.pem_certificates(data, label=label)
            key_der: bytes | None = key_stores.pem_private_key(data, key_password, label=label)
        elif kind == "PKCS12":
            certificates, key_der = key_stores.pkcs12_contents(data, password, label=label)
        else:
            raise UsageError(
                f"{label}: a {kind} key store cannot be read here (its key is in a Java-only format); convert it: "
                f"keytool -importkeystore -srckeystore {location} -destkeystore client.p12 -deststoretype PKCS12, "
                "and set ssl.keystore.type=PKCS12"
            )
        if key_der is None or not certificates:
            raise UsageError(f"{label}: needs a private key and its certificate")
        result["ssl.certificate.pem"] = key_stores.certificates_pem(certificates)
        result["ssl.key.pem"] = key_stores.private_key_pem(key_der)
    return result


def _read_store(location: str, label: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise UsageError(f"{label}: cannot be read ({exc.strerror or exc})") from exc
