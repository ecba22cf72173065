"""Questions spark-kafka-backup asks a Kafka cluster: partitions, watermarks, committed group offsets.

Every function takes client settings (a plain dict) and builds its client;
errors from the cluster become :class:`ClusterError` with what was asked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any

from spark_kafka_backup.errors import ClusterError
from spark_kafka_backup.text import count

TopicPartitionKey = tuple[str, int]


#: Names of librdkafka error codes a client recovers from by itself: connections, leaders, coordinators moving.
TRANSIENT_ERRORS = frozenset(
    {
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_RESOLVE",
        "_TIMED_OUT",
        "_WAIT_COORD",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "BROKER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE",
        "NETWORK_EXCEPTION",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "UNSTABLE_OFFSET_COMMIT",
        # A new leader whose high watermark has not caught up yet (ListOffsets right after a failover).
        "OFFSET_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "KAFKA_STORAGE_ERROR",
        # Admin requests while no node answers for a partition: "Failed to query partition leaders: No leaders found".
        "_NOENT",
    }
)


#: spark-kafka-backup's own consumer group: its offsets on a restore's target partitions are the restore's progress
#: markers (:mod:`spark_kafka_backup.restore.marker`), not a consumer's position, so no backup or remap carries them.
PROGRESS_GROUP = "kbackup-restore-progress"

#: How long :func:`list_offsets` asks again after a transient error.
OFFSETS_RETRY_SECONDS = 10.0
#: Partitions per ListOffsets call of :func:`list_offsets` (the calls are in flight at once). The client's time
#: grows with the square of one call's partitions: 10,000 partitions of one Apache Kafka 4.1.1 node took 1.28 CPU-s
#: and 1.37 s in one call, 0.32 CPU-s and 0.44 s in calls of 500 (confluent-kafka 2.16.1, 2026-12-03); 1,000 in
#: one call 0.03 CPU-s.
OFFSETS_PER_CALL = 500


def is_transient(error: Any) -> bool:
    """Whether a ``KafkaError`` a client reported is one it retries by itself (not a reason to fail)."""
    if error.fatal():
        return False
    return bool(error.retriable()) or error.name() in TRANSIENT_ERRORS


def is_transient_code(code: int) -> bool:
    """:func:`is_transient` for an event's bare error code (a consumer's events are never fatal or retriable)."""
    from confluent_kafka import KafkaError

    return str(KafkaError(code).name()) in TRANSIENT_ERRORS


#: A group coordinator moving, being created (a cluster's first group) or loading: asked again, as a consumer would.
COORDINATOR_NOT_READY = frozenset({"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"})


def admin_client(settings: Mapping[str, str]) -> Any:
    """An admin client whose log goes to the ``spark_kafka_backup.librdkafka`` logger, not to stderr.

    It remembers the last authentication failure librdkafka reported (a refused SASL login, a token endpoint
    that refused the client, a failed TLS handshake): a request that fails after one says why, instead of
    librdkafka's "broker transport failure".
    """
    import logging

    from confluent_kafka.admin import AdminClient

    failures: list[Any] = []

    def remember(error: Any) -> None:
        if error.code() in _AUTHENTICATION_CODES:
            failures[:] = [error]

    admin = AdminClient({**settings, "error_cb": remember}, logger=logging.getLogger("spark_kafka_backup.librdkafka"))
    with _FAILURES_LOCK:
        if len(_AUTHENTICATION_FAILURES) >= 256:  # a long outage makes many clients: forget the oldest
            del _AUTHENTICATION_FAILURES[next(iter(_AUTHENTICATION_FAILURES))]
        _AUTHENTICATION_FAILURES[id(admin)] = failures
    return admin


#: librdkafka's error codes of a refused login or TLS handshake (``_AUTHENTICATION``, ``_SSL``,
#: SASL_AUTHENTICATION_FAILED).
_AUTHENTICATION_CODES = {-169, -181, 58}
#: Each admin client's remembered failure, by ``id`` (an AdminClient takes no attributes).
_AUTHENTICATION_FAILURES: dict[int, list[Any]] = {}
_FAILURES_LOCK = threading.Lock()


def authentication_failure(admin: Any) -> str | None:
    """The authentication failure librdkafka reported for ``admin`` since its last successful metadata request
    (its pending events served first); None when there was none."""
    with _FAILURES_LOCK:
        failures = _AUTHENTICATION_FAILURES.get(id(admin))
    if failures is None:
        return None
    with contextlib.suppress(Exception):  # a closed client: nothing more to learn
        admin.poll(0.5)
    return str(failures[0].str()) if failures else None


def partition_counts(admin: Any, *, timeout: float = 30) -> dict[str, int]:
    """Every topic the cluster reports, with its partition count."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception as exc:
        refused = authentication_failure(admin)
        if refused is not None:
            # Transient: a token endpoint can fail for a while; a job's first request is asked once anyway.
            raise ClusterError(f"the cluster refused this client's login: {refused}", transient=True) from exc
        raise _failed("cannot list topics", exc) from exc
    with _FAILURES_LOCK:  # logged in since: an earlier failure says nothing about a later outage
        _AUTHENTICATION_FAILURES.get(id(admin), []).clear()
    return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def cluster_identity(admin: Any, topics: Iterable[str], *, timeout: float = 30) -> tuple[str, dict[str, str]]:
    """The cluster id and each existing topic's id, both as Kafka prints them (URL-safe base64).

    A topic id (KIP-516) names one incarnation of a topic: deleting a topic and
    creating it again under the same name gives it a new id. Topics that do
    not exist are left out.
    """
    try:
        cluster_id = admin.describe_cluster(request_timeout=timeout).result().cluster_id
    except Exception as exc:
        raise _failed("cannot read the cluster id and topic ids", exc) from exc
    return kafka_id(str(cluster_id)), topic_ids(admin, topics, timeout=timeout)


