"""CI's share of the long tier: N shares of about equal cost that together hold every long scenario once.

``./dev test`` runs the quick tier and one share of the long tier (``KBACKUP_LONG_SHARE=K/N``, K chosen by the
landing), so each long scenario runs at least every N-th landing. The shares are balanced by each scenario's measured
cost (:data:`COSTS`, worker-seconds from a CI run's JUnit report): taken from the costliest down, each goes to the
share with the least so far (ties to the lowest K). A scenario not measured yet counts as the median of those that
were. The assignment depends only on the node ids and the costs, never on the order pytest collected them in.

Refresh the costs after long scenarios were added or changed a lot::

    KBACKUP_LONG_SHARE=none ./dev test-long --junitxml=long.xml
    .venv/bin/python -m tests.long_shares long.xml
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

#: Measured worker-seconds per long scenario (node id), written by ``python -m tests.long_shares REPORT.xml``.
COSTS = Path(__file__).with_name("long_costs.json")


class ShareError(ValueError):
    """A share that is not ``K/N`` with ``0 <= K < N``."""


def parse_share(share: str) -> tuple[int, int]:
    """``K/N`` as ``(K, N)``."""
    try:
        which, of = (int(part) for part in share.split("/"))
    except ValueError:
        raise ShareError(f"{share!r}: expected K/N, e.g. 1/4") from None
    if not (of > 0 and 0 <= which < of):
        raise ShareError(f"{share!r}: expected 0 <= K < N")
    return which, of


def load_costs(path: Path = COSTS) -> dict[str, float]:
    return {str(node): float(cost) for node, cost in json.loads(path.read_text()).items()} if path.is_file() else {}


def balanced_shares(node_ids: list[str], of: int, costs: dict[str, float]) -> list[set[str]]:
    """``of`` shares of ``node_ids`` (each once) with about equal summed cost."""
    known = [costs[node] for node in node_ids if node in costs]
    default = statistics.median(known) if known else 1.0
    totals = [0.0] * of
    shares: list[set[str]] = [set() for _ in range(of)]
    for node in sorted(set(node_ids), key=lambda node: (-costs.get(node, default), node)):
        lightest = min(range(of), key=lambda index: (totals[index], index))
        shares[lightest].add(node)
        totals[lightest] += costs.get(node, default)
    return shares


def long_share(node_ids: list[str], share: str, costs: dict[str, float] | None = None) -> set[str]:
    """The long scenarios of share ``K/N`` (module docstring)."""
    which, of = parse_share(share)
    return balanced_shares(node_ids, of, load_costs() if costs is None else costs)[which]


def costs_from_report(report: Path) -> dict[str, float]:
    """Each test's seconds in a JUnit report (setup, call and teardown), by node id."""
    found: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        # pytest's classname is the module path with dots (and a class after it, if any); the file is what exists.
        for cut in range(len(parts), 0, -1):
            path = Path(*parts[:cut]).with_suffix(".py")
            if (Path(__file__).resolve().parent.parent / path).is_file():
                node = "::".join([path.as_posix(), *parts[cut:], case.get("name", "")])
                found[node] = max(round(float(case.get("time", 0)), 1), 0.1)  # a cost, however small, is never 0
                break
    return found


def main(reports: list[str]) -> None:
    """Merge the seconds of JUnit reports of long runs (``./dev test-long``, ``-m long_share``) into :data:`COSTS`
    (later reports win)."""
    costs = load_costs()
    for report in reports:
        costs.update(costs_from_report(Path(report)))
    COSTS.write_text(json.dumps(dict(sorted(costs.items())), indent=1) + "\n")
    print(f"{COSTS}: {len(costs)} scenarios, {sum(costs.values()):.0f} s in all")


if __name__ == "__main__":
    main(sys.argv[1:])
