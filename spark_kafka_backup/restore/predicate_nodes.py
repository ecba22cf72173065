"""Spark's optimized ``--where`` expression as the nodes of :mod:`spark_kafka_backup.datasource.row_predicate`, when
each node has there exactly Spark's meaning (``None`` otherwise: Spark evaluates it on its rows).

Spark parses, resolves and optimizes the predicate first (its casts placed, its constants folded: ``timestamp >=
'2026-11-20'`` is a comparison with a timestamp literal by then); what is translated is the tree Spark would run.
Translated: columns other than ``headers``; literals of ``int``, ``bigint``, ``timestamp``, ``boolean``, ``binary``
and ``string`` (Spark's default collation only); comparisons (``<=>`` too), ``AND``, ``OR``, ``NOT``, ``IS [NOT]
NULL``, ``IN``; ``+ - * %`` of integers; a cast of an ``int`` to a ``bigint`` and of bytes to a string; and
``startswith``/``endswith``/``contains`` (which Spark makes of simple ``LIKE`` patterns). Nothing else.
"""

from __future__ import annotations

from typing import Any

from spark_kafka_backup.datasource.row_predicate import (
    COLUMN_KINDS,
    Arithmetic,
    BytesMatch,
    Column,
    Compare,
    InList,
    IsNull,
    Literal,
    Logic,
    Node,
    Not,
    Widen,
)

#: Spark's type names (``DataType.simpleString``) of the kinds translated.
_KINDS = {"int": "int", "bigint": "bigint", "timestamp": "timestamp", "boolean": "boolean", "binary": "bytes",
          "string": "bytes"}  # fmt: skip
_COMPARISONS = {"EqualTo": "equal", "LessThan": "less", "LessThanOrEqual": "less_equal", "GreaterThan": "greater",
                "GreaterThanOrEqual": "greater_equal"}  # fmt: skip
_ARITHMETIC = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Remainder": "remainder"}
_MATCHES = {"StartsWith": "starts", "EndsWith": "ends", "Contains": "contains"}


class _UntranslatedError(Exception):
    """A node without exactly Spark's meaning here."""


def translated(flagged: Any) -> Node | None:
    """The nodes of the ``matched`` column of ``flagged`` (``topic, partition, offset, matched`` over the data
    source's rows), or ``None`` when one of them is not translated."""
    plan = flagged._jdf.queryExecution().optimizedPlan()
    if plan.getClass().getSimpleName() != "Project":
        return None
    projected = plan.projectList()
    alias = projected.apply(projected.size() - 1)
    if alias.getClass().getSimpleName() != "Alias" or str(alias.name()) != "matched":
        return None
    try:
        return _node(alias.child())
    except _UntranslatedError:
        return None


def _node(expression: Any) -> Node:
    name = expression.getClass().getSimpleName()
    children = [expression.children().apply(i) for i in range(expression.children().size())]
    if name == "AttributeReference":
        column = str(expression.name())
        if column not in COLUMN_KINDS or _kind(expression) != COLUMN_KINDS[column]:
            raise _UntranslatedError(column)
        return Column(column)
    if name == "Literal":
        return Literal(_value(expression.value(), _kind(expression)), _kind(expression))
    if name in _COMPARISONS or name == "EqualNullSafe":
        left, right = (_node(child) for child in children)
        _same_kind(children)
        return Compare(_COMPARISONS.get(name, "equal"), left, right, null_safe=name == "EqualNullSafe")
    if name in ("And", "Or"):
        return Logic(name == "And", tuple(_node(child) for child in children))
    if name == "Not":
        return Not(_node(children[0]))
    if name in ("IsNull", "IsNotNull"):
        return IsNull(_node(children[0]), negated=name == "IsNotNull")
    if name in ("In", "InSet"):
        return _in(expression, name, children)
    if name in _ARITHMETIC:
        _same_kind(children)
        if _kind(children[0]) not in ("int", "bigint"):
            raise _UntranslatedError(name)
        return Arithmetic(_ARITHMETIC[name], _node(children[0]), _node(children[1]))
    if name == "Cast":
        return _cast(expression, children[0])
    if name in _MATCHES:
        pattern = children[1]
        if pattern.getClass().getSimpleName() != "Literal" or pattern.value() is None or _kind(pattern) != "bytes":
            raise _UntranslatedError(name)
        try:
            text = bytes(pattern.value().getBytes()).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _UntranslatedError(name) from exc
        if _kind(children[0]) != "bytes":
            raise _UntranslatedError(name)
        return BytesMatch(_MATCHES[name], _node(children[0]), text)
    raise _UntranslatedError(name)


def _cast(expression: Any, child: Any) -> Node:
    to = str(expression.dataType().simpleString())
    source = str(child.dataType().simpleString())
    if source == "int" and to == "bigint":
        return Widen(_node(child))
    if source in ("binary", "string") and to in ("binary", "string"):  # the same bytes either way
        return _node(child)
    raise _UntranslatedError(f"cast {source} to {to}")


def _in(expression: Any, name: str, children: list[Any]) -> Node:
    kind = _kind(children[0])
    if kind not in ("int", "bigint", "timestamp", "bytes"):
        raise _UntranslatedError(name)
    if name == "In":
        listed = children[1:]
        if any(item.getClass().getSimpleName() != "Literal" or _kind(item) != kind for item in listed):
            raise _UntranslatedError(name)
        raw = [item.value() for item in listed]
    else:
        values = expression.hset().toSeq().toIndexedSeq()
        raw = [values.apply(i) for i in range(values.size())]
    present = tuple(_value(value, kind) for value in raw if value is not None)
    return InList(_node(children[0]), present, kind, has_null=any(value is None for value in raw))  # type: ignore[arg-type]


def _same_kind(children: list[Any]) -> None:
    kinds = {_kind(child) for child in children}
    if len(kinds) != 1:
        raise _UntranslatedError(f"kinds {sorted(kinds)}")


def _kind(expression: Any) -> str:
    spark_type = str(expression.dataType().simpleString())
    if spark_type not in _KINDS:
        raise _UntranslatedError(spark_type)
    return _KINDS[spark_type]


def _value(value: Any, kind: str) -> int | bytes | bool | None:
    """A literal's JVM value as the node's: numbers and times as integers (times in microseconds), strings and
    bytes as bytes."""
    if value is None:
        return None
    if kind == "bytes":
        return bytes(value) if isinstance(value, bytes | bytearray) else bytes(value.getBytes())
    if kind == "boolean":
        return bool(value)
    return int(value)