def topic_ids(admin: Any, topics: Iterable[str], *, timeout: float = 30) -> dict[str, str]:
    """Each existing topic's id (see :func:`cluster_identity`); topics that do not exist are left out."""
    from confluent_kafka import KafkaError, TopicCollection

    names = sorted(set(topics))
    ids: dict[str, str] = {}
    if not names:
        return ids
    try:
        for name, future in admin.describe_topics(TopicCollection(names), request_timeout=timeout).items():
            try:
                ids[name] = kafka_id(str(future.result().topic_id))
            except Exception as exc:
                error = exc.args[0] if exc.args else None
                if getattr(error, "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
    except Exception as exc:
        raise _failed("cannot read the topic ids", exc) from exc
    return ids


#: How long one attempt of :class:`TopicIdAsker` waits. Topic ids are asked of the node a client last learned as
#: "controller" (a random live broker in KRaft mode): when that node dies, the client waits for it until the request
#: times out, while a new client asks a live node. A short attempt makes a leader's failover cost seconds.
TOPIC_ID_ATTEMPT_SECONDS = 8.0


class TopicIdAsker:
    """Asks a cluster for topic ids (:func:`topic_ids`) with its own client, asking again through an outage (a new
    client each time) for up to ``patience`` seconds: for executors, which check ids while they read or write."""

    def __init__(
        self, client: Mapping[str, str], *, patience: float, attempt_timeout: float = TOPIC_ID_ATTEMPT_SECONDS
    ) -> None:
        self._client = dict(client)
        self._patience = patience
        self._attempt_timeout = attempt_timeout
        self._admin: Any = None

    def ask(self, topics: Iterable[str]) -> dict[str, str]:
        wanted = list(topics)
        deadline = time.monotonic() + self._patience
        while True:
            if self._admin is None:
                self._admin = admin_client(self._client)
            try:
                return topic_ids(self._admin, wanted, timeout=self._attempt_timeout)
            except ClusterError as exc:
                self._admin = None
                if not exc.transient or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)


def kafka_id(text: str) -> str:
    """A cluster or topic id in Kafka's own spelling (librdkafka prints standard base64, Kafka URL-safe)."""
    return text.replace("+", "-").replace("/", "_").rstrip("=")


