"""How long the cluster has not answered, and the progress lines that say so.

A continuous backup does not end when the source cluster stops answering: the
parts that ask it periodically (the source's planning, the consumer offset
rounds) note each transient failure here and go on. The first failure of an
outage and then one every ``every`` seconds are logged as
``source cluster not answering for N s (cause); consequence; ...``, and the
first answer after it as ``source cluster answers again after N s``.
Operators and the tests read these lines; keep their wording.

Not thread-safe: one tracker per thread that asks the cluster.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable


class OutageReport:
    """The state of one outage (none, or since when), for one part of the job that asks the cluster."""

    def __init__(self, logger: logging.Logger, *, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._every = every
        self._clock = clock
        self._since: float | None = None
        self._logged = -math.inf

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, asked: float, cause: Exception, consequence: str) -> float:
        """A transient failure of a request sent at ``asked`` (monotonic); returns how long the outage lasts."""
        now = self._clock()
        if self._since is None:
            self._since = asked
        waited = now - self._since
        if now - self._logged >= self._every:
            self._logged = now
            self._log.warning("source cluster not answering for %.0f s (%s); %s", waited, cause, consequence)
        return waited

    def answered(self) -> None:
        """The cluster answered: an outage, if there was one, is over."""
        if self._since is None:
            return
        self._log.info("source cluster answers again after %.0f s", self._clock() - self._since)
        self._since = None
        self._logged = -math.inf
