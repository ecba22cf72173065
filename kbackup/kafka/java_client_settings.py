"""Turning a Java Kafka client's settings (``--command-config``) into librdkafka's.

The original tool ran on the Java client, so its users' command-config files
hold Java settings. Most keys are the same in librdkafka; the ones that are
not are translated here, and the ones that cannot be (Java key stores) are an
error that says what librdkafka needs instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kbackup.errors import UsageError

_JAAS = re.compile(
    r"(?P<module>[\w.]+)\s+required\s*(?P<options>.*?);?\s*$",
    re.S,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

_UNSUPPORTED = {
    "ssl.truststore.location": "ssl.ca.location (a PEM file of CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (PEM needs no password)",
    "ssl.truststore.type": "ssl.ca.location (PEM)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (PEM files)",
    "ssl.keystore.password": "ssl.key.password for an encrypted PEM key",
    "ssl.keystore.type": "ssl.certificate.location / ssl.key.location (PEM)",
}

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
}

#: Java client settings with no meaning for librdkafka that are safe to drop.
_IGNORED = {"sasl.login.callback.handler.class", "client.dns.lookup", "ssl.endpoint.identification.algorithm.java"}


def librdkafka_settings(java: Mapping[str, str], *, source: str) -> dict[str, str]:
    """Translate ``java`` settings; ``source`` names where they came from, for errors."""
    result: dict[str, str] = {}
    for key, value in java.items():
        if key in _UNSUPPORTED:
            raise UsageError(
                f"{source}: {key} (a Java key store) has no librdkafka equivalent; use {_UNSUPPORTED[key]}"
            )
        if key in _IGNORED:
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
    raise UsageError(
        f"{source}: sasl.jaas.config uses {module}; give librdkafka's settings instead "
        "(e.g. sasl.kerberos.* or sasl.oauthbearer.*)"
    )
