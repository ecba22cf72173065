"""Console logging for kbackup's jobs (driver and the driver-side Spark workers)."""

from __future__ import annotations

import logging
import sys


def ensure_console_logging(*, debug: bool = False) -> None:
    """Send the ``kbackup`` loggers to stdout, once per process (errors go to stderr separately).

    The Kafka client's own log (``kbackup.librdkafka``) is shown only with ``debug``:
    its connection errors reach the user as kbackup's one-line errors.
    """
    logging.getLogger("kbackup.librdkafka").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    logger = logging.getLogger("kbackup")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s kbackup %(levelname)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
