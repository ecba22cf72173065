"""A predicate of one record, evaluated on the data source's Arrow rows without handing them to Spark.

``restore --where`` and ``erase --where`` let Spark parse, resolve and optimize the predicate, then
(:mod:`spark_kafka_backup.restore.predicate_nodes`) translate the optimized expression into the nodes here when
every one of them has, on these rows, exactly Spark's meaning; otherwise Spark evaluates it on its rows. Here the
rows of :func:`~spark_kafka_backup.datasource.kafka_rows.kafka_rows` (the same arrays Spark would get) are evaluated
column by column with Arrow's kernels:

- SQL's three-valued logic: comparisons of a null are null, ``AND``/``OR`` as Kleene's, ``NOT null`` null, ``IN``
  null when nothing is equal and the value or a listed one is null; a record matches where the result is true;
- strings as Spark compares them by default (``UTF8_BINARY``: their UTF-8 bytes, unsigned), so a key or value cast
  to a string is compared as its bytes, whatever they hold; a string with another collation stays with Spark;
- integer arithmetic checked: an overflow or a division by zero, which Spark answers by its mode (an error, a
  null, a wrapped value), raises :class:`LeftToSparkError` and Spark evaluates the predicate instead.

Memory: one batch's columns and the arrays its nodes give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

#: The Arrow type of each kind of value the nodes handle (strings and bytes alike as bytes).
KINDS = {
    "int": pa.int32(),
    "bigint": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "bytes": pa.binary(),
    "boolean": pa.bool_(),
}
#: Each column of the rows read here, and its kind (``headers`` is not).
COLUMN_KINDS = {
    "key": "bytes",
    "value": "bytes",
    "topic": "bytes",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "timestampType": "int",
}
COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
ARITHMETIC = {"add": "add_checked", "subtract": "subtract_checked", "multiply": "multiply_checked",
              "remainder": "remainder_checked"}  # fmt: skip
MATCHES = {"starts": "starts_with", "ends": "ends_with", "contains": "match_substring"}


class LeftToSparkError(Exception):
    """The predicate's value on these rows depends on Spark's mode (an overflow, a division by zero): Spark
    evaluates it."""


@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Literal:
    value: int | bytes | bool | None
    kind: str


@dataclass(frozen=True)
class Compare:
    """``left OP right``, ``OP`` one of :data:`COMPARISONS`; ``null_safe``: ``<=>`` (equal, nulls equal nulls)."""

    op: str
    left: Node
    right: Node
    null_safe: bool = False


@dataclass(frozen=True)
class Logic:
    """``AND`` (``all_of``) or ``OR`` of two or more conditions."""

    all_of: bool
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    part: Node


@dataclass(frozen=True)
class IsNull:
    part: Node
    negated: bool = False


@dataclass(frozen=True)
class InList:
    """``part IN (values)``; ``has_null``: a null is among them."""

    part: Node
    values: tuple[int | bytes, ...]
    kind: str
    has_null: bool = False


@dataclass(frozen=True)
class Arithmetic:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Widen:
    """An ``int`` as a ``bigint`` (Spark's cast)."""

    part: Node


@dataclass(frozen=True)
class BytesMatch:
    """``startswith``/``endswith``/``contains`` of a string (its bytes), ``how`` one of :data:`MATCHES`."""

    how: str
    part: Node
    pattern: str


Node = Union[Column, Literal, Compare, Logic, Not, IsNull, InList, Arithmetic, Widen, BytesMatch]  # noqa: UP007


def columns_read(node: Node) -> frozenset[str]:
    """The columns of the rows ``node`` reads."""
    if isinstance(node, Column):
        return frozenset([node.name])
    if isinstance(node, Literal):
        return frozenset()
    if isinstance(node, Compare | Arithmetic):
        return columns_read(node.left) | columns_read(node.right)
    if isinstance(node, Logic):
        return frozenset().union(*(columns_read(part) for part in node.parts))
    return columns_read(node.part)


def holds(node: Node, rows: pa.RecordBatch) -> npt.NDArray[np.bool_]:
    """Where ``node`` is true on ``rows`` (null and false do not hold); :class:`LeftToSparkError` when Spark must
    decide."""
    try:
        result = _evaluate(node, rows)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ZeroDivisionError, OverflowError) as exc:
        raise LeftToSparkError(str(exc)) from exc
    return _true(result, rows.num_rows)


