"""The soak's verdicts from its samples: is memory flat after warm-up (slope), is lag bounded (its largest values),
how long triggers and offset rounds took.

Memory is given two slopes: least squares over every sample, and over the lowest sample of each 5 minutes (a heap's
old generation rises between collections and falls at each: its floor is what stays)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def slope_per_hour(times: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of ``values`` over ``times`` (seconds), per hour; 0 for fewer than two points."""
    if len(times) < 2:
        return 0.0
    mean_t, mean_v = sum(times) / len(times), sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return 0.0
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread


def floor_slope_per_hour(times: Sequence[float], values: Sequence[float], window_s: float = 300.0) -> float | None:
    """The slope of the lowest value in each whole ``window_s`` (per hour): for a sawtooth such as a heap's old
    generation between its collections, the trend under the teeth. None for fewer than three whole windows. A dip
    that is no collection (a process killed and started again) pulls it down: read it beside the events."""
    if not times:
        return None
    lowest: dict[int, tuple[float, float]] = {}
    for t, v in zip(times, values, strict=True):
        bucket = int((t - times[0]) // window_s)
        if bucket not in lowest or v < lowest[bucket][1]:
            lowest[bucket] = (t, v)
    whole = [lowest[b] for b in sorted(lowest) if times[0] + (b + 1) * window_s <= times[-1] + 1e-9]
    if len(whole) < 3:
        return None
    return slope_per_hour([t for t, _ in whole], [v for _, v in whole])


def percentile(values: Sequence[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _column(name: str) -> Callable[[dict[str, Any]], float]:
    return lambda row: float(row[name])


def _difference(whole: str, part: str) -> Callable[[dict[str, Any]], float]:
    return lambda row: float(row[whole]) - float(row[part])


#: The memory figures given a slope: resident sets, split into the JVMs' share and the rest (Python), heaps.
_MEMORY: dict[str, Callable[[dict[str, Any]], float]] = {
    "driver_rss_mib": _column("driver_rss_mib"),
    "driver_jvm_rss_mib": _column("driver_jvm_rss_mib"),
    "driver_python_rss_mib": _difference("driver_rss_mib", "driver_jvm_rss_mib"),
    "driver_old_mib": _column("driver_old_mib"),
    "driver_heap_committed_mib": _column("driver_heap_committed_mib"),
    "executors_rss_mib": _column("executors_rss_mib"),
    "executors_jvm_rss_mib": _column("executors_jvm_rss_mib"),
    "executors_python_rss_mib": _difference("executors_rss_mib", "executors_jvm_rss_mib"),
    "executors_old_mib": _column("executors_old_mib"),
    "executors_heap_committed_mib": _column("executors_heap_committed_mib"),
}


def figures(
    rows: Sequence[dict[str, Any]], *, warm_up_s: float, until_s: float, restarts: Sequence[float] = ()
) -> dict[str, Any]:
    """Lag and durations (max, p99, median) between ``warm_up_s`` and ``until_s`` (the load's end: then the backup
    catches up and stops); memory slope (MiB per hour) over the longest stretch one backup process ran, from
    ``warm_up_s`` after it started (``restarts``: when the backup was started again, seconds)."""
    after = [row for row in rows if warm_up_s <= float(row["elapsed_s"]) <= until_s]
    found: dict[str, Any] = {"warm_up_s": warm_up_s, "until_s": until_s, "samples": len(after)}
    starts = [0.0, *sorted(restarts)]
    stretches = [(start + warm_up_s, end) for start, end in zip(starts, [*starts[1:], until_s], strict=True)]
    first, last = max(stretches, key=lambda s: s[1] - s[0])
    steady = [row for row in rows if first <= float(row["elapsed_s"]) <= last]
    times = [float(row["elapsed_s"]) for row in steady]
    found["memory_stretch_s"] = [first, last]
    for column, take in _MEMORY.items():
        try:
            values = [take(row) for row in steady]
        except (KeyError, ValueError):  # samples of a run before the column was measured
            continue
        found[column] = {
            "slope_mib_per_hour": round(slope_per_hour(times, values), 1),
            "floor_slope_mib_per_hour": _rounded(floor_slope_per_hour(times, values)),
            "first": values[0] if values else None,
            "last": values[-1] if values else None,
            "max": max(values, default=None),
        }
    for column in ("lag_records", "lag_seconds", "batch_max_s", "round_age_s", "batch_age_s"):
        values = [float(row[column]) for row in after if float(row[column]) >= 0]
        found[column] = {
            "max": max(values, default=None),
            "p99": percentile(values, 0.99),
            "median": percentile(values, 0.5),
        }
    if after:
        found["backup_mib_at_end"] = after[-1]["backup_mib"]
        found["backup_files_at_end"] = after[-1]["backup_files"]
    return found
