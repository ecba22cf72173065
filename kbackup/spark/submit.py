"""Running kbackup's jobs with the ``spark-submit`` of this Python environment (demo, benchmarks, tests)."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

#: The checkout's root, where ``jobs/`` lives.
REPO = Path(__file__).resolve().parent.parent.parent


def spark_submit_command(job: str, *args: str | Path, master: str = "local[2]") -> list[str]:
    """``spark-submit --master MASTER jobs/JOB.py ARGS`` with this environment's ``spark-submit``.

    With ``--kafka-source spark`` among ``args``, Spark's Kafka connector jars
    (resolved once into the cache) are passed with ``--jars``.
    """
    texts = [str(arg) for arg in args]
    jars: list[str] = []
    if any(a == "--kafka-source" and b == "spark" for a, b in itertools.pairwise(texts)) or (
        "--kafka-source=spark" in texts
    ):
        from kbackup.spark.kafka_connector import connector_jars

        jars = ["--jars", ",".join(str(jar) for jar in connector_jars())]
    return [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        master,
        "--conf",
        "spark.ui.enabled=false",
        *jars,
        str(REPO / "jobs" / f"{job}.py"),
        *texts,
    ]


def job_environment(*, importable: Path | None = REPO) -> dict[str, str]:
    """This interpreter on the driver and every executor; ``importable`` added to ``PYTHONPATH``."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    # The driver listens on loopback (the demo's, benchmarks' and tests' clusters are all local).
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if importable is not None:
        env["PYTHONPATH"] = str(importable) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def client_config_file(path: Path, settings: dict[str, str]) -> Path:
    """Write Kafka client settings (without ``bootstrap.servers``) as a ``--command-config`` file."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items() if key != "bootstrap.servers"))
    return path