def list_offsets(
    admin: Any,
    partitions: Iterable[TopicPartitionKey],
    *,
    latest: bool,
    read_committed: bool = True,
    timeout: float = 30,
    partial: bool = False,
    retry_seconds: float | None = None,
) -> dict[TopicPartitionKey, int]:
    """The earliest (log-start) or latest offset of each partition.

    With ``read_committed`` the latest offset is the last stable offset: the
    end of committed data, before any open transaction. A transient error
    (a leader just elected whose high watermark has not caught up, no leader
    yet) is asked again for up to :data:`OFFSETS_RETRY_SECONDS` before it is
    raised, so that a failover or a topic created a moment ago is not an error.
    So is UNKNOWN_TOPIC_OR_PART: on a cluster of several brokers, partitions
    added a moment ago are unknown to a broker that has not learned them yet;
    it is raised as before (not transient: a deleted topic says the same) once
    the time is up.

    ``partial``: partitions whose leader did not answer (a transient error
    of theirs alone) are left out of the answer at once instead; only when
    none answers is that an error. For planning, where one partition without
    a leader must not hold up all the others. ``retry_seconds``: how long to ask again instead of
    :data:`OFFSETS_RETRY_SECONDS` (0: raise at once, for a caller that asks again later anyway).
    """
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    wanted = list(partitions)
    if not wanted:
        return {}
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    requests = [
        {TopicPartition(topic, partition): spec for topic, partition in wanted[start : start + OFFSETS_PER_CALL]}
        for start in range(0, len(wanted), OFFSETS_PER_CALL)
    ]
    deadline = time.monotonic() + (OFFSETS_RETRY_SECONDS if retry_seconds is None else retry_seconds)
    which = "latest" if latest else "earliest"
    while True:
        try:
            futures = {}
            for request in requests:
                futures.update(admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout))
            answered = _offsets_answered(futures, partial=partial)
            # A partition whose leader did not answer in time comes back without an error, as offset -1001
            # (librdkafka's OFFSET_INVALID; seen right after kill -9 of a leader): no answer, not an offset.
            unanswered = sorted(key for key in wanted if answered.get(key, -1) < 0)
            if not unanswered:
                return answered
            if partial and len(unanswered) < len(wanted):
                return {key: offset for key, offset in answered.items() if offset >= 0}
            shown = ", ".join(f"{topic}/{partition}" for topic, partition in unanswered[:5])
            more = f" and {len(unanswered) - 5} more" if len(unanswered) > 5 else ""
            error = ClusterError(
                f"cannot list {which} offsets of {count(len(wanted), 'partition')}: no offset for {shown}{more} "
                "(its leader did not answer)",
                transient=True,
            )
            asked_again = True
        except Exception as exc:
            error = _failed(f"cannot list {which} offsets of {count(len(wanted), 'partition')}", exc)
            asked_again = error.transient or _unknown_partition(exc)
        if not asked_again or time.monotonic() >= deadline:
            raise error from None
        time.sleep(0.5)


def _unknown_partition(exc: BaseException) -> bool:
    """Whether a client's error is UNKNOWN_TOPIC_OR_PART (a partition the answering broker does not know)."""
    error = exc.args[0] if exc.args else None
    return getattr(error, "name", lambda: None)() == "UNKNOWN_TOPIC_OR_PART"


def _offsets_answered(futures: Mapping[Any, Any], *, partial: bool) -> dict[TopicPartitionKey, int]:
    """Each partition's offset; with ``partial``, a partition whose own answer is a transient error, or says the
    answering broker does not know it (yet), is left out, unless no partition has an offset: then the last
    UNKNOWN_TOPIC_OR_PART is raised (every partition unknown is what a deleted topic answers)."""
    answered: dict[TopicPartitionKey, int] = {}
    unknown: BaseException | None = None
    for tp, future in futures.items():
        try:
            answered[(tp.topic, tp.partition)] = future.result().offset
        except Exception as exc:
            not_known = _unknown_partition(exc)
            if not partial or not (not_known or _failed("", exc).transient):
                raise
            unknown = exc if not_known else unknown
    if unknown is not None and not any(offset >= 0 for offset in answered.values()):
        raise unknown
    return answered


