"""``pack``: the packed environment executors run, for ``backup``/``restore --archive`` (see
:mod:`spark_kafka_backup.packing`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TextIO

from spark_kafka_backup.text import shown


def cmd_pack(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.packing import pack

    output = Path(args.output).expanduser().absolute()
    manifest = pack(output, native=args.native, announce=lambda line: print(shown(line), file=sys.stderr))
    size = output.stat().st_size / (1 << 20)
    out.write(
        f"{output}: {size:,.0f} MiB, {manifest.describe()}\n"
        f"ship it with: spark-kafka-backup backup|restore --master spark://HOST:7077 --archive "
        f"{shlex.quote(str(output))} ...\n"
        f"(each executor needs the driver's Spark version and python{manifest.python} on its PATH; docs/deploy.md)\n"
    )
