"""The ``kbackup`` Spark data source on real backups: rows equal to ``cat`` record for record, pruning by the
catalog shown by removing every segment a query must not open, damage an error, keys as the restore takes them; and
``erase --where``, which evaluates its predicate through it."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.datasource import register
from spark_kafka_backup.datasource.match_runs import ScanMatch, runs_of_scan
from spark_kafka_backup.datasource.scan_options import scan_options
from spark_kafka_backup.datasource.scan_plan import plan_scans
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.object_writer import ObjectPartitionWriter
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.storage import ObjectPath, parse_location
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.data_source_query import as_cat
from tests.in_process import spark_session
from tests.kafka_helpers import (
    client_config_file,
    consume_all,
    create_topics,
    job_env,
    kbackup_in_process,
    kbackup_lines,
    run_backup,
    run_kbackup,
)
from tests.recordgen import sample_record
from tests.restore_helpers import Target, check_groups, comparable, run_restore
from tests.s3_server import S3Server
from tests.test_erase import traces_of

HOUR = 3_600_000
#: Records of the Kafka topic, spread over three hours ending a minute ago.
RECORDS = 1_800


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session() as session:
        register(session)
        yield session


def cat(root: Path | str, *args: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in kbackup_lines("cat", root, *args)]


@pytest.fixture(scope="module")
def kafka_backup(kafka: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A compressed snapshot backup, in small segments, of a 3-partition topic (keys, null keys and values, repeated
    and null headers, an aborted transaction) and a LogAppendTime topic; and the time its records start at."""
    from confluent_kafka import Producer

    create_topics(
        kafka, {"ds-events": 3, "ds-appended": 1}, {"ds-appended": {"message.timestamp.type": "LogAppendTime"}}
    )
    start = (int(time.time() * 1000) // HOUR - 3) * HOUR
    producer = Producer(kafka.client_settings(**{"transactional.id": "ds-tx", "linger.ms": "5"}))
    producer.init_transactions(30)
    for batch in range(6):
        producer.begin_transaction()
        for i in range(batch * RECORDS // 6, (batch + 1) * RECORDS // 6):
            producer.produce(
                "ds-events",
                key=None if i % 9 == 0 else b"customer-%d" % (i % 40),
                value=None if i % 17 == 0 else b"event-%d-" % i * (1 + i % 5),
                headers=[("trace", b"%d" % i), ("trace", None)] if i % 4 == 0 else None,
                partition=i % 3,
                timestamp=start + i * (3 * HOUR // RECORDS),
            )
            if i % 10 == 0:
                producer.produce("ds-appended", key=b"a%d" % i, value=b"x")
        if batch == 2:
            producer.flush(30)
            producer.abort_transaction(30)  # offsets taken by aborted records and markers: never rows
        else:
            producer.commit_transaction(30)
    root = tmp_path_factory.mktemp("ds") / "backup"
    settings = client_config_file(tmp_path_factory.mktemp("ds-config") / "client.properties", kafka.extra_settings)
    done = run_backup(
        "--bootstrap-server", kafka.bootstrap_servers, "--command-config", settings, "--target-dir", root,
        "--topics", "ds-events,ds-appended", "--snapshot", "--max-segment-size", "6000", "--compression", "zstd",
        "--checkpoint-location", root.parent / "spark-state",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, start


def test_rows_equal_cat_and_a_query_opens_only_the_segments_it_needs(
    kafka_backup: tuple[Path, int], spark: Any, tmp_path: Path
) -> None:
    root, start = kafka_backup
    expected = cat(root)
    assert len(expected) == RECORDS - RECORDS // 6 + (RECORDS - RECORDS // 6) // 10
    df = spark.read.format("kbackup").load(str(root))
    assert [field.simpleString() for field in df.schema.fields] == [
        "key:binary", "value:binary", "topic:string", "partition:int", "offset:bigint", "timestamp:timestamp",
        "timestampType:int", "headers:array<struct<key:string,value:binary>>",
    ]  # fmt: skip
    assert as_cat(df.collect()) == expected
    assert {r["timestampType"] for r in expected if r["topic"] == "ds-appended"} == {"LogAppendTime"}

    # SQL over the columns: one customer's events, and the records carrying a header.
    df.createOrReplaceTempView("backup")
    customer = spark.sql("SELECT offset FROM backup WHERE key = CAST('customer-7' AS BINARY)").collect()
    assert sorted(row.offset for row in customer) == sorted(
        r["offset"] for r in expected if r["key"] == base64.b64encode(b"customer-7").decode()
    )
    traced = spark.sql("SELECT count(*) AS n FROM backup WHERE array_contains(headers.key, 'trace')").collect()[0].n
    assert traced == sum(1 for r in expected if r["headers"])

    # One partition and one hour: the plan names only the segments whose catalog offsets and times meet them.
    hour_from, hour_to = start + HOUR, start + 2 * HOUR - 1
    wanted = [
        r for r in expected
        if (r["topic"], r["partition"]) == ("ds-events", 1) and r["timestamp"] is not None
        and hour_from <= r["timestamp"] <= hour_to
    ]  # fmt: skip
    assert wanted
    options = scan_options({"path": str(root), "topics": "ds-events", "partitions": "1",
                            "fromTimestamp": str(hour_from), "toTimestamp": str(hour_to)})  # fmt: skip
    planned = plan_scans(options)
    chosen = {name for scan in planned for name in scan.names}
    catalog = read_catalog(root, "ds-events", 1)
    assert catalog is not None
    meeting = {
        entry.name for entry in catalog.segments
        if entry.min_timestamp is not None and entry.max_timestamp is not None
        and entry.min_timestamp <= hour_to and entry.max_timestamp >= hour_from
    }  # fmt: skip
    assert chosen - {catalog.tail.name if catalog.tail else ""} == meeting
    assert 0 < len(meeting) < len(catalog.segments) // 2
    # Every other segment file of (a copy of) the backup removed: the query still gives exactly its rows (verified,
    # read).
    pruned = tmp_path / "pruned"
    shutil.copytree(root, pruned)
    for path in [*pruned.glob("*/segment_*_records"), *pruned.glob("*/segment_*_index")]:
        if path.parent.name != "ds-events" or not any(path.name.startswith(name + "_") for name in chosen):
            path.unlink()
    narrowed = spark.read.format("kbackup").options(
        topics="ds-events", partitions="1", fromTimestamp=str(hour_from), toTimestamp=str(hour_to)
    )
    assert as_cat(narrowed.load(str(pruned)).collect()) == wanted


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A backup written by the backup's partition writer: compressed and encrypted segments, two partitions."""
    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "t", "t", partition, max_segment_size=3000, fsync=False,
                             ledger=CatalogLedger(root), compression="lz4", encryption_key=KEK) as writer:  # fmt: skip
            for i in range(200):
                writer.append(sample_record(i))
    (tmp_path / "kek.hex").write_text(KEK.hex() + "\n")
    return root


KEK = bytes(range(32))


@pytest.fixture
def many_segments(tmp_path: Path) -> Path:
    """A backup of two topics in small segments with a catalog: ``q`` (3 partitions, 400 records each) and ``r``."""
    root = tmp_path / "backup"
    for topic, partitions in (("q", 3), ("r", 1)):
        for partition in range(partitions):
            with PartitionWriter(root / topic, topic, partition, max_segment_size=4000, fsync=False,
                                 ledger=CatalogLedger(root)) as writer:  # fmt: skip
                for i in range(400):
                    writer.append(sample_record(i))
    return root


def test_each_query_of_one_dataframe_and_one_view_gets_its_own_rows_with_pushdown_on(
    spark: Any, many_segments: Path, tmp_path: Path
) -> None:
    """PySpark hands a later scan of a DataFrame the plan an earlier query's pushed filters made: the source takes no
    filter, so queries in a row (a filter, none, an OR, IN, a time window, an export) each answer for themselves."""
    everything = cat(many_segments)
    assert len(everything) == 1600
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    df = spark.read.format("kbackup").load(str(many_segments))
    df.createOrReplaceTempView("repeated")
    start = 1_700_000_000_000

    def where(rows: list[dict[str, Any]], holds: Any) -> list[dict[str, Any]]:
        return [row for row in rows if holds(row)]

    queries: list[tuple[str, Any]] = [
        ("offset < 100", lambda r: r["offset"] < 100),
        ("true", lambda r: True),
        ("partition = 1 OR partition = 2", lambda r: r["partition"] in (1, 2)),
        ("topic = 'r' AND offset >= 600", lambda r: r["topic"] == "r" and r["offset"] >= 600),
        ("partition IN (0, 2) AND offset BETWEEN 300 AND 330",
         lambda r: r["partition"] in (0, 2) and 300 <= r["offset"] <= 330),
        ("true", lambda r: True),
        (f"timestamp >= timestamp_millis({start + 350}) AND timestamp < timestamp_millis({start + 360})",
         lambda r: r["timestamp"] is not None and start + 350 <= r["timestamp"] < start + 360),
        ("timestamp IS NULL OR offset = 3", lambda r: r["timestamp"] is None or r["offset"] == 3),
        ("topic = 'q'", lambda r: r["topic"] == "q"),
        ("key IS NULL", lambda r: r["key"] is None),
        ("true", lambda r: True),
    ]  # fmt: skip
    for number, (condition, holds) in enumerate(queries):
        wanted = where(everything, holds)
        if number % 2 == 0:  # the DataFrame and the view over it in turn, each after the other planned its scan
            assert as_cat(df.filter(condition).collect()) == wanted, f"query {number}: {condition}"
        else:
            shown = spark.sql(f"SELECT count(*) AS n FROM repeated WHERE {condition}").collect()[0].n
            assert shown == len(wanted), f"view {number}: {condition}"
    # Two scans of the DataFrame in one query (a union of two filters) and an export after an exploratory filter.
    assert df.filter("partition = 0 AND offset < 30").count() == 20  # offsets 0, 3 ... 27 of q/0 and r/0
    both = df.filter("partition = 0").union(df.filter("partition = 2 AND offset > 1000")).count()
    assert both == len(where(everything, lambda r: r["partition"] == 0 or (r["partition"] == 2 and r["offset"] > 1000)))
    export = tmp_path / "export"
    df.write.parquet(str(export))
    assert spark.read.parquet(str(export)).count() == len(everything)


def test_a_predicate_failing_on_a_record_is_one_line_naming_sparks_error_class_and_the_predicate(
    spark: Any, many_segments: Path
) -> None:
    """``erase --where`` (the restore's ``--where`` finds its records the same way) with a predicate Spark can plan
    but not evaluate on the records: the error class and the predicate, nothing erased."""
    before = cat(many_segments)
    where = "CAST(CAST(value AS STRING) AS INT) > 0"
    done = kbackup_in_process("erase", many_segments, "--topic", "q", "--where", where)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "CAST_INVALID_INPUT" in said[0] and repr(where) in said[0], done.stderr
    assert "errorClass" not in done.stderr and "Traceback" not in done.stderr
    assert cat(many_segments) == before


#: Predicates the restore's and erase's tasks evaluate on the Arrow rows themselves, and what they hold for on
#: ``edge_records``'s records (the test also has Spark evaluate each).
TRANSLATED: list[tuple[str, Any]] = [
    ("offset % 7 = 3", lambda r: r["offset"] % 7 == 3),
    ("partition IN (0, 5)", lambda r: r["partition"] == 0),
    ("partition IN (1, NULL)", lambda r: r["partition"] == 1),
    ("NOT (partition IN (1, NULL))", lambda r: False),
    ("partition IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)", lambda r: r["partition"] == 1),
    ("timestamp >= '2023-11-14 22:13:20.030'", lambda r: (r["timestamp"] or 0) >= 1_700_000_000_030),
    ("timestamp < '1970-01-01' OR timestamp IS NULL", lambda r: r["timestamp"] is None or r["timestamp"] < 0),
    ("key = CAST('k7' AS BINARY)", lambda r: r["key"] == b"k7"),
    ("key IS NULL", lambda r: r["key"] is None),
    ("CAST(key AS STRING) > 'k5'", lambda r: r["key"] is not None and r["key"] > b"k5"),
    ("CAST(key AS STRING) LIKE 'k1%'", lambda r: r["key"] is not None and r["key"].startswith(b"k1")),
    ("CAST(value AS STRING) LIKE '%z'", lambda r: r["value"] is not None and r["value"].endswith(b"z")),
    ("CAST(value AS STRING) LIKE '%mid%'", lambda r: r["value"] is not None and b"mid" in r["value"]),
    ("key <=> NULL", lambda r: r["key"] is None),
    ("NOT (key <=> CAST('k3' AS BINARY))", lambda r: r["key"] != b"k3"),
    ("topic = 'edge' AND timestampType = 1", lambda r: r["timestamp_type"] == 1),
    ("offset + partition * 1000 > 1030", lambda r: r["offset"] + r["partition"] * 1000 > 1030),
    ("NOT (offset < 10 OR key IS NULL)", lambda r: not (r["offset"] < 10 or r["key"] is None)),
    ("offset BETWEEN 5 AND 9 AND timestamp IS NOT NULL",
     lambda r: 5 <= r["offset"] <= 9 and r["timestamp"] is not None),
    ("offset < 12.5", lambda r: r["offset"] < 12.5),
    ("true", lambda r: True),
    ("offset % 2 = 0 AND NULL", lambda r: False),
    ("offset % 2 = 0 OR NULL", lambda r: r["offset"] % 2 == 0),
]  # fmt: skip


def edge_records(partition: int) -> list[Record]:
    """Null, empty and non-UTF-8 keys, null values, times before 1970 and none, both timestamp types."""
    records = []
    for i in range(40):
        kind = i % 5
        records.append(Record(
            offset=i,
            timestamp_type=(0, 1, -1, 0, 1)[kind],
            timestamp=None if kind == 2 else (-5_000 + i if kind == 3 else 1_700_000_000_000 + i),
            key=(None, b"", b"k%d" % i, b"\xff\x00k", b"k%d" % (i % 10))[kind],
            value=None if kind == 4 else b"v-%d-mid-%s" % (i, b"z" if i % 3 == 0 else b"\xc3"),
        ))  # fmt: skip
    return records


# CI time: in the long tier; the quick tier covers pushdown:
# test_each_query_of_one_dataframe_and_one_view_gets_its_own_rows_with_pushdown_on
@pytest.mark.long
def test_predicates_evaluated_on_the_tasks_rows_hold_for_the_records_sparks_evaluation_finds(
    spark: Any, tmp_path: Path
) -> None:
    """``restore --where``'s fast path: each predicate of :data:`TRANSLATED` is translated from Spark's plan and
    evaluated by the tasks on Arrow rows; the runs are those Spark's own evaluation gives, and the records those
    ``cat`` shows it holds for. A predicate with something else (headers, a function) is evaluated by Spark; one
    whose arithmetic overflows fails as Spark's would, naming its error class."""
    from spark_kafka_backup.restore import matching
    from spark_kafka_backup.restore.predicate_nodes import translated

    root = tmp_path / "backup"
    stored: list[dict[str, Any]] = []
    for partition in (0, 1):
        with PartitionWriter(root / "edge", "edge", partition, max_segment_size=600, fsync=False,
                             ledger=CatalogLedger(root)) as writer:  # fmt: skip
            for record in edge_records(partition):
                writer.append(record)
                stored.append({**record._asdict(), "partition": partition})
    zone = spark.conf.get("spark.sql.session.timeZone")
    scope = matching.MatchScope(parse_location(str(root)), "true")
    try:
        spark.conf.set("spark.sql.session.timeZone", matching.TIME_ZONE)
        # Spark's answers, all in one query of the data source's rows.
        rows = spark.read.format("kbackup").option("logPlan", "false").load(str(root))
        asked = [f"({condition}) AS p{number}" for number, (condition, _) in enumerate(TRANSLATED)]
        flags = rows.selectExpr("partition", "offset", *asked).collect()
        scans = plan_scans(scan_options({"path": str(root), "logPlan": "false"}))
        for number, (condition, holds) in enumerate(TRANSLATED):
            predicate = translated(matching._flagged(matching._stand_in(spark), condition))
            assert predicate is not None, condition
            # The tasks' evaluation, here in the test's process (find_matches hands it to Spark's tasks: below).
            here = _held(runs_of_scan(ScanMatch(scan, predicate)) for scan in scans)
            assert here == {(row.partition, row.offset) for row in flags if row[f"p{number}"]}, condition
            assert here == {(r["partition"], r["offset"]) for r in stored if holds(r)}, condition
        for condition, holds in TRANSLATED[:2]:
            found = matching.find_matches(replace(scope, where=condition), spark, ["edge"])
            assert _as_sets(found) == {(r["partition"], r["offset"]) for r in stored if holds(r)}, condition
        for condition in ("array_contains(headers.key, 'p') OR offset = 3", "length(value) > 12"):
            checked = matching._flagged(matching._stand_in(spark), condition)
            assert translated(checked) is None, condition
        scope = replace(scope, where="length(value) > 12")
        assert _as_sets(matching.find_matches(scope, spark, ["edge"])) == {
            (r["partition"], r["offset"]) for r in stored if r["value"] is not None and len(r["value"]) > 12
        }
        with pytest.raises(UsageError, match="ARITHMETIC_OVERFLOW"):
            matching.find_matches(replace(scope, where="offset * 4611686018427387904 > 0"), spark, ["edge"])
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def _held(found: Iterator[list[Any] | str]) -> set[tuple[int, int]]:
    """The (partition, offset) of every record the tasks' runs hold."""
    held: set[tuple[int, int]] = set()
    for runs in found:
        assert not isinstance(runs, str), runs  # evaluated by the tasks, not left to Spark
        for batch in runs:
            for partition, first, last in zip(batch["partition"].to_pylist(), batch["first"].to_pylist(),
                                              batch["last"].to_pylist(), strict=True):  # fmt: skip
                held.update((partition, offset) for offset in range(first, last + 1))
    return held


def _as_sets(matched: dict[tuple[str, int], Any]) -> set[tuple[int, int]]:
    """The (partition, offset) of every record the runs hold."""
    return {
        (partition, offset)
        for (_, partition), runs in matched.items()
        for first, last in zip(runs.firsts.tolist(), runs.lasts.tolist(), strict=True)
        for offset in range(first, last + 1)
    }


def test_encrypted_segments_read_with_the_key_and_options_narrow_the_rows(spark: Any, written: Path) -> None:
    key_file = written.parent / "kek.hex"
    expected = cat(written, "--encryption-key-file", key_file)
    reader = spark.read.format("kbackup").option("encryptionKeyFile", str(key_file))
    assert as_cat(reader.load(str(written)).collect()) == expected
    narrowed = reader.option("partitions", "1").option("fromOffset", "30").option("toOffset", "90")
    assert as_cat(narrowed.load(str(written)).collect()) == [
        r for r in expected if r["partition"] == 1 and 30 <= r["offset"] <= 90
    ]
    with pytest.raises(Exception, match="no key was given"):
        spark.read.format("kbackup").load(str(written)).collect()
    with pytest.raises(Exception, match="unknown option 'fromoffst'"):  # (a DataFrameReader's options accumulate)
        reader.option("fromOffst", "3").load(str(written)).collect()
    with pytest.raises(Exception, match="its rows have the schema struct<key:binary,"):
        spark.read.format("kbackup").schema("value binary").load(str(written)).collect()
    # An instant whatever the session calls a timestamp.
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")
    keyed = spark.read.format("kbackup").option("encryptionKeyFile", str(key_file))
    assert as_cat(keyed.load(str(written)).collect()) == expected


def test_a_damaged_segment_is_an_error_naming_it_never_wrong_rows(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=3000, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(200):
            writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and len(catalog.segments) > 3
    damaged = catalog.segments[1]
    records = root / "t" / f"{damaged.name}_records"
    data = bytearray(records.read_bytes())
    data[-5] ^= 0x01  # inside a value: the records still decode; only the checksum tells
    records.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"segment {damaged.name} .* is damaged: .*CRC32C"):
        spark.read.format("kbackup").load(str(root)).collect()
    rest = spark.read.format("kbackup").option("skipBadSegments", "true").load(str(root)).collect()
    assert as_cat(rest) == [
        r for r in cat(root, "--no-verify")
        if not damaged.first_offset <= r["offset"] <= damaged.last_offset
    ]  # fmt: skip


@pytest.mark.long  # CI time: the store's reads are covered by the restores from S3 in tests/test_object_storage.py
def test_a_backup_on_the_s3_server_reads_the_same_as_cat(s3: S3Server) -> None:
    root = ObjectPath("s3", s3.new_bucket(), "backups/prod")
    for partition in (0, 1, 2):
        with ObjectPartitionWriter(root / "t", "t", partition, max_segment_size=2500, ledger=CatalogLedger(root),
                                   compression="zstd") as writer:  # fmt: skip
            for i in range(120):
                writer.append(sample_record(i + partition))
    expected = cat(str(root))
    assert len(expected) == 360
    # In a process of its own: the driver's planning runs in a Python worker with the environment the driver's JVM
    # started with, and this worker's kept JVM may predate the server's credentials.
    where = "partition = 2 AND offset BETWEEN 100 AND 200"
    query = [sys.executable, str(REPO / "tests" / "data_source_query.py"), str(root), where]
    done = subprocess.run(query, capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers: list[list[dict[str, Any]]] = [[], []]
    for line in done.stdout.splitlines():
        row = json.loads(line)
        answers[row.pop("query")].append(row)
    assert answers[0] == expected
    assert answers[1] == [r for r in expected if r["partition"] == 2 and 100 <= r["offset"] <= 200]


def test_exports_to_parquet_and_to_a_table_partitioned_by_topic_and_date_keep_every_field(
    spark: Any, written: Path
) -> None:
    """The recipes of docs/data-source.md#export, as written there."""
    from pyspark.sql.functions import to_date

    key_file = written.parent / "kek.hex"
    expected = cat(written, "--encryption-key-file", key_file)
    df = spark.read.format("kbackup").option("encryptionKeyFile", str(key_file)).load(str(written))
    out = written.parent / "export"
    df.withColumn("date", to_date("timestamp")).write.partitionBy("topic", "date").parquet(str(out / "parquet"))
    assert {path.name for path in (out / "parquet").iterdir() if path.is_dir()} == {"topic=t"}
    back = spark.read.parquet(str(out / "parquet")).drop("date")
    assert as_cat(back.collect()) == expected

    (df.withColumn("date", to_date("timestamp"))
       .write.format("orc").partitionBy("topic", "date").option("path", str(out / "table"))
       .saveAsTable("kafka_archive"))  # fmt: skip
    try:
        table = spark.sql("SELECT * FROM kafka_archive WHERE topic = 't'").drop("date")
        assert as_cat(table.collect()) == expected
    finally:
        spark.sql("DROP TABLE kafka_archive")


# CI time: in the long tier; the quick tier covers erase --where: tests/test_erase.py
@pytest.mark.long
def test_erase_where_leaves_no_trace_of_a_customer_and_every_other_record_restores_exactly(
    kafka_backup: tuple[Path, int], spark: Any, target: Target, tmp_path: Path
) -> None:
    """``erase --where`` through Spark on a real backup (zstd, an aborted transaction): no file holds the customer's
    key any more, in its bytes or its segments' plain records, and a restore of what is left is the source less the
    customer's records (tests/test_erase.py has the rest of erase, on files)."""
    root = tmp_path / "backup"
    shutil.copytree(kafka_backup[0], root)
    secret = b"customer-7"
    before = cat(root, "--topic", "ds-events")
    kept = [r for r in before if r["key"] != base64.b64encode(secret).decode()]
    assert traces_of(root, secret) and 0 < len(before) - len(kept) < len(before) // 10
    where = f"key = CAST('{secret.decode()}' AS BINARY)"
    done = kbackup_in_process("erase", root, "--topic", "ds-events", "--where", where)  # on the module's session
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"erased {len(before) - len(kept)} records from 3 partitions of ds-events" in done.stdout
    assert traces_of(root, secret) == []
    assert cat(root, "--topic", "ds-events") == kept
    assert cat(root, "--topic", "ds-appended") == cat(kafka_backup[0], "--topic", "ds-appended")
    verified = run_kbackup("verify", root, "--deep")
    assert verified.returncode == 0 and "erased on purpose" in verified.stdout, verified.stdout + verified.stderr

    # Groups committed at an erased record (the customer's first and last, per partition) resume at the record after
    # it.
    erased = [r for r in before if r not in kept]
    groups = {
        "erased-first": {p: min(r["offset"] for r in erased if r["partition"] == p) for p in range(3)},
        "erased-last": {p: max(r["offset"] for r in erased if r["partition"] == p) for p in range(3)},
    }
    for partition in range(3):
        write_consumer_offsets(root / "ds-events", partition, {g: o[partition] for g, o in groups.items()}, sync=False)
    name = target.name("erased")
    restored = run_restore(*target.args(tmp_path), "--source-dir", root, "--topics", "ds-events",
                           "--topic-map", f"ds-events={name}")  # fmt: skip
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    records = consume_all(target.broker, [name])
    assert comparable(records) == comparable(kept)
    check_groups(target, name, kept, records, groups)
