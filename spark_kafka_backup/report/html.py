"""``spark-kafka-backup report``: one self-contained HTML page about a backup, to read before a restore.

No scripts, no external resources: inline CSS and SVG only, so it opens
anywhere (a browser on an air-gapped host, an attachment in a ticket). Per
topic, a timeline draws each partition's offsets from 0 to the topic's
highest backed-up offset: covered ranges in green, gaps between them in red
(at least 2 px wide, so a small gap stays visible), offsets below the first
backed-up one in grey (never backed up or removed by retention), and each
consumer group's stored offset as a tick. A second timeline shows each
partition's time range. Tables give sizes, counts, gaps, groups and
checkpoints.
"""

from __future__ import annotations

import datetime as dt
import html

from spark_kafka_backup.catalog.source_gaps import describe_gaps
from spark_kafka_backup.catalog.store import LOST_CATALOG_NOTE
from spark_kafka_backup.report.summary import (
    BackupSummary,
    PartitionSummary,
    TopicSummary,
    describe_missing,
    describe_skipped,
)
from spark_kafka_backup.text import count

DASH = "-"  # no value
WIDTH = 900  # timeline width in px
LABEL = 110  # left margin for partition labels
ROW = 26
BAR = 16
MIN_GAP_PX = 2.0

COLORS = {
    "covered": "#2e9d57",
    "gap": "#d93b3b",
    "lost": "#d9a13b",
    "before": "#c9ced6",
    "group": "#1f4fbf",
    "time": "#6c5ce7",
}

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px; color: #1d2230; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 14px; margin: 12px 0 4px; color: #5b6475; }
.meta { color: #5b6475; margin-bottom: 16px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e6ec; padding: 4px 10px; text-align: right; }
th { background: #f4f6f9; } td.l, th.l { text-align: left; }
.legend span { display: inline-block; margin-right: 16px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; }
.bad { color: #d93b3b; font-weight: 600; } .ok { color: #2e9d57; } .lost { color: #9a6a12; }
.skipped { color: #5b6475; }
svg text { font-size: 12px; fill: #1d2230; }
"""


def _ms(value: int | None) -> str:
    if value is None:
        return DASH
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_report(summary: BackupSummary, *, generated_at: int) -> str:
    """The whole page as a string."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>spark-kafka-backup report: {_e(summary.root)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Backup {_e(summary.root)}</h1>",
        f'<div class="meta">generated {_e(_ms(generated_at))} UTC · {count(len(summary.topics), "topic")} · '
        f"{sum(t.records for t in summary.topics)} records · {_e(_size(sum(t.bytes for t in summary.topics)))}</div>",
        _legend(),
    ]
    for topic in summary.topics:
        parts.append(_topic_section(topic))
    parts.append(_checkpoints(summary))
    parts.append("</body></html>")
    return "\n".join(parts)


def _legend() -> str:
    items = [
        ("covered", "offsets in the backup"),
        ("gap", "gap: offsets between covered ranges"),
        ("lost", "lost at the source: deleted there before the backup read them"),
        ("before", "below the first backed-up offset"),
        ("group", "consumer group offset"),
    ]
    spans = "".join(f'<span><i style="background:{COLORS[k]}"></i>{_e(text)}</span>' for k, text in items)
    return f'<div class="legend">{spans}</div>'


def _topic_section(topic: TopicSummary) -> str:
    out = [f'<section class="topic" data-topic="{_e(topic.topic)}">', f"<h2>{_e(topic.topic)}</h2>"]
    out.append(
        '<table><tr><th class="l">partition</th><th>records</th><th>records bytes</th><th>segments</th>'
        '<th>offsets</th><th>missing offsets</th><th class="l">time range (UTC)</th><th class="l">groups</th></tr>'
    )
    for p in topic.partitions:
        span = "empty" if p.first_offset is None else f"{p.first_offset}..{p.last_offset}"
        lost = describe_gaps(p.lost_at_source)
        missing = describe_missing(p.missing, p.missing_ranges)
        skipped = describe_skipped(p.skipped, p.skipped_ranges, compacted=topic.compacted)
        gap_text = (
            f'<span class="{"bad" if p.gaps else "ok"}">{_e(missing)}</span>'
            if missing
            else '<span class="ok">none</span>'
        )
        if lost:
            gap_text += f'<br><span class="lost">{_e(lost)}</span>'
        if p.catalog_lost:
            gap_text += f'<br><span class="bad">{_e(LOST_CATALOG_NOTE)}</span>'
        if skipped:  # the source had no record there: normal, in a neutral colour
            gap_text += f'<br><span class="skipped">{_e(skipped)}</span>'

        groups = ", ".join(f"{_e(g)} @ {o}" for g, o in sorted(p.groups.items())) or DASH
        out.append(
            f'<tr><td class="l">{p.partition}</td><td>{p.records}</td><td>{_e(_size(p.bytes))}</td>'
            f"<td>{p.segments}</td><td>{span}</td><td>{gap_text}</td>"
            f'<td class="l">{_time_range(p)}</td>'
            f'<td class="l">{groups}</td></tr>'
        )
    out.append("</table>")
    out.append("<h3>Offsets</h3>")
    out.append(_offset_timeline(topic))
    out.append("<h3>Record time</h3>")
    out.append(_time_timeline(topic))
    out.append("</section>")
    return "\n".join(out)


def _time_range(p: PartitionSummary) -> str:
    if p.min_timestamp is None or p.max_timestamp is None:
        return DASH
    return f"{_e(_ms(p.min_timestamp))} &#8211; {_e(_ms(p.max_timestamp))}"


def _offset_timeline(topic: TopicSummary) -> str:
    end = max((p.last_offset for p in topic.partitions if p.last_offset is not None), default=0) + 1
    height = ROW * len(topic.partitions) + 24
    out = [
        f'<svg class="timeline offsets" data-topic="{_e(topic.topic)}" width="{LABEL + WIDTH + 20}" '
        f'height="{height}" role="img" aria-label="offset coverage of {_e(topic.topic)}">'
    ]
    scale = WIDTH / end
    for row, p in enumerate(topic.partitions):
        y = row * ROW + 4
        out.append(f'<text x="0" y="{y + BAR - 3}">partition {p.partition}</text>')
        out.append(
            f'<rect class="track" x="{LABEL}" y="{y}" width="{WIDTH}" height="{BAR}" fill="#f4f6f9">'
            "<title>no offsets here</title></rect>"
        )
        out.extend(_partition_bars(topic.topic, p, y, scale))
    out.append(f'<text x="{LABEL}" y="{height - 4}">0</text>')
    out.append(f'<text x="{LABEL + WIDTH}" y="{height - 4}" text-anchor="end">{end - 1}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _partition_bars(topic: str, p: PartitionSummary, y: int, scale: float) -> list[str]:
    bars = []
    data = f'data-topic="{_e(topic)}" data-partition="{p.partition}"'
    if p.first_offset is not None and p.first_offset > 0:
        width = p.first_offset * scale
        bars.append(
            f'<rect class="before" {data} data-first="0" data-last="{p.first_offset - 1}" x="{LABEL}" y="{y}" '
            f'width="{width:.2f}" height="{BAR}" fill="{COLORS["before"]}">'
            f"<title>offsets 0..{p.first_offset - 1}: not in the backup</title></rect>"
        )
    for r in p.covered:
        x = LABEL + r.first * scale
        width = max(r.count * scale, 1.0)
        bars.append(
            f'<rect class="covered" {data} data-first="{r.first}" data-last="{r.last}" x="{x:.2f}" y="{y}" '
            f'width="{width:.2f}" height="{BAR}" fill="{COLORS["covered"]}">'
            f"<title>partition {p.partition}: offsets {r.first}..{r.last} backed up</title></rect>"
        )
    marks = [("gap", g.first, g.last, "gap, offsets {}..{} not in the backup") for g in p.gaps] + [
        ("lost", g.first, g.last, "offsets {}..{} deleted at the source before the backup read them")
        for g in p.lost_at_source
    ]
    for kind, first, last, title in marks:
        width = max((last - first + 1) * scale, MIN_GAP_PX)
        x = LABEL + first * scale
        bars.append(
            f'<rect class="{kind}" {data} data-first="{first}" data-last="{last}" x="{x:.2f}" y="{y}" '
            f'width="{width:.2f}" height="{BAR}" fill="{COLORS[kind]}">'
            f"<title>partition {p.partition}: {title.format(first, last)}</title></rect>"
        )
    for group, offset in sorted(p.groups.items()):
        x = LABEL + min(offset * scale, WIDTH)
        bars.append(
            f'<line class="group" {data} data-group="{_e(group)}" data-offset="{offset}" x1="{x:.2f}" x2="{x:.2f}" '
            f'y1="{y - 2}" y2="{y + BAR + 2}" stroke="{COLORS["group"]}" stroke-width="2">'
            f"<title>group {_e(group)}: next offset {offset}</title></line>"
        )
    return bars


def _time_timeline(topic: TopicSummary) -> str:
    stamped = [p for p in topic.partitions if p.min_timestamp is not None and p.max_timestamp is not None]
    if not stamped:
        return '<p class="meta">no record timestamps in this topic</p>'
    low = min(p.min_timestamp for p in stamped if p.min_timestamp is not None)
    high = max(p.max_timestamp for p in stamped if p.max_timestamp is not None)
    span = max(high - low, 1)
    height = ROW * len(topic.partitions) + 24
    out = [
        f'<svg class="timeline times" data-topic="{_e(topic.topic)}" width="{LABEL + WIDTH + 20}" '
        f'height="{height}" role="img" aria-label="time coverage of {_e(topic.topic)}">'
    ]
    for row, p in enumerate(topic.partitions):
        y = row * ROW + 4
        out.append(f'<text x="0" y="{y + BAR - 3}">partition {p.partition}</text>')
        if p.min_timestamp is None or p.max_timestamp is None:
            continue
        x = LABEL + (p.min_timestamp - low) / span * WIDTH
        width = max((p.max_timestamp - p.min_timestamp) / span * WIDTH, 2.0)
        out.append(
            f'<rect class="time" data-partition="{p.partition}" x="{x:.2f}" y="{y}" width="{width:.2f}" '
            f'height="{BAR}" fill="{COLORS["time"]}"><title>{_e(_ms(p.min_timestamp))} &#8211; '
            f"{_e(_ms(p.max_timestamp))} UTC</title></rect>"
        )
    out.append(f'<text x="{LABEL}" y="{height - 4}">{_e(_ms(low))}</text>')
    out.append(f'<text x="{LABEL + WIDTH}" y="{height - 4}" text-anchor="end">{_e(_ms(high))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _checkpoints(summary: BackupSummary) -> str:
    if not summary.checkpoints:
        return '<h2>Checkpoints</h2><p class="meta">none</p>'
    rows = "".join(
        f'<tr><td>{c.id}</td><td class="l">{_e(c.status)}{" (" + _e(c.reason) + ")" if c.reason else ""}</td>'
        f'<td class="l">{_e(_ms(c.taken_at or c.requested_at))}</td><td>{len(c.ends)}</td>'
        f'<td class="l">{_e(", ".join(sorted(c.groups)) or DASH)}</td></tr>'
        for c in summary.checkpoints
    )
    return (
        '<h2>Checkpoints</h2><table class="checkpoints"><tr><th>id</th><th class="l">status</th>'
        f'<th class="l">time (UTC)</th><th>partitions</th><th class="l">groups</th></tr>{rows}</table>'
    )
