"""Target topic names a restore refuses before anything is created: Kafka's internal topics and names Kafka
would refuse, each named with the --topic-map that made it."""

from __future__ import annotations

import pytest

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.restore.settings import parse_restore_args


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__transaction_state", "__cluster_metadata"])
def test_an_internal_topic_is_refused_as_a_target_by_name_and_by_mapping(internal: str) -> None:
    settings = parse_restore_args(["--bootstrap-server", "k:9092", "--source-dir", "/b"])
    with pytest.raises(UsageError, match=rf"target topic '{internal}' is one of Kafka's internal topics"):
        settings.check_target_names([internal])  # a backup that holds it, restored under its name
    mapped = parse_restore_args(["--bootstrap-server", "k:9092", "--source-dir", "/b", "--topic-map", f"o={internal}"])
    with pytest.raises(UsageError, match=rf"'{internal}' \(--topic-map o={internal}\) is one of Kafka's internal"):
        mapped.check_target_names(["o"])


@pytest.mark.parametrize("invalid", ["has space", "a/b", "x" * 250, ".."])
def test_a_name_kafka_would_refuse_is_named_as_invalid_not_as_a_permission(invalid: str) -> None:
    settings = parse_restore_args(["--bootstrap-server", "k:9092", "--source-dir", "/b", "--topic-map", f"o={invalid}"])
    with pytest.raises(UsageError, match=r"is not a valid Kafka topic name \(expected 1 to 249 characters"):
        settings.check_target_names(["o"])
    settings.check_target_names(["other.topic_name-1"])  # a valid one passes
