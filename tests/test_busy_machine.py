"""On Apache Kafka: a backup on a machine too busy for Spark to start its Python processes in time (issue 30).

Spark waits a fixed 10 s for a Python process it starts on the driver (the Python data source's runners) to
connect back, and stops the streaming query when one does not. Here that is made to happen for real: a
``sitecustomize`` on the job's ``PYTHONPATH`` holds the first runner of spark-kafka-backup's streaming source for 15 s
before it may connect. The backup starts its query again from its checkpoint, says so in one line, and ends with every
record once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, backup_command, consume_all, create_topics, job_env
from tests.live_load import client_args

#: Held once: the process Spark starts on the driver for spark-kafka-backup's streaming source (its command line names
#: the module). It is the one Python process of a backup Spark starts itself and waits for (the others are forked by
#: Spark's Python daemons, which connect through their own socket).
SLOW_START = r"""
import os, time
marker = os.environ.get("KBACKUP_TEST_SLOW_WORKER")
if marker:
    with open("/proc/self/cmdline", "rb") as command:
        started_as = command.read()
    with open(marker + ".log", "ab") as seen:
        seen.write(started_as + repr(sorted(k for k in os.environ if k.startswith("PYTHON_"))).encode() + b"\n")
if marker and "PYTHON_WORKER_FACTORY_PORT" in os.environ:
    if b"python_streaming_source_runner" in started_as:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            time.sleep(15)
"""


@pytest.mark.long
def test_a_query_stopped_by_a_python_worker_that_started_too_late_is_started_again(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    topic = "busy-machine"
    create_topics(kafka, {topic: 2})
    _produce(kafka, topic, 400)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    marker = tmp_path / "held-once"
    env = {
        **job_env(),
        "KBACKUP_TEST_SLOW_WORKER": str(marker),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    backup = tmp_path / "backup"
    command = backup_command(*client_args(kafka, tmp_path), "--target-dir", backup, "--topics", topic, "--snapshot")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=400)

    assert marker.exists(), "the sink runner was never held: the test did not test anything"
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    restarted = [line for line in output.splitlines() if "starting it again from its checkpoint" in line]
    assert len(restarted) == 1, output[-4000:]
    assert "Spark did not get a Python process of its own started in time" in restarted[0]
    assert "Python worker failed to connect back" in restarted[0]
    assert backed_up(backup, [topic]) == consume_all(kafka, [topic])


def _produce(kafka: BrokerUnderTest, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings())
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2, headers=[("n", b"%d" % i)])
    assert producer.flush(60) == 0
