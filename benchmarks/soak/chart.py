"""The soak's figures over time as one SVG of small charts (no plotting library: lines, axes and labels by hand),
with the events marked on every chart."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

#: The columns drawn, each with its title.
SERIES = (
    ("driver_rss_mib", "driver RSS (MiB)"),
    ("executors_rss_mib", "executors RSS (MiB)"),
    ("driver_old_mib", "driver JVM: old generation used (MiB)"),
    ("executors_old_mib", "executor JVMs: old generation used (MiB)"),
    ("lag_records", "lag (records)"),
    ("batch_age_s", "seconds since the last batch"),
    ("batch_max_s", "longest trigger in 10 s (s)"),
    ("round_age_s", "consumer offset round, read to stored (s)"),
    ("warnings", "warnings logged (total)"),
    ("backup_mib", "backup size (MiB)"),
    ("backup_files", "backup files"),
)
_WIDTH, _HEIGHT, _PAD = 520, 150, 44


def render(rows: Sequence[dict[str, float]], events: Sequence[tuple[float, str]], title: str) -> str:
    """An SVG page: one chart per series, stacked, time on the x axis, events as vertical marks."""
    charts = [_chart(rows, column, label, events, top=40 + n * (_HEIGHT + 30)) for n, (column, label) in
              enumerate(SERIES)]  # fmt: skip
    height = 40 + len(SERIES) * (_HEIGHT + 30)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH + 2 * _PAD}" height="{height}" '
        'font-family="sans-serif" font-size="11">'
        f'<text x="{_PAD}" y="22" font-size="14">{escape(title)}</text>{"".join(charts)}</svg>\n'
    )


def _chart(rows: Sequence[dict[str, float]], column: str, label: str, events: Sequence[tuple[float, str]],
           *, top: int) -> str:  # fmt: skip
    times = [float(row["elapsed_s"]) for row in rows]
    values = [float(row[column]) for row in rows]
    span = max(times, default=1.0) or 1.0
    high = max(values, default=1.0) or 1.0

    def x(t: float) -> float:
        return _PAD + _WIDTH * t / span

    def y(v: float) -> float:
        return top + _HEIGHT - _HEIGHT * max(0.0, v) / high

    points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(times, values, strict=True))
    marks = "".join(
        f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{top + _HEIGHT}" stroke="#d88" stroke-width="0.6">'
        f"<title>{escape(name)}</title></line>"
        for t, name in events
    )
    return (
        f'<text x="{_PAD}" y="{top - 6}">{escape(label)} (max {high:,.0f})</text>'
        f'<rect x="{_PAD}" y="{top}" width="{_WIDTH}" height="{_HEIGHT}" fill="none" stroke="#999"/>{marks}'
        f'<polyline points="{points}" fill="none" stroke="#247" stroke-width="1.2"/>'
        f'<text x="{_PAD}" y="{top + _HEIGHT + 12}">0 s</text>'
        f'<text x="{_PAD + _WIDTH - 40}" y="{top + _HEIGHT + 12}">{span:,.0f} s</text>'
    )