Value = Union[pa.Array, pa.Scalar]  # noqa: UP007


def _true(value: Value, n: int) -> npt.NDArray[np.bool_]:
    """Where ``value`` (``n`` booleans, or one for all) is true: null is not."""
    if isinstance(value, pa.Scalar):
        return np.full(n, value.is_valid and bool(value.as_py()), dtype=bool)
    return np.asarray(value.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _nulls(value: Value, n: int) -> npt.NDArray[np.bool_]:
    """Where ``value`` (``n`` values, or one for all) is null."""
    if isinstance(value, pa.Scalar):
        return np.full(n, not value.is_valid)
    return np.asarray(value.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _evaluate(node: Node, rows: pa.RecordBatch) -> Value:
    if isinstance(node, Column):
        column = rows.column(node.name)
        return column.cast(pa.binary()) if node.name == "topic" else column
    if isinstance(node, Literal):
        return pa.scalar(node.value, KINDS[node.kind])
    if isinstance(node, Compare):
        left, right = _evaluate(node.left, rows), _evaluate(node.right, rows)
        if node.null_safe:
            return _null_safe_equal(left, right, rows.num_rows)
        return pc.call_function(node.op, [left, right])
    if isinstance(node, Logic):
        combine = pc.and_kleene if node.all_of else pc.or_kleene
        result = _evaluate(node.parts[0], rows)
        for part in node.parts[1:]:
            result = combine(result, _evaluate(part, rows))
        return result
    if isinstance(node, Not):
        return pc.invert(_evaluate(node.part, rows))
    if isinstance(node, IsNull):
        part = _evaluate(node.part, rows)
        return pc.is_valid(part) if node.negated else pc.is_null(part)
    if isinstance(node, InList):
        return _in_list(node, _evaluate(node.part, rows))
    if isinstance(node, Arithmetic):
        return pc.call_function(ARITHMETIC[node.op], [_evaluate(node.left, rows), _evaluate(node.right, rows)])
    if isinstance(node, Widen):
        return pc.cast(_evaluate(node.part, rows), pa.int64())
    if isinstance(node, BytesMatch):
        part = _evaluate(node.part, rows)
        matched = pc.call_function(MATCHES[node.how], [_as_array(part)], pc.MatchSubstringOptions(node.pattern))
        return matched[0] if isinstance(part, pa.Scalar) else matched
    raise TypeError(f"not a predicate node: {node!r}")


def _null_safe_equal(left: Value, right: Value, n: int) -> pa.Array:
    """``left <=> right``: true where both are null or equal, false otherwise (never null)."""
    left_null = _nulls(left, n)
    right_null = _nulls(right, n)
    same = _true(pc.equal(left, right), n)
    return pa.array((left_null & right_null) | (~left_null & ~right_null & same))


def _as_array(value: Value) -> pa.Array:
    """``value`` as an array (a scalar as one element: kernels that take no scalar)."""
    return pa.array([value.as_py()], value.type) if isinstance(value, pa.Scalar) else value


def _in_list(node: InList, part: Value) -> Value:
    """Spark's ``IN``: true where equal to a value; else null where the value or a listed one is null; else false."""
    values = _as_array(part)
    found = _true(pc.is_in(values, value_set=pa.array(node.values, KINDS[node.kind])), len(values))
    unknown = _nulls(values, len(values)) | (~found & node.has_null)
    result = pa.array(found & ~unknown, mask=unknown)
    return result[0] if isinstance(part, pa.Scalar) else result
