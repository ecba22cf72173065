"""Requests to a loaded cluster that time out are asked again, within a bound; other failures are not."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_kafka_backup.kafka import permissions


def _failing(codes: list[int], answer: str = "answered") -> tuple[list[float], object]:
    asked: list[float] = []

    def ask(seconds: float) -> str:
        asked.append(seconds)
        if codes:
            raise KafkaException(KafkaError(codes.pop(0)))
        return answer

    return asked, ask


def test_a_request_that_times_out_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_kafka_backup.kafka.permissions.time.sleep", lambda seconds: None)
    asked, ask = _failing([KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE])
    assert permissions._patiently(ask, 15) == "answered"  # type: ignore[arg-type]
    assert len(asked) == 3 and all(1.0 <= seconds <= 15 for seconds in asked)


def test_a_refusal_is_not_asked_again_and_patience_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_kafka_backup.kafka.permissions.time.sleep", lambda seconds: None)
    asked, ask = _failing([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        permissions._patiently(ask, 15)  # type: ignore[arg-type]
    assert len(asked) == 1
    monkeypatch.setattr(permissions, "TIMEOUT_PATIENCE_SECONDS", 0.0)
    asked, ask = _failing([KafkaError._TIMED_OUT] * 5)
    with pytest.raises(KafkaException):
        permissions._patiently(ask, 0.0)  # type: ignore[arg-type]
    assert len(asked) == 1  # no time left: the timeout is the answer
