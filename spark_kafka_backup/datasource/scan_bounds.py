"""What a query's filters say about which segments can hold its rows (pure: pyspark's filter classes, no files).

Spark hands the data source the conjuncts of a query's ``WHERE`` it can express (``pushFilters``): comparisons of a
column with a literal, ``IN``, ``IS NULL``... Those on ``topic``, ``partition``, ``offset`` and ``timestamp`` narrow
the scan; every filter is still given back to Spark, which evaluates it on the rows read. So pruning only has to
be safe (never drop a segment that holds a matching row), and the rows stay exactly Spark's answer.

Times: a ``timestamp`` literal is an instant in microseconds; records carry milliseconds. ``timestamp >= t`` holds
for a record of ``ms`` when ``ms * 1000 >= t``, i.e. ``ms >= ceil(t / 1000)``; the other comparisons likewise.
A record without a timestamp (null) matches no comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
)


@dataclass(frozen=True)
class ScanBounds:
    """Rows outside these bounds match no pushed filter (``None``: open). ``nothing``: the filters contradict."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    low_partition: int | None = None
    high_partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    from_time: int | None = None
    to_time: int | None = None
    nothing: bool = False

    def takes_topic(self, topic: str) -> bool:
        return not self.nothing and (self.topics is None or topic in self.topics)

    def takes_partition(self, partition: int) -> bool:
        if self.nothing or (self.partitions is not None and partition not in self.partitions):
            return False
        if self.low_partition is not None and partition < self.low_partition:
            return False
        return self.high_partition is None or partition <= self.high_partition


def scan_bounds(filters: Iterable[Filter]) -> ScanBounds:
    """The bounds the conjunction of ``filters`` implies (filters on other columns, or of other shapes, imply none)."""
    bounds = ScanBounds()
    for item in filters:
        bounds = _narrowed(bounds, item)
    return bounds


def _narrowed(bounds: ScanBounds, item: Filter) -> ScanBounds:
    attribute: tuple[str, ...] = getattr(item, "attribute", ())
    if len(attribute) != 1:
        return bounds
    column = attribute[0]
    if isinstance(item, IsNull) and column in ("topic", "partition", "offset"):
        return replace(bounds, nothing=True)  # never null
    if column == "topic":
        return _topics(bounds, item)
    if column == "partition":
        low, high, values = _whole_range(item)
        if values is not None:
            found = frozenset(values) if bounds.partitions is None else bounds.partitions & frozenset(values)
            bounds = replace(bounds, partitions=found)
        return replace(
            bounds,
            low_partition=higher_bound(bounds.low_partition, low),
            high_partition=lower_bound(bounds.high_partition, high),
        )
    if column == "offset":
        low, high, _ = _whole_range(item)
        return _checked(replace(bounds, from_offset=higher_bound(bounds.from_offset, low),
                                to_offset=lower_bound(bounds.to_offset, high)))  # fmt: skip
    if column == "timestamp":
        low, high = _time_range(item)
        return _checked(
            replace(bounds, from_time=higher_bound(bounds.from_time, low), to_time=lower_bound(bounds.to_time, high))
        )
    return bounds


def _topics(bounds: ScanBounds, item: Filter) -> ScanBounds:
    if isinstance(item, (EqualTo, EqualNullSafe)) and isinstance(item.value, str):
        values = frozenset([item.value])
    elif isinstance(item, In) and all(isinstance(value, str) for value in item.value):
        values = frozenset(item.value)
    else:
        return bounds
    found = values if bounds.topics is None else bounds.topics & values
    return replace(bounds, topics=found, nothing=bounds.nothing or not found)


def _whole_range(item: Filter) -> tuple[int | None, int | None, list[int] | None]:
    """(lowest, highest, the values of an equality or ``IN``) a filter on a whole-number column allows, each
    ``None`` when it says nothing."""
    value = getattr(item, "value", None)
    if isinstance(item, In):
        numbers = [v for v in item.value if type(v) is int]
        if len(numbers) != len(item.value) or not numbers:
            return None, None, None
        return min(numbers), max(numbers), numbers
    if type(value) is not int:
        return None, None, None
    if isinstance(item, (EqualTo, EqualNullSafe)):
        return value, value, [value]
    if isinstance(item, GreaterThan):
        return value + 1, None, None
    if isinstance(item, GreaterThanOrEqual):
        return value, None, None
    if isinstance(item, LessThan):
        return None, value - 1, None
    if isinstance(item, LessThanOrEqual):
        return None, value, None
    return None, None, None


def _time_range(item: Filter) -> tuple[int | None, int | None]:
    """(first, last) millisecond a filter on ``timestamp`` allows, each ``None`` when it says nothing."""
    if isinstance(item, In):
        spans = [_millis_range(v) for v in item.value]
        known = [span for span in spans if span is not None]
        if not known or len(known) != len(spans):
            return None, None
        return min(first for first, _ in known), max(last for _, last in known)
    span = _millis_range(getattr(item, "value", None))
    if span is None:
        return None, None
    at_or_after, at_or_before = span  # the milliseconds m with m * 1000 >= value, and with m * 1000 <= value
    if isinstance(item, (EqualTo, EqualNullSafe)):
        return at_or_after, at_or_before
    if isinstance(item, GreaterThan):
        return at_or_before + 1, None
    if isinstance(item, GreaterThanOrEqual):
        return at_or_after, None
    if isinstance(item, LessThan):
        return None, at_or_after - 1
    if isinstance(item, LessThanOrEqual):
        return None, at_or_before
    return None, None


def _millis_range(value: object) -> tuple[int, int] | None:
    """For an instant of ``t`` microseconds: (``ceil(t / 1000)``, ``floor(t / 1000)``), the first millisecond at or
    after it and the last at or before it; ``None`` for anything but a datetime."""
    if not isinstance(value, datetime):
        return None
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return -(-micros // 1000), micros // 1000


def higher_bound(current: int | None, new: int | None) -> int | None:
    return new if current is None else current if new is None else max(current, new)


def lower_bound(current: int | None, new: int | None) -> int | None:
    return new if current is None else current if new is None else min(current, new)


def _checked(bounds: ScanBounds) -> ScanBounds:
    def empty(low: int | None, high: int | None) -> bool:
        return low is not None and high is not None and low > high

    if empty(bounds.from_offset, bounds.to_offset) or empty(bounds.from_time, bounds.to_time):
        return replace(bounds, nothing=True)
    return bounds
