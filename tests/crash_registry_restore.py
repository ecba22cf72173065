"""Child process of the schema-registry kill test: the restore's registry step, killed at one of its requests.

Usage: python -m tests.crash_registry_restore KILL_AT RESTORE_ARGS...

Runs the restore job's ``main`` with RESTORE_ARGS. Its KILL_AT-th request to a schema registry ends the process with
SIGKILL: before the request is sent when KILL_AT is odd, after the registry answered it (the answer lost) when even.
When the registry step finishes before that request, the process exits 99 at once, before Spark starts.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any
from unittest import mock

import spark_kafka_backup.restore.job as restore_job
from spark_kafka_backup.restore.schemas import register_schemas
from spark_kafka_backup.schema_registry.client import RegistryClient

FINISHED = 99


def main() -> None:
    kill_at = int(sys.argv[1])
    calls = 0
    real_request = RegistryClient.request

    def dying(self: RegistryClient, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == kill_at and kill_at % 2 == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            return real_request(self, *args, **kwargs)
        finally:  # a refusal (a lookup that finds nothing) is an answer too
            if calls == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    real_step = register_schemas

    def step_then_exit(*args: Any, **kwargs: Any) -> Any:
        real_step(*args, **kwargs)
        os._exit(FINISHED)

    RegistryClient.request = dying  # type: ignore[method-assign]
    with mock.patch.object(restore_job, "register_schemas", step_then_exit):  # the name the job calls
        sys.exit(restore_job.main(sys.argv[2:]))


if __name__ == "__main__":
    main()
