"""Where the backup's executor-side Python time goes: a pyinstrument profile of read + write.

Run from the repository root: ``./dev bench profile`` (or ``python -m benchmarks.profile_bench``).

N records (default 500,000; 200-byte values, small keys, one header) are
produced into one partition of a local Apache Kafka node (or ``--bootstrap``).
Then, in this one process, what a backup task runs on an executor: the
``kbackup_kafka`` source reading the range into Arrow batches and the
``kbackup_v1`` sink writing them, under pyinstrument; the profile's top is
printed. Spark's own part (moving the batches through the JVM between the
two) is not in it.

``--before REV`` profiles the source and sink modules as they were at git
revision ``REV`` (loaded from ``git show``, beside today's library), for a
before/after comparison on the same data.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.backup_bench import produce
from benchmarks.cluster import cluster

REPO = Path(__file__).resolve().parent.parent


def module_at(revision: str, path: str, name: str) -> types.ModuleType:
    """The module at ``path`` as it was at git ``revision``, loaded under ``name``. A revision from before the rename
    (package ``kbackup``) has it under ``kbackup/``; its imports of the package then name today's modules."""
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, capture_output=True, text=True)
    text = shown.stdout
    if shown.returncode != 0:
        old_path = "kbackup/" + path.removeprefix("spark_kafka_backup/")
        text = subprocess.run(["git", "show", f"{revision}:{old_path}"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        text = re.sub(r"\bkbackup\.", "spark_kafka_backup.", text)
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(text, f"{revision}:{path}", "exec"), module.__dict__)
    return module


def batches(source: Any, settings: dict[str, str], count: int) -> Iterator[Any]:
    """The source's Arrow batches for offsets 0..count-1 of partition 0, whatever the revision's read API."""
    task = source.KafkaRange("bench", 0, 0, count, dict(settings), True, 60)
    if hasattr(source, "read_task"):
        return iter(source.read_task(source.KafkaTask((task,))))
    return iter(source.read_range(task))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--before", help="also profile the source and sink as they were at this git revision")
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")
    args = parser.parse_args()
    from pyinstrument import Profiler

    from spark_kafka_backup.spark import kafka_source, v1_sink

    revisions: list[tuple[str, Any, Any]] = [("now", kafka_source, v1_sink)]
    if args.before:
        old_source = module_at(args.before, "spark_kafka_backup/spark/kafka_source.py", "kbackup_old_kafka_source")
        old_sink = module_at(args.before, "spark_kafka_backup/spark/v1_sink.py", "kbackup_old_v1_sink")
        revisions.insert(0, (args.before, old_source, old_sink))
    with tempfile.TemporaryDirectory() as tmp, cluster(args.bootstrap) as settings:
        produce(settings, args.records, 1, args.value_size)
        for label, source, sink in revisions:
            options = sink.SinkOptions.parse({"path": str(Path(tmp) / f"backup-{label}")})
            writer = sink.V1StreamWriter(options)
            profiler = Profiler(interval=0.001)
            started = time.perf_counter()
            profiler.start()
            message = writer.write(batches(source, settings, args.records))
            profiler.stop()
            seconds = time.perf_counter() - started
            written = sum(part.written for part in message.partitions)
            assert written == args.records, f"{written} records written, {args.records} produced"
            print(f"== {label}: {args.records:,} records read and written in {seconds:.2f} s "
                  f"({args.records / seconds:,.0f} records/s, one process)")  # fmt: skip
            print(profiler.output_text(unicode=False, color=False, show_all=False, short_mode=True)[:6000])


if __name__ == "__main__":
    main()
