"""Pure logic of the backup job: configuration, topic selection, offsets, admission, timestamps."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_kafka_backup.backup.settings import parse_backup_args
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.kafka.client_settings import redact
from spark_kafka_backup.kafka.java_client_settings import librdkafka_settings
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.properties import parse_properties
from spark_kafka_backup.spark.kafka_planning import admit
from spark_kafka_backup.spark.source_options import SourceOptions, decode_offsets, encode_offsets
from spark_kafka_backup.spark.v1_sink import SinkOptions, v1_timestamp, v1_timestamps


def test_properties_syntax() -> None:
    text = (
        "# comment\n! also\ntopics:orders\ntarget.dir = /data/backup\n"
        "key value with spaces\nlong=a\\\n    b\nesc=x\\=y\\tz\n"
    )
    assert parse_properties(text) == {
        "topics": "orders",
        "target.dir": "/data/backup",
        "key": "value with spaces",
        "long": "ab",
        "esc": "x=y\tz",
    }


def test_settings_from_the_originals_properties_and_flags(tmp_path: Path) -> None:
    properties = tmp_path / "sink.properties"
    properties.write_text(
        "name=backup-sink\nconnector.class=de.azapps.kafkabackup.sink.BackupSinkConnector\ntasks.max=1\n"
        "key.converter=x\nvalue.converter=x\nheader.converter=x\n"
        "target.dir=/data/b\ntopics.regex=orders-.*\nmax.segment.size.bytes=1000\nsnapshot=true\n"
        "cluster.bootstrap.servers=k1:9092\ncluster.security.protocol=SSL\n"
    )
    settings = parse_backup_args(["--properties", str(properties), "--offsets-interval", "5"])
    assert settings.target == Path("/data/b")
    assert settings.selection == TopicSelection(pattern="orders-.*")
    assert settings.files.max_segment_size == 1000
    assert settings.snapshot is True
    assert settings.client == {"bootstrap.servers": "k1:9092", "security.protocol": "SSL"}
    assert settings.checkpoint == Path("/data/b/kbackup~state/spark-checkpoint")
    assert settings.offsets_interval == 5


def test_flags_of_backup_standalone(tmp_path: Path) -> None:
    config = tmp_path / "command.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="bob" password="s3=cr:t";\n'
    )
    settings = parse_backup_args(
        [
            "--bootstrap-server",
            "k:9092",
            "--target-dir",
            "/b",
            "--topics",
            "a, b,a",
            "--max-segment-size",
            "64",
            "--command-config",
            str(config),
            "--snapshot",
        ]
    )
    assert settings.selection.topics == ("a", "b")
    assert settings.client == {
        "bootstrap.servers": "k:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "s3=cr:t",
    }
    assert redact(settings.client)["sasl.password"] == "***"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-dir", "/b", "--topics", "a"], "give the cluster: --bootstrap-server"),
        (["--bootstrap-server", "k:1", "--topics", "a"], "needs a target directory"),
        (["--bootstrap-server", "k:1", "--target-dir", "/b"], "say what to back up"),
        (["--bootstrap-server", "k:1", "--target-dir", "/b", "--topics-regex", "("], "invalid topic regex"),
        (["--bootstrap-server", "k:1", "--target-dir", "/b", "--topics", "a", "--spark-conf", "x"], "KEY=VALUE"),
    ],
)
def test_settings_errors(args: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_backup_args(args)


def test_an_unreadable_trust_store_and_other_login_modules_are_refused_in_one_line() -> None:
    # Stores that can be read are tested in test_key_stores.py.
    with pytest.raises(UsageError, match=r"cc: ssl.truststore.location /x.jks: cannot be read \(No such file"):
        librdkafka_settings({"ssl.truststore.location": "/x.jks"}, source="cc")
    with pytest.raises(UsageError, match="GssapiLoginModule"):
        librdkafka_settings({"sasl.jaas.config": "com.sun.GssapiLoginModule required;"}, source="cc")


def test_oauthbearer_login_module_becomes_librdkafka_oidc_or_unsecured_tokens() -> None:
    from spark_kafka_backup.kafka.client_settings import librdkafka_refusal, redact

    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class": module.replace("LoginModule", "LoginCallbackHandler"),
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.jaas.config": f'{module} required clientId="spark-kafka-backup" clientSecret="s3cr3t" scope="kafka" '
        'extension_tenant="t1";',
    }
    oidc = librdkafka_settings(java, source="cc")
    assert oidc == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "spark-kafka-backup",
        "sasl.oauthbearer.client.secret": "s3cr3t",
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "tenant=t1",
    }
    assert librdkafka_refusal({**oidc, "bootstrap.servers": "k:9093"}) is None  # librdkafka takes them as they are
    assert "s3cr3t" not in str(redact(oidc))
    unsecured = librdkafka_settings(
        {**java, "sasl.jaas.config": f'{module} required unsecuredLoginStringClaim_sub="backup";'}, source="cc"
    )
    assert unsecured["enable.sasl.oauthbearer.unsecure.jwt"] == "true"
    assert unsecured["sasl.oauthbearer.config"] == "principal=backup"
    with pytest.raises(
        UsageError, match=r"cc: sasl.jaas.config for .*OAuthBearerLoginModule needs clientId and clientSecret"
    ):
        librdkafka_settings({"sasl.jaas.config": f'{module} required clientId="spark-kafka-backup";'}, source="cc")


def test_topic_selection() -> None:
    regex = TopicSelection(pattern="orders.*")
    assert regex.select(["orders", "orders-eu", "my-orders", "__consumer_offsets"]) == ["orders", "orders-eu"]
    assert not TopicSelection(pattern=".*").matches("__transaction_state")
    assert TopicSelection.from_list("b,a").select(["a", "c"]) == ["a"]
    with pytest.raises(UsageError):
        TopicSelection(topics=("a",), pattern="b")


def test_offsets_are_canonical() -> None:
    offsets = {("b", 10): 5, ("a", 2): 1, ("b", 9): 7, ("a", 0): 3}
    encoded = encode_offsets(offsets)
    assert json.dumps(encoded) == '{"v": 1, "topics": {"a": {"0": 3, "2": 1}, "b": {"9": 7, "10": 5}}}'
    assert decode_offsets(json.loads(json.dumps(encoded))) == offsets
    assert json.dumps(encode_offsets(dict(reversed(list(offsets.items()))))) == json.dumps(encoded)


def test_admission_shares_the_limit_in_proportion() -> None:
    begin = {("t", 0): 100, ("t", 1): 0}
    available = {("t", 0): 300, ("t", 1): 100}
    assert admit(begin, {}, available, ReadAllAvailable()) == {("t", 0): 400, ("t", 1): 100}
    assert admit(begin, {}, available, ReadMaxRows(40)) == {("t", 0): 130, ("t", 1): 10}
    # A limit too small to share still makes progress.
    assert admit(begin, {}, available, ReadMaxRows(1)) == {("t", 0): 101, ("t", 1): 0}


def test_source_and_sink_options_are_checked() -> None:
    with pytest.raises(UsageError, match="unknown option 'subscribed'"):
        SourceOptions.parse({"kafka.bootstrap.servers": "k:1", "subscribed": "a"})
    with pytest.raises(UsageError, match="exactly one of the options subscribe and subscribePattern"):
        SourceOptions.parse({"kafka.bootstrap.servers": "k:1"})
    options = SourceOptions.parse(
        {"kafka.bootstrap.servers": "k:1", "subscribe": "a", "startingOffsets": '{"a": {"0": 5}}'}
    )
    assert options.starting == {("a", 0): 5}
    assert options.client["isolation.level"] == "read_committed"
    with pytest.raises(UsageError, match="unknown option 'maxsegment'"):
        SinkOptions.parse({"path": "/b", "maxsegment": "1"})


@pytest.mark.parametrize(
    ("kafka_type", "micros", "expected"),
    [
        (0, 1_700_000_000_123_000, (0, 1_700_000_000_123)),
        (0, -1000, (-2, None)),  # CreateTime without a timestamp: the original's -2
        (0, None, (-2, None)),
        (1, 1_700_000_000_456_000, (1, 1_700_000_000_456)),
        (-1, -1000, (-1, None)),
        (0, -86_400_000_000, (0, -86_400_000)),  # before 1970
        (0, -1500, (0, -2)),  # floor, as Java's Math.floorDiv
        (1, None, (-1, None)),
        (None, 5000, (-1, None)),
    ],
)
def test_timestamp_mapping(kafka_type: int | None, micros: int | None, expected: tuple[int, int | None]) -> None:
    if kafka_type is not None:
        assert v1_timestamp(kafka_type, micros) == expected
    # The sink's columnar form agrees, also inside a batch of other rows.
    types, millis = v1_timestamps(
        pa.array([1, kafka_type, 0], pa.int32()),
        pa.array([7000, micros, None], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    )
    assert (int(types[1]), int(millis[1]) if expected[1] is not None else None) == expected
    assert types.tolist() == [1, expected[0], -2] and millis[0] == 7


def test_restore_accepts_the_originals_source_properties(tmp_path: Path) -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    properties = tmp_path / "source.properties"
    properties.write_text(
        "name=backup-source\nconnector.class=de.azapps.kafkabackup.source.BackupSourceConnector\ntasks.max=1\n"
        "source.dir=/backups/prod\ntopics=orders,payments\nbatch.size=65536\ncluster.bootstrap.servers=new:9092\n"
    )
    settings = parse_restore_args(["--properties", str(properties), "--topic-map", "orders=orders-copy"])
    assert settings.source == Path("/backups/prod")
    assert settings.selection == TopicSelection(topics=("orders", "payments"))
    assert settings.batch_size == 65536
    assert settings.client == {"bootstrap.servers": "new:9092"}
    assert settings.target_topic("orders") == "orders-copy"
    assert settings.target_topic("payments") == "payments"
    with pytest.raises(UsageError, match=r"--source-dir '/x' disagrees with source\.dir='/backups/prod'"):
        parse_restore_args(["--properties", str(properties), "--source-dir", "/x"])
    properties.write_text("target.dir=/b\n")
    with pytest.raises(UsageError, match=r"unknown property 'target\.dir'"):
        parse_restore_args(["--properties", str(properties)])


def test_restore_windows_and_times() -> None:
    from spark_kafka_backup.argtypes import parse_time
    from spark_kafka_backup.restore.settings import parse_restore_args

    assert parse_time("2026-11-22T08:00:00Z", "--from-time") == 1_795_334_400_000
    assert parse_time("2026-11-22T09:00:00+01:00", "--from-time") == 1_795_334_400_000
    assert parse_time("1795334400000", "--from-time") == 1_795_334_400_000
    settings = parse_restore_args(
        [
            "--bootstrap-server",
            "k:1",
            "--source-dir",
            "/b",
            "--offset-window",
            "orders=10..20",
            "--offset-window",
            "orders:3=..5",
            "--to-time",
            "1795334400000",
        ]
    )
    assert settings.window("orders", 0) == Window(10, 20, None, 1_795_334_400_000)
    assert settings.window("orders", 3) == Window(None, 5, None, 1_795_334_400_000)
    assert settings.window("other", 0) == Window(None, None, None, 1_795_334_400_000)
    with pytest.raises(UsageError, match="FROM is above TO"):
        parse_restore_args(["--bootstrap-server", "k:1", "--source-dir", "/b", "--offset-window", "t=9..2"])


def test_topic_map_onto_a_restored_topic_is_refused_when_parsed() -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "k:1", "--source-dir", "/b"]
    with pytest.raises(UsageError) as refused:
        parse_restore_args([*base, "--topics", "small,dmg", "--topic-map", "small=dmg"])
    assert str(refused.value) == (
        "--topic-map small=dmg would restore 2 topics (small, dmg) into one topic 'dmg', and 'dmg' itself is "
        "restored; map 'dmg' elsewhere too, or leave one out with --topics"
    )
    # A swap, or a rename onto a name that is not restored, is fine.
    swapped = parse_restore_args([*base, "--topics", "small,dmg", "--topic-map", "small=dmg", "--topic-map", "dmg=x"])
    assert [swapped.target_topic(t) for t in ("small", "dmg")] == ["dmg", "x"]
    parse_restore_args([*base, "--topics", "small", "--topic-map", "small=dmg"])


def test_monitoring_options_of_both_jobs(tmp_path: Path) -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "b:9092", "--target-dir", str(tmp_path), "--topics", "t"]
    settings = parse_backup_args(
        [*base, "--metrics-port", "127.0.0.1:9108", "--metrics-file", str(tmp_path / "m.prom"), "--log-format", "json"]
    )
    assert settings.monitoring.metrics_listen == ("127.0.0.1", 9108)
    assert settings.monitoring.metrics_file == tmp_path / "m.prom"
    assert settings.monitoring.log_format == "json" and settings.monitoring.metrics_interval == 15
    assert not parse_backup_args(base).monitoring.publisher("backup").enabled
    restore = parse_restore_args(["--bootstrap-server", "b:9092", "--source-dir", str(tmp_path), "--metrics-port", "0"])
    assert restore.monitoring.metrics_listen == ("127.0.0.1", 0)  # loopback unless told
    every = parse_backup_args([*base, "--metrics-port", "9108", "--metrics-bind", "0.0.0.0"])
    assert every.monitoring.metrics_listen == ("0.0.0.0", 9108)
    with pytest.raises(UsageError, match="--metrics-bind is the address of --metrics-port: give the port too"):
        parse_backup_args([*base, "--metrics-bind", "0.0.0.0"])
    with pytest.raises(UsageError, match=r"--metrics-port: expected PORT or HOST:PORT .* got 'x:99999'"):
        parse_backup_args([*base, "--metrics-port", "x:99999"])
    with pytest.raises(
        UsageError, match=re.escape(f"--metrics-file {tmp_path}/no/m.json: the directory {tmp_path}/no")
    ):
        parse_backup_args([*base, "--metrics-file", str(tmp_path / "no" / "m.json")])
    sink = SinkOptions.parse({"path": str(tmp_path), "logFormat": "json", "statsDir": str(tmp_path)})
    assert sink.log_format == "json" and sink.stats_dir == tmp_path


def test_batch_stats_are_consumed_once_in_batch_order(tmp_path: Path) -> None:
    from spark_kafka_backup.spark.v1_sink import read_batch_stats, write_batch_stats

    write_batch_stats(tmp_path, 12, {"b": [5, 50, 0]})
    write_batch_stats(tmp_path, 3, {"a": [1, 10, 2]})
    (tmp_path / "batch-7.json").write_text("{torn")  # a reader never sees this (atomic rename); dropped if it did
    (tmp_path / "batch-8.json").write_text('{"batch": 8}')
    found = read_batch_stats(tmp_path)
    assert [(s.batch, s.topics, s.read) for s in found] == [(3, {"a": (1, 10)}, 3), (12, {"b": (5, 50)}, 5)]
    assert all(abs(s.at - time.time()) < 60 for s in found)
    assert read_batch_stats(tmp_path) == [] and not list(tmp_path.iterdir())
    write_batch_stats(tmp_path / "gone", 4, {"a": [1, 1, 0]})  # the job ended: nothing to report to, no error


@pytest.mark.parametrize(("given", "taken"), [("python", "python"), ("spark", "spark"), ("kbackup", "python")])
def test_the_kafka_source_keeps_its_name_from_before_the_rename(given: str, taken: str) -> None:
    base = ["--bootstrap-server", "h:9092", "--target-dir", "/b", "--topics", "t"]
    assert parse_backup_args([*base, "--kafka-source", given]).kafka_source == taken


@pytest.mark.parametrize("interval", ["inf", "nan", "0", "-1"])
def test_an_interval_must_be_a_finite_number_above_0(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-server", "h:9092", "--target-dir", "/b", "--topics", "t"]
    with pytest.raises(SystemExit):
        parse_backup_args([*base, "--metrics-interval", interval])
    assert f"expected a number > 0, got '{interval}'" in capsys.readouterr().err


def test_repartition_is_given_for_every_topic_or_one_target_topic() -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "k:1", "--source-dir", "/b"]
    settings = parse_restore_args([*base, "--repartition", "orders-new=murmur2", "--repartition", "round-robin"])
    assert settings.repartition_mode("orders-new") == "murmur2"
    assert settings.repartition_mode("payments") == "round-robin"
    assert parse_restore_args(base).repartition_mode("orders") == "keep"
    for wrong, message in [
        (["--repartition", "orders=hash"], r"--repartition takes \[TOPIC=\]MODE, not 'orders=hash' \(MODE: keep, "),
        (["--repartition", "=murmur2"], "takes"),
        (["--repartition", "a=keep", "--repartition", "a=murmur2"], "--repartition gives 'a' twice"),
        (["--repartition", "keep", "--repartition", "murmur2"], "--repartition gives every topic twice"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_restore_args([*base, *wrong])


def test_partitions_and_repartition_must_name_a_topic_the_restore_writes_into() -> None:
    from spark_kafka_backup.restore.settings import parse_restore_args

    base = ["--bootstrap-server", "k:1", "--source-dir", "/b", "--topic-map", "orders=orders-new"]
    settings = parse_restore_args([*base, "--partitions", "orders-new=6", "--repartition", "orders-new=murmur2"])
    settings.check_target_options(["orders", "payments"])  # both name the target: accepted
    renamed = parse_restore_args([*base, "--partitions", "orders=6"])
    with pytest.raises(UsageError) as refused:
        renamed.check_target_options(["orders", "payments"])
    assert str(refused.value) == (
        "--partitions orders=...: 'orders' is not a topic this restore writes into (it is restored as 'orders-new': "
        "name the target topic); it writes into 'orders-new', 'payments'"
    )
    typo = parse_restore_args([*base, "--repartition", "paymnets=round-robin"])
    with pytest.raises(UsageError, match=r"--repartition paymnets=\.\.\.: 'paymnets' is not a topic this restore"):
        typo.check_target_options(["orders", "payments"])


def test_the_schema_registry_is_captured_every_offsets_interval_unless_told_otherwise(tmp_path: Path) -> None:
    base = ["--bootstrap-server", "b:9092", "--target-dir", str(tmp_path), "--topics", "t"]
    registry = ["--schema-registry", "http://registry:8081"]
    assert parse_backup_args([*base, *registry]).schema_registry_interval is None
    settings = parse_backup_args([*base, *registry, "--offsets-interval", "30", "--schema-registry-interval", "600"])
    assert settings.schema_registry_interval == 600.0 and settings.offsets_interval == 30.0
    with pytest.raises(UsageError, match="--schema-registry-interval needs --schema-registry"):
        parse_backup_args([*base, "--schema-registry-interval", "600"])
    with pytest.raises(UsageError, match="--schema-registry-interval is for a continuous backup"):
        parse_backup_args([*base, *registry, "--schema-registry-interval", "600", "--snapshot"])


def test_the_files_options_cross_spark_as_strings_and_come_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One typed object on each side of the Spark boundary: parse(options()) is the object, every field set."""
    import dataclasses

    from spark_kafka_backup.storage import parse_location

    monkeypatch.setenv("KBACKUP_TEST_KEY", "ab" * 32)
    settings = parse_backup_args(
        ["--bootstrap-server", "b:9092", "--target-dir", str(tmp_path), "--topics", "a", "--compression", "ZSTD",
         "--max-segment-size", "4096", "--encryption-key-env", "KBACKUP_TEST_KEY", "--log-format", "json"]
    )  # fmt: skip
    files = settings.files
    assert (files.compression, files.max_segment_size, files.encryption_key_env) == ("zstd", 4096, "KBACKUP_TEST_KEY")
    full = dataclasses.replace(
        files, lock_timeout=12.5, fsync=False, umask=0o027, stats_dir=tmp_path / "stats", check_source=True,
        client={"security.protocol": "SSL"}, schema_ids=True, encryption_key_file=str(tmp_path / "kek.hex"),
    )  # fmt: skip
    defaults = SinkOptions(parse_location(str(tmp_path)))
    for options in (files, full, defaults):
        text = options.options()
        assert all(isinstance(value, str) for value in text.values()), text
        assert SinkOptions.parse(text) == options
    unexercised = [
        f.name for f in dataclasses.fields(SinkOptions) if getattr(full, f.name) == getattr(defaults, f.name)
    ]
    assert unexercised == ["target"], "every field but the root crosses with a value other than its default"
    # An option added on the command line reaches the writing tasks with no other change (--lock-timeout).
    waiting = parse_backup_args(
        ["--bootstrap-server", "b:9092", "--target-dir", str(tmp_path), "--topics", "a", "--lock-timeout", "5"]
    )
    assert SinkOptions.parse(waiting.files.options()).lock_timeout == 5.0
    # No compression is None past the command line; "none" only spells it.
    plain = parse_backup_args(["--bootstrap-server", "b:9092", "--target-dir", str(tmp_path), "--topics", "a"])
    assert plain.files.compression is None and plain.files.options()["compression"] == "none"
    assert SinkOptions.parse({"path": str(tmp_path), "compression": "NONE"}).compression is None
    with pytest.raises(UsageError, match="compression is one of none, zstd, lz4, gzip, not 'brotli'"):
        SinkOptions.parse({"path": str(tmp_path), "compression": "brotli"})
    with pytest.raises(UsageError, match="compression is one of none, zstd, lz4, gzip, not 'snappy'"):
        SinkOptions(defaults.target, compression="snappy")


def test_readers_fetch_again_soon_after_a_full_queue_unless_the_user_says_otherwise() -> None:
    from spark_kafka_backup.kafka.client_settings import consumer_settings, librdkafka_refusal

    settings = consumer_settings({"bootstrap.servers": "k:9092"})
    # librdkafka's own default (1,000 ms since 2.4) idled backup tasks for more than half their time.
    assert int(settings["fetch.queue.backoff.ms"]) < 100
    assert librdkafka_refusal(settings) is None  # the librdkafka installed here knows the property
    chosen = consumer_settings({"bootstrap.servers": "k:9092", "fetch.queue.backoff.ms": "250",
                                "enable.auto.commit": "true"})  # fmt: skip
    assert chosen["fetch.queue.backoff.ms"] == "250"
    assert chosen["enable.auto.commit"] == "false"  # one of the two it decides whatever is passed
    # The prefetch queue is part of a task's memory: bounded below librdkafka's 64 MiB, and the user's value wins.
    assert int(settings["queued.max.messages.kbytes"]) <= 16384
    assert consumer_settings({"queued.max.messages.kbytes": "1024"})["queued.max.messages.kbytes"] == "1024"
