"""Hypothesis strategies for records, shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from spark_kafka_backup.format.record import Header, Record

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=64))
# Header keys are any text (surrogates cannot be UTF-8), including empty and non-ASCII.
_header_key = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
_header = st.tuples(_header_key, _bytes_or_none)


@st.composite
def records(draw: st.DrawFn, offset: int | None = None) -> Record:
    ts_type = draw(st.sampled_from([-2, -1, 0, 1]))
    timestamp = draw(st.integers(-(2**63), 2**63 - 1)) if ts_type in (0, 1) else None
    headers: list[Header] = draw(st.lists(_header, max_size=5))
    duplicate: bool = draw(st.booleans())
    if headers and duplicate:
        headers.append(headers[0])  # duplicate key
    return Record(
        offset=draw(st.integers(0, 2**63 - 1)) if offset is None else offset,
        timestamp_type=ts_type,
        timestamp=timestamp,
        key=draw(_bytes_or_none),
        value=draw(_bytes_or_none),
        headers=tuple(headers),
    )


@st.composite
def record_runs(draw: st.DrawFn, max_size: int = 30) -> list[Record]:
    """Records with strictly increasing offsets, gaps included."""
    gaps = draw(st.lists(st.integers(1, 1000), min_size=1, max_size=max_size))
    start = draw(st.integers(0, 2**40))
    result = []
    offset = start
    for gap in gaps:
        result.append(draw(records(offset=offset)))
        offset += gap
    return result
