"""Kafka client settings: the only place kbackup handles librdkafka configuration dicts.

Settings travel inside kbackup as plain ``dict[str, str]`` (picklable, so they
can cross to Spark executors) and are turned into clients at the edge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET = re.compile(r"(password|secret|jaas|token|credential|sasl\.oauthbearer\.config|ssl\.key\.pem|ssl_key)", re.I)


def redact(settings: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``settings`` safe to log: values of secret-looking keys become ``***``."""
    return {key: "***" if _SECRET.search(key) else value for key, value in settings.items()}


def consumer_settings(base: Mapping[str, str], *, isolation_level: str = "read_committed") -> dict[str, str]:
    """Settings for a consumer that reads by assignment and never commits."""
    settings = {
        "group.id": "kbackup-reader",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": "true",
        "isolation.level": isolation_level,
    }
    settings.update(base)
    # These two are decided here whatever the caller passed.
    settings["enable.auto.commit"] = "false"
    settings["enable.partition.eof"] = "true"
    return settings
