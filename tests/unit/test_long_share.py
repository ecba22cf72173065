"""CI's share of the long tier (``./dev test`` with ``KBACKUP_LONG_SHARE=K/N``): N shares cover every long scenario
exactly once, whatever order they were collected in, so each runs at least every N-th landing; the shares are
balanced by the scenarios' measured cost (tests/long_shares.py)."""

from __future__ import annotations

import random

import pytest

from tests.conftest import long_share
from tests.long_shares import COSTS, balanced_shares, load_costs


def test_the_shares_cover_every_long_scenario_once_in_any_collection_order() -> None:
    nodes = [f"tests/test_{name % 7}.py::test_{name}" for name in range(53)]
    shares = [long_share(nodes, f"{which}/4") for which in range(4)]
    assert sorted(node for share in shares for node in share) == sorted(nodes)
    assert all(12 <= len(share) <= 14 for share in shares)  # none measured: a quarter each
    shuffled = random.Random(7).sample(nodes, len(nodes))
    assert [long_share(shuffled, f"{which}/4") for which in range(4)] == shares


def test_the_shares_are_balanced_by_measured_cost_and_an_unmeasured_one_counts_as_the_median() -> None:
    costs = {f"t::{i}": float(cost) for i, cost in enumerate([280, 180, 150, 110, 110, 90, 80, 67, 66, 40, 30, 20])}
    nodes = [*costs, "t::new"]
    shares = balanced_shares(nodes, 4, costs)
    assert sorted(node for share in shares for node in share) == sorted(nodes)
    median = 85.0  # of the twelve measured
    totals = sorted(sum(costs.get(node, median) for node in share) for share in shares)
    assert totals == [320.0, 327.0, 330.0, 331.0]  # by index modulo 4: 595, 357, 206 and 150
    assert shares == balanced_shares(random.Random(3).sample(nodes, len(nodes)), 4, costs)


def test_the_recorded_costs_are_of_long_scenarios_that_exist() -> None:
    costs = load_costs()
    assert costs, f"{COSTS} is missing: ./dev test balances its share of the long tier by it"
    files = {node.split("::")[0] for node in costs}
    assert all((COSTS.parent.parent / path).is_file() for path in files), files
    assert all(cost > 0 for cost in costs.values())


@pytest.mark.parametrize("wrong", ["4/4", "-1/4", "1/0", "one/4", "1"])
def test_a_share_that_is_not_k_of_n_is_refused(wrong: str) -> None:
    with pytest.raises(pytest.UsageError, match="KBACKUP_LONG_SHARE"):
        long_share(["a"], wrong)
