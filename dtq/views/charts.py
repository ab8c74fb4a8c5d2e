"""Throughput over the last hour: totals and a small inline SVG bar chart, drawn server-side."""

from __future__ import annotations

import time
from typing import Any, TypedDict

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, PAD = 600, 120, 14  # viewBox units; the chart scales to its box
FAILURES = ("failed", "dead_lettered")


class Summary(TypedDict):
    """Totals over the chart's minutes."""

    succeeded: int
    failed: int
    retried: int
    started: int
    per_minute: float
    failure_rate: float | None  # failed / finished, None when nothing finished


def failures(row: dict[str, int]) -> int:
    """Return the attempts of one minute that ended a task as a failure."""
    return sum(row.get(name, 0) for name in FAILURES)


def summarize(rows: list[dict[str, int]]) -> Summary:
    """Return the totals and failure rate of per-minute rows."""
    succeeded = sum(r.get("succeeded", 0) for r in rows)
    failed = sum(failures(r) for r in rows)
    finished = succeeded + failed
    return {
        "succeeded": succeeded,
        "failed": failed,
        "retried": sum(r.get("retried", 0) for r in rows),
        "started": sum(r.get("started", 0) for r in rows),
        "per_minute": round(finished / max(len(rows), 1), 1),
        "failure_rate": failed / finished if finished else None,
    }


def _bar(index: int, row: dict[str, int], step: float, scale: float) -> tuple[Any, ...]:
    ok, bad = row.get("succeeded", 0), failures(row)
    x = PAD + index * step
    ok_h, bad_h = ok * scale, bad * scale
    base = HEIGHT - PAD
    label = time.strftime("%H:%M", time.gmtime(row["minute"]))
    return (
        f"{x:.1f}",
        f"{max(step - 1, 1):.1f}",
        f"{base - ok_h:.1f}",
        f"{ok_h:.1f}",
        f"{base - ok_h - bad_h:.1f}",
        f"{bad_h:.1f}",
        f"{label} UTC: {ok} succeeded, {bad} failed",
    )


def throughput_svg(rows: list[dict[str, int]]) -> SafeString:
    """Return an SVG with one bar per minute: succeeded (green) under failed (red)."""
    peak = max([r.get("succeeded", 0) + failures(r) for r in rows] + [1])
    step = (WIDTH - 2 * PAD) / max(len(rows), 1)
    scale = (HEIGHT - 2 * PAD) / peak
    bars = format_html_join(
        "",
        '<g><title>{6}</title><rect class="ok" x="{0}" width="{1}" y="{2}" height="{3}"/>'
        '<rect class="bad" x="{0}" width="{1}" y="{4}" height="{5}"/></g>',
        (_bar(i, row, step, scale) for i, row in enumerate(rows)),
    )
    axis = format_html(
        '<line class="axis" x1="{0}" x2="{1}" y1="{2}" y2="{2}"/>'
        '<text x="{0}" y="{3}">{4} min ago</text>'
        '<text x="{1}" y="{3}" text-anchor="end">now</text>'
        '<text x="{0}" y="{5}">{6}/min</text>',
        PAD,
        WIDTH - PAD,
        HEIGHT - PAD,
        HEIGHT - 2,
        len(rows),
        PAD - 4,
        peak,
    )
    return format_html(
        '<svg class="dtq-chart" viewBox="0 0 {} {}" role="img" '
        'aria-label="tasks finished per minute, last {} minutes">{}{}</svg>',
        WIDTH,
        HEIGHT,
        len(rows),
        mark_safe(bars),
        axis,
    )


SPARK_W, SPARK_H = 120, 24


def sparkline(rows: list[dict[str, int]]) -> SafeString:
    """Return a small inline SVG: finished tasks per minute as a line, failures as red ticks."""
    if not rows:
        return mark_safe("")
    done = [r.get("succeeded", 0) + failures(r) for r in rows]
    top = max(max(done), 1)
    step = SPARK_W / max(len(rows) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{SPARK_H - 1 - n * (SPARK_H - 2) / top:.1f}" for i, n in enumerate(done)
    )
    ticks = format_html_join(
        "",
        '<rect x="{}" y="{}" width="2" height="{}" class="dtq-spark-fail"></rect>',
        (
            (f"{i * step - 1:.1f}", f"{SPARK_H - h:.1f}", f"{h:.1f}")
            for i, r in enumerate(rows)
            if (h := max(failures(r) * (SPARK_H - 2) / top, 2) if failures(r) else 0)
        ),
    )
    summary = summarize(rows)
    label = f"{summary['succeeded']} succeeded, {summary['failed']} failed in {len(rows)} min"
    return format_html(
        '<svg class="dtq-spark" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="{}"><polyline points="{}" fill="none" stroke="currentColor" '
        'stroke-width="1.2"></polyline>{}</svg>',
        SPARK_W,
        SPARK_H,
        SPARK_W,
        SPARK_H,
        label,
        points,
        ticks,
    )