def committed_group_offsets(
    admin: Any, *, timeout: float = 30, progress: Callable[[], None] | None = None
) -> tuple[dict[str, dict[TopicPartitionKey, int]], bool]:
    """For every consumer group, its committed offset on each partition it has one for; and whether that is all.

    A node that does not answer the group listing (it is down), or a partition the cluster answered with an error
    for, leaves groups or offsets out: the second value is then False, and a caller must not take a group's absence
    as its deletion (``--prune-groups``). ``progress`` is called after each group (the isolated reader's sign of
    life, :mod:`spark_kafka_backup.kafka.isolated_groups`).
    """
    from confluent_kafka import ConsumerGroupTopicPartitions

    try:
        listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout + 5)
        complete = not listing.errors
        groups = sorted(group.group_id for group in listing.valid)
        result: dict[str, dict[TopicPartitionKey, int]] = {}
        for group in groups:
            futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
            for future in futures.values():
                answered = future.result(timeout + 5).topic_partitions  # the request's own timeout answers first
                complete = complete and all(tp.error is None for tp in answered)
                offsets = {
                    (tp.topic, tp.partition): tp.offset for tp in answered if tp.error is None and tp.offset >= 0
                }
                if offsets:
                    result[group] = offsets
            if progress is not None:
                progress()
        return result, complete
    except Exception as exc:
        raise _failed("cannot read consumer group offsets", exc) from exc


def consumer_group_ids(admin: Any, *, timeout: float = 30) -> list[str]:
    """Every consumer group the cluster lists, sorted. A listing a node did not answer is a transient
    :class:`ClusterError` (asked again by an :class:`~spark_kafka_backup.kafka.admin_session.AdminSession`), never a
    shorter list."""
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout).result()
    except Exception as exc:
        raise _failed("cannot list the consumer groups", exc) from exc
    if listing.errors:
        raise ClusterError(
            f"cannot list the consumer groups: {len(listing.errors)} of the cluster's nodes did not answer "
            f"({_reason(listing.errors[0])})",
            transient=True,
        )
    return sorted(group.group_id for group in listing.valid)


def _failed(message: str, exc: BaseException) -> ClusterError:
    """``message: reason``, transient when the client's error is one it recovers from."""
    error = exc.args[0] if exc.args else None
    # A future that did not resolve in time (TimeoutError) is a cluster that did not answer, not a refusal.
    transient = isinstance(exc, TimeoutError) or (
        hasattr(error, "fatal") and hasattr(error, "retriable") and is_transient(error)
    )
    return ClusterError(f"{message}: {_reason(exc)}", transient=transient)


def _reason(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, TimeoutError) and not text:
        return "no answer in time"
    return text or type(exc).__name__


def message_record(message: Any) -> Any:
    """A consumed message as a v1 :class:`~spark_kafka_backup.format.record.Record`."""
    from spark_kafka_backup.format.record import Record

    kind, timestamp = message.timestamp()
    ts_type = {1: 0, 2: 1}.get(kind, -1)
    return Record(
        message.offset(),
        ts_type,
        timestamp if ts_type >= 0 else None,
        message.key(),
        message.value(),
        tuple(message.headers() or ()),
    )


def read_committed_records(
    settings: Mapping[str, str], topic: str, partition: int, start: int, *, timeout: float = 60
) -> Generator[tuple[int, Any], None, None]:
    """``(offset, record)`` of every committed record from ``start`` to the partition's end, in order.

    Reads as a ``read_committed`` consumer: records of aborted transactions and
    transaction markers are skipped. ``start`` below the log start (records
    deleted since) is an error, not a silent jump. Close the iterator (or read
    it to the end) to close its consumer.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from spark_kafka_backup.kafka.client_settings import consumer_settings

    settings = {**consumer_settings(settings, isolation_level="read_committed"), "auto.offset.reset": "error"}
    consumer = Consumer(settings)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    raise ClusterError(f"topic {topic!r} partition {partition} from offset {start}: {error.str()}")
                yield int(message.offset()), message_record(message)
                deadline = time.monotonic() + timeout
        raise ClusterError(
            f"topic {topic!r} partition {partition}: no answer reading from offset {start} in {timeout:.0f} s"
        )
    finally:
        consumer.close()


def nth_committed_record(
    settings: Mapping[str, str], topic: str, partition: int, start: int, n: int
) -> tuple[int, Any] | None:
    """The ``n``-th (0-based) committed record at or after ``start`` and its offset, or ``None`` if there are fewer."""
    records = read_committed_records(settings, topic, partition, start)
    try:
        for seen, found in enumerate(records):
            if seen == n:
                return found
        return None
    finally:
        records.close()


def committed_record_before(
    settings: Mapping[str, str], topic: str, partition: int, before: int, k: int
) -> tuple[int, Any] | None:
    """The ``k``-th (1-based) committed record counting back from offset ``before`` (exclusive), and its offset, or
    ``None`` if the partition holds fewer there. Reads forward from a little below ``before``, further down while
    too few are found (transaction markers and aborted records take offsets too): the cost is about the ``k``
    records, however long the partition."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_kafka_backup.kafka.client_settings import consumer_settings

    if k <= 0:
        return None
    probe = Consumer({**consumer_settings(settings, isolation_level="read_committed")})
    try:
        log_start, _ = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
    except Exception as exc:
        raise ClusterError(
            f"topic {topic!r} partition {partition}: cannot read its first offset: {_reason(exc)}"
        ) from exc
    finally:
        probe.close()
    span = 2 * k + 64
    while True:
        low = max(int(log_start), before - span)
        count = _count_committed(settings, topic, partition, low, before)
        if count >= k or low <= log_start:
            break
        span *= 4
    if count < k:
        return None
    records = read_committed_records(settings, topic, partition, low)
    try:
        for seen, found in enumerate(records):
            if seen == count - k:
                return found
        return None
    finally:
        records.close()


