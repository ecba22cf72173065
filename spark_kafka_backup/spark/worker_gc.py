"""Keeping a reused PySpark Python worker from walking its whole heap after every task.

PySpark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by default) and runs a
full ``gc.collect()`` between two tasks. A full collection visits every object the collector tracks, and once
this package's task code is loaded (pyarrow, numpy, confluent-kafka, PySpark itself) that is ~90,000 objects that
live as long as the process: 15-40 ms of CPU per task, in every worker, every micro-batch (the data source's
reader and writer tasks, and the driver-side workers Spark asks for a batch's writer and its commit). Profiled on
a continuous backup, that collection was most of the Python workers' CPU.

:func:`freeze_loaded_objects`, called where a task of ours starts, moves every object alive at that moment into
the collector's permanent generation (``gc.freeze``) whenever modules were loaded since its last call: what
imports create is frozen, a task's own objects are collected as before. Modules load once, so a process freezes a
handful of times however many tasks it runs, and what stays frozen is bounded by what was alive then.

Measured (Apache Kafka 4.1.1, one local node; ``local[2]``; 3 partitions at 800 records/s, trigger 1 s): a
continuous backup's whole job (driver, executors, Python workers; the broker not counted) took 20.0-22.3
CPU-s a minute before, 12.2-13.6 after, with either Kafka source.

Executor side: imports nothing of the package.
"""

from __future__ import annotations

import gc
import sys

#: How many modules were loaded when the objects were last frozen.
_modules_at_freeze = 0


def freeze_loaded_objects() -> None:
    """When modules were loaded since the last call: collect, then exempt every object alive now from later full
    collections. Modules load once, so this freezes a handful of times per process, however many tasks run."""
    global _modules_at_freeze
    if len(sys.modules) == _modules_at_freeze:
        return
    _modules_at_freeze = len(sys.modules)
    gc.collect()
    gc.freeze()
