"""CI's share of the long tier (``./dev test`` with ``KBACKUP_LONG_SHARE=K/N``): N shares cover every long scenario
exactly once, whatever order they were collected in, so each runs at least every N-th landing."""

from __future__ import annotations

import random

import pytest

from tests.conftest import long_share


def test_the_shares_cover_every_long_scenario_once_in_any_collection_order() -> None:
    nodes = [f"tests/test_{name % 7}.py::test_{name}" for name in range(53)]
    shares = [long_share(nodes, f"{which}/4") for which in range(4)]
    assert sorted(node for share in shares for node in share) == sorted(nodes)
    assert all(12 <= len(share) <= 14 for share in shares)  # a quarter each, not one share with all the long ones
    shuffled = random.Random(7).sample(nodes, len(nodes))
    assert [long_share(shuffled, f"{which}/4") for which in range(4)] == shares


@pytest.mark.parametrize("wrong", ["4/4", "-1/4", "1/0", "one/4", "1"])
def test_a_share_that_is_not_k_of_n_is_refused(wrong: str) -> None:
    with pytest.raises(pytest.UsageError, match="KBACKUP_LONG_SHARE"):
        long_share(["a"], wrong)