def _count_committed(settings: Mapping[str, str], topic: str, partition: int, low: int, before: int) -> int:
    records = read_committed_records(settings, topic, partition, low)
    try:
        count = 0
        for offset, _ in records:
            if offset >= before:
                break
            count += 1
        return count
    finally:
        records.close()


def create_topics(
    admin: Any,
    topics: Mapping[str, int],
    *,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    replication_factor: int = -1,
    timeout: float = 60,
    exist_ok: bool = False,
) -> list[str]:
    """Create topics with the given partition counts (and topic configurations); return those created.

    With ``exist_ok``, a topic someone else created meanwhile is accepted when it has at least the partitions asked
    for (it is left out of the result).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if not topics:
        return []
    requests = [
        NewTopic(name, count, replication_factor, config=dict((configs or {}).get(name, {})))
        for name, count in topics.items()
    ]
    created, existing = [], []
    try:
        for name, future in admin.create_topics(requests, request_timeout=timeout).items():
            try:
                future.result()
                created.append(name)
            except KafkaException as exc:
                if not (exist_ok and exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
                existing.append(name)
    except Exception as exc:
        raise ClusterError(f"cannot create topic(s) {', '.join(topics)}: {_reason(exc)}") from exc
    if existing:
        counts = partition_counts(admin, timeout=timeout)
        short = [
            f"{name} ({counts.get(name, 0)} < {topics[name]})"
            for name in existing
            if counts.get(name, 0) < topics[name]
        ]
        if short:
            raise ClusterError(
                f"topic(s) created by someone else meanwhile have too few partitions: {', '.join(short)}"
            )
    return created


def add_partitions(admin: Any, counts: Mapping[str, int], *, timeout: float = 60) -> None:
    """Grow each topic to the partition count given (a topic someone grew as far meanwhile is accepted)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewPartitions

    if not counts:
        return
    try:
        requests = [NewPartitions(name, count) for name, count in counts.items()]
        for name, future in admin.create_partitions(requests, request_timeout=timeout).items():
            try:
                future.result()
            except KafkaException as exc:
                grown = exc.args and exc.args[0].code() == KafkaError.INVALID_PARTITIONS
                if grown and partition_counts(admin, timeout=timeout).get(name, 0) >= counts[name]:
                    continue
                raise
    except Exception as exc:
        raise ClusterError(f"cannot add partitions to topic(s) {', '.join(counts)}: {_reason(exc)}") from exc


def topic_configs(admin: Any, topics: Iterable[str], *, timeout: float = 30) -> dict[str, dict[str, str]]:
    """Each topic's configuration set on the topic itself (not broker or built-in defaults, no secrets); a topic
    deleted since it was listed is left out (seen in the soak benchmark: one deleted topic failed the backup)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    names = list(topics)
    if not names:
        return {}
    try:
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = admin.describe_configs(resources, request_timeout=timeout)
        result: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(timeout + 2)  # the request's own timeout answers first
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            result[resource.name] = {
                key: entry.value
                for key, entry in sorted(entries.items())
                if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and not entry.is_sensitive
                and entry.value is not None
            }
        return result
    except Exception as exc:
        raise _failed(f"cannot read the configuration of topic(s) {', '.join(names)}", exc) from exc
