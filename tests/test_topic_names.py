"""Every legal Kafka topic name is a topic: backed up, listed, verified and restored with every record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, consume_all, create_topics, run_backup, run_kbackup
from tests.restore_helpers import Target, comparable, run_restore

#: Names starting with "." and "_", the old state directory's name, both separators, and the longest legal name.
NAMES = [".kbackup", ".hidden", "_private", "a.b_c-D9", "x" * 249]


# CI time: in the long tier; the quick tier covers names refused or kept: tests/test_untrusted_backup.py,
# tests/unit/test_restore_target_names.py
@pytest.mark.long
def test_every_legal_topic_name_is_backed_up_listed_and_restored(
    kafka: BrokerUnderTest, target: Target, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    names = NAMES
    # tests/test_backup_snapshot.py makes ".kbackup" too (2 partitions, no records) when it shares the broker.
    create_topics(kafka, dict.fromkeys(names, 2), exist_ok=True)
    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true"}))
    for n, name in enumerate(names):
        for i in range(100 + n):
            producer.produce(name, key=f"{n}-{i}".encode(), value=b"v" * (i % 7), partition=i % 2,
                             headers=[("i", str(i).encode())])  # fmt: skip
    assert producer.flush(30) == 0
    backup = tmp_path / "backup"
    done = run_backup("--bootstrap-server", kafka.bootstrap_servers, "--target-dir", backup,
                      "--topics", ",".join(names), "--snapshot")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listed = run_kbackup("ls", backup)
    assert listed.returncode == 0, listed.stderr
    for name in names:
        assert name in listed.stdout
    verified = run_kbackup("verify", backup)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    source = consume_all(kafka, names)
    assert backed_up(backup, names) == source
    restored_names = {name: target.name(name)[:249] for name in names}
    maps = [arg for name, new in restored_names.items() if new != name for arg in ("--topic-map", f"{name}={new}")]
    result = run_restore(*target.args(tmp_path), "--source-dir", backup, *maps)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    restored = consume_all(target.broker, list(restored_names.values()))
    for name, new in restored_names.items():
        assert comparable(restored, topic=new) == comparable(source, topic=name), name
