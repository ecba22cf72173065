"""Consumer offsets files: the original's JSON, read and written compatibly and atomically."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_kafka_backup.errors import EncodingError
from spark_kafka_backup.format.consumer_offsets import decode_consumer_offsets, encode_consumer_offsets
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets, write_consumer_offsets


def test_reads_the_originals_pretty_json() -> None:
    text = b'{\n  "consumer-group1": 100,\n  "consumer-group2": 200,\n  "consumer-group3": 300\n}'
    assert decode_consumer_offsets(text) == {"consumer-group1": 100, "consumer-group2": 200, "consumer-group3": 300}


def test_writes_compact_sorted_json() -> None:
    assert encode_consumer_offsets({"b": 2, "a": 1, "grüße": 0}) == '{"a":1,"b":2,"grüße":0}'.encode()


@given(st.dictionaries(st.text(max_size=20), st.integers(0, 2**63 - 1), max_size=20))
def test_property_round_trip(offsets: dict[str, int]) -> None:
    assert decode_consumer_offsets(encode_consumer_offsets(offsets)) == offsets


def test_refuses_to_encode_bad_offsets() -> None:
    with pytest.raises(EncodingError, match="outside"):
        encode_consumer_offsets({"g": -1})


def test_file_is_replaced_whole(tmp_path: Path) -> None:
    assert read_consumer_offsets(tmp_path, 3) == {}
    write_consumer_offsets(tmp_path, 3, {"g": 1})
    write_consumer_offsets(tmp_path, 3, {"g": 2, "h": 5})
    assert read_consumer_offsets(tmp_path, 3) == {"g": 2, "h": 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["consumer_offsets_partition_003"]
