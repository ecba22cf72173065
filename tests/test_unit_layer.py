"""``./dev unit`` (pytest on tests/unit) resolves no jar and prepares no JVM: the cache that an integration run fills
before any test (Kafka's and Spark's jars, the JVM class archive) is not even created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_unit_layer_runs_without_jars_or_a_jvm(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "KBACKUP_CACHE": str(cache)}
    env.pop("KBACKUP_TEST_RUN", None)
    unit = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_frames.py"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert unit.returncode == 0, unit.stdout[-3000:] + unit.stderr[-3000:]
    assert not cache.exists(), sorted(cache.rglob("*"))
