"""Turning a Spark job failure into the one line a user needs."""

from __future__ import annotations

import re

_KBACKUP_ERROR = re.compile(r"(kbackup\.[\w.]+Error): (.+)")
# py4j puts the JVM's exception on a line of its own after ": ".
_PYTHON_ERROR = re.compile(r"^(?::\s*)?((?:\w+\.)*\w*(?:Error|Exception)): (.+)$", re.M)
_WRAPPERS = ("org.", "java.", "scala.", "py4j.", "pyspark.")


def failure_cause(failure: BaseException | object) -> str:
    """kbackup's own error if the failure carries one, else the Python worker's last error line, else the first line."""
    text = str(failure)
    match = _KBACKUP_ERROR.search(text)
    if match:
        return f"{match[1].rsplit('.', 1)[-1]}: {match[2].strip()}"
    errors = _PYTHON_ERROR.findall(text)
    # The Python worker's own error is the cause; the JVM's exceptions only wrap it.
    python = [(name, message) for name, message in errors if not name.startswith(_WRAPPERS)]
    if python or errors:
        name, message = (python or errors)[-1]
        return f"{name.rsplit('.', 1)[-1]}: {message.strip()}"[:500]
    return next((line.strip() for line in text.splitlines() if line.strip()), type(failure).__name__)[:500]
