"""The nodes of a translated ``--where`` on Arrow rows: SQL's three-valued logic, Spark's ``IN``, strings as bytes,
arithmetic that hands overflows back to Spark (tests/test_data_source.py compares them with Spark's evaluation)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_kafka_backup.datasource.row_predicate import (
    Arithmetic,
    BytesMatch,
    Column,
    Compare,
    InList,
    IsNull,
    LeftToSparkError,
    Literal,
    Logic,
    Not,
    Widen,
    columns_read,
    holds,
)

ROWS = pa.RecordBatch.from_pydict(
    {
        "key": pa.array([b"a", None, b"\xff\x00", b"", b"ab"], pa.binary()),
        "partition": pa.array([0, 1, 2, 3, 4], pa.int32()),
        "offset": pa.array([10, 11, 12, 13, 2**62], pa.int64()),
        "topic": pa.array(["t"] * 5, pa.string()),
    }
)


def flags(node: object) -> list[bool]:
    result: list[bool] = holds(node, ROWS).tolist()  # type: ignore[arg-type]
    return result


def test_comparisons_of_a_null_do_not_hold_and_not_of_a_null_neither() -> None:
    is_a = Compare("equal", Column("key"), Literal(b"a", "bytes"))
    assert flags(is_a) == [True, False, False, False, False]
    assert flags(Not(is_a)) == [False, False, True, True, True]  # NOT null is null: the null key matches neither
    assert flags(Compare("equal", Column("key"), Literal(None, "bytes"))) == [False] * 5
    assert flags(Compare("equal", Column("key"), Literal(None, "bytes"), null_safe=True)) == [
        False, True, False, False, False]  # fmt: skip


def test_and_or_are_kleenes() -> None:
    null_key = Compare("equal", Column("key"), Literal(b"a", "bytes"))
    unknown = Literal(None, "boolean")
    assert flags(Logic(False, (null_key, unknown))) == [True, False, False, False, False]
    assert flags(Logic(True, (Not(unknown), Literal(True, "boolean")))) == [False] * 5
    assert flags(Not(Logic(True, (unknown, Literal(False, "boolean"))))) == [True] * 5  # null AND false is false


def test_in_is_null_where_nothing_is_equal_and_a_listed_value_is_null() -> None:
    listed = InList(Column("partition"), (1, 3), "int", has_null=True)
    assert flags(listed) == [False, True, False, True, False]
    assert flags(Not(listed)) == [False] * 5
    assert flags(Not(InList(Column("partition"), (1, 3), "int"))) == [True, False, True, False, True]
    assert flags(IsNull(Column("key"))) == [False, True, False, False, False]


def test_strings_compare_as_unsigned_bytes_and_match_by_bytes() -> None:
    assert flags(Compare("greater", Column("key"), Literal(b"b", "bytes"))) == [False, False, True, False, False]
    assert flags(BytesMatch("starts", Column("key"), "a")) == [True, False, False, False, True]
    assert flags(BytesMatch("ends", Column("key"), "b")) == [False, False, False, False, True]
    assert flags(Compare("equal", Column("topic"), Literal(b"t", "bytes"))) == [True] * 5


def test_an_overflow_or_a_division_by_zero_is_left_to_spark() -> None:
    doubled = Arithmetic("multiply", Column("offset"), Literal(2, "bigint"))
    with pytest.raises(LeftToSparkError):
        holds(Compare("greater", doubled, Literal(0, "bigint")), ROWS)
    by_zero = Arithmetic("remainder", Column("offset"), Literal(0, "bigint"))
    with pytest.raises(LeftToSparkError):
        holds(Compare("equal", by_zero, Literal(0, "bigint")), ROWS)
    # Java's remainder: the dividend's sign.
    negative = Arithmetic(
        "remainder", Arithmetic("subtract", Literal(0, "bigint"), Column("offset")), Literal(3, "bigint")
    )
    assert flags(Compare("equal", negative, Literal(-1, "bigint"))) == [True, False, False, True, True]
    widened = Compare("greater", Arithmetic("add", Widen(Column("partition")), Column("offset")), Literal(14, "bigint"))
    assert flags(widened) == [False, False, False, True, True]
    assert columns_read(widened) == {"partition", "offset"}


def test_a_constant_holds_for_every_row_or_none() -> None:
    assert flags(Literal(True, "boolean")) == [True] * 5
    assert flags(Literal(None, "boolean")) == [False] * 5
