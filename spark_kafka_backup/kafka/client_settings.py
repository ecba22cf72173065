"""Kafka client settings: the only place spark-kafka-backup handles librdkafka configuration dicts.

Settings travel inside spark-kafka-backup as plain ``dict[str, str]`` (picklable, so they
can cross to Spark executors) and are turned into clients at the edge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Settings keys whose values are secrets (a regular expression Python and Java read alike, case-insensitive).
SECRET_KEY_PATTERN = r"(?i)(password|secret|jaas|token|credential|sasl\.oauthbearer\.config|ssl\.key\.pem|ssl_key)"
_SECRET = re.compile(SECRET_KEY_PATTERN)


def redact(settings: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``settings`` safe to log: values of secret-looking keys become ``***``."""
    return {key: "***" if _SECRET.search(key) else value for key, value in settings.items()}


#: How long librdkafka waits before fetching again for a partition whose local queue was full. Its default since
#: 2.4, 1,000 ms, idles a reader that empties the queue in less: a backup task waited more than half its time (5 M
#: records of 200 B in 4 partitions: the micro-batch took 29 to 41 s at about 40 % of a core per task, 13.6 s at
#: 80 % with 10 ms).
FETCH_QUEUE_BACKOFF_MS = "10"

#: librdkafka's prefetch queue per consumer, in KiB (its default 65,536): a backup task holds it beside the batch it
#: writes, so it bounds the task's memory with large records; with small ones ``queued.min.messages`` (100,000)
#: bounds the queue first.
QUEUE_KBYTES = "16384"


def consumer_settings(base: Mapping[str, str], *, isolation_level: str = "read_committed") -> dict[str, str]:
    """Settings for a consumer that reads by assignment and never commits (``base`` wins, but for the two it
    decides)."""
    settings = {
        "group.id": "kbackup-reader",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": "true",
        "isolation.level": isolation_level,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "queued.max.messages.kbytes": QUEUE_KBYTES,
    }
    settings.update(base)
    # These two are decided here whatever the caller passed.
    settings["enable.auto.commit"] = "false"
    settings["enable.partition.eof"] = "true"
    return settings


_PROPERTY_IN_ERROR = re.compile(r'property:? "([^"]+)"')


def librdkafka_refusal(settings: Mapping[str, str]) -> tuple[str | None, str] | None:
    """Whether librdkafka accepts ``settings``: ``None``, or the property it names (if any) and its reason.

    Asked of librdkafka itself (a client is configured and dropped, with no
    broker to connect to), so the answer is the one a job would meet later.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    checked = {key: value for key, value in settings.items() if key != "bootstrap.servers"}
    try:
        AdminClient({**checked, "log_level": "0"})
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        named = _PROPERTY_IN_ERROR.search(reason)
        return (named.group(1) if named else None), reason
    return None
