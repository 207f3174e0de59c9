"""Chart geometry for the dashboard's server-rendered SVG (no JavaScript): per-minute bars
stacked by queue, and lines per queue over time. Pure functions of the numbers; the
template draws what they return."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

#: The drawing area of every chart, in SVG user units (the SVG scales to its box).
WIDTH = 600.0
HEIGHT = 150.0
#: Room for the y axis's labels on the left and the time labels below.
LEFT = 34.0
BOTTOM = 16.0
TOP = 6.0
#: Colours cycle after this many queues (``series-0`` .. ``series-7`` in app.css).
PALETTE_SIZE = 8


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value`` (at least
    1), so the axis reads in round numbers."""
    if value <= 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power:
            return step * power
    return 10.0 * power


def _number(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"


def _latest(value: float | None, unit: str) -> str | None:
    return None if value is None else _number(value) + unit


def _clock(at: datetime) -> str:
    return at.strftime("%H:%M")


def _axis(top: float, unit: str) -> list[dict[str, Any]]:
    plot = HEIGHT - BOTTOM - TOP
    return [
        {"y": round(TOP + plot * (1 - share), 2), "label": _number(top * share) + unit}
        for share in (0.0, 0.5, 1.0)
    ]


def _ticks(times: Sequence[datetime], x_of: Any) -> list[dict[str, Any]]:
    """About four time labels (UTC), on minutes that are multiples of 15 when they fall
    in the range, else evenly spaced."""
    if not times:
        return []
    marks = [i for i, t in enumerate(times) if t.minute % 15 == 0 and t.second == 0]
    if len(marks) < 2:
        step = max(1, len(times) // 4)
        marks = list(range(0, len(times), step))
    return [{"x": round(x_of(i), 2), "label": _clock(times[i])} for i in marks]


def stacked_bars(
    minutes: Sequence[datetime], series: Mapping[str, Sequence[int]], *, what: str
) -> dict[str, Any]:
    """One bar per minute, stacked by queue: ``series`` maps each queue to its count per
    minute (aligned with ``minutes``). Each bar segment carries a tooltip naming the
    minute, the queue and the count of ``what``."""
    queues = sorted(series)
    totals = [sum(series[q][i] for q in queues) for i in range(len(minutes))]
    top = nice_ceiling(max(totals, default=0))
    plot = HEIGHT - BOTTOM - TOP
    slot = (WIDTH - LEFT) / max(len(minutes), 1)
    rects = []
    for i, minute in enumerate(minutes):
        base = HEIGHT - BOTTOM
        for index, queue in enumerate(queues):
            count = series[queue][i]
            if not count:
                continue
            height = plot * count / top
            base -= height
            rects.append(
                {
                    "x": round(LEFT + i * slot + slot * 0.1, 2),
                    "y": round(base, 2),
                    "width": round(slot * 0.8, 2),
                    "height": round(height, 2),
                    "series": index % PALETTE_SIZE,
                    "title": f"{_clock(minute)} UTC · {queue}: {count} {what}",
                }
            )
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "bottom": HEIGHT - BOTTOM,
        "rects": rects,
        "lines": [],
        "axis": _axis(top, ""),
        "ticks": _ticks(minutes, lambda i: LEFT + (i + 0.5) * slot),
        "legend": [
            {"name": q, "series": n % PALETTE_SIZE, "total": sum(series[q])}
            for n, q in enumerate(queues)
        ],
        "total": sum(totals),
    }


def lines(
    times: Sequence[datetime],
    series: Mapping[str, Sequence[float | None]],
    *,
    unit: str = "",
    what: str,
) -> dict[str, Any]:
    """One line per queue through its readings (``None`` where it has no reading: the
    line breaks there), on a shared axis from zero."""
    queues = sorted(series)
    values = [v for q in queues for v in series[q] if v is not None]
    top = nice_ceiling(max(values, default=0.0))
    plot = HEIGHT - BOTTOM - TOP
    span = max(len(times) - 1, 1)

    def x_of(i: float) -> float:
        return LEFT + (WIDTH - LEFT) * i / span

    drawn = []
    for index, queue in enumerate(queues):
        runs: list[list[str]] = [[]]
        dots = []
        for i, value in enumerate(series[queue]):
            if value is None:
                if runs[-1]:
                    runs.append([])
                continue
            x, y = round(x_of(i), 2), round(HEIGHT - BOTTOM - plot * value / top, 2)
            runs[-1].append(f"{x},{y}")
            dots.append(
                {
                    "x": x,
                    "y": y,
                    "title": f"{_clock(times[i])} UTC · {queue}: {_number(value)}{unit} {what}",
                }
            )
        drawn.append(
            {
                "series": index % PALETTE_SIZE,
                "paths": [" ".join(run) for run in runs if run],
                "dots": dots,
            }
        )
    last: dict[str, float | None] = {
        q: next((v for v in reversed(series[q]) if v is not None), None) for q in queues
    }
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "bottom": HEIGHT - BOTTOM,
        "rects": [],
        "lines": drawn,
        "axis": _axis(top, unit),
        "ticks": _ticks(times, x_of),
        "legend": [
            {
                "name": q,
                "series": n % PALETTE_SIZE,
                "total": _latest(last[q], unit),
            }
            for n, q in enumerate(queues)
        ],
        "total": len(values),
    }


#: A workflow graph's node box and the room between columns and rows (SVG user units).
NODE_WIDTH = 150.0
NODE_HEIGHT = 40.0
COLUMN_GAP = 50.0
ROW_GAP = 14.0


def workflow_layout(graph: Mapping[str, Any]) -> dict[str, Any]:
    """Boxes and arrows for a workflow graph (``awa.entrypoints.job_graph.workflow_graph``):
    one column per depth (parents left of their children), nodes by id down each column;
    each edge runs from its parent's right side to its child's left side. The job the
    graph was asked for is marked ``current``."""
    columns: dict[int, list[Mapping[str, Any]]] = {}
    for node in graph["nodes"]:
        columns.setdefault(int(node["depth"]), []).append(node)
    rows = max((len(c) for c in columns.values()), default=1)
    width = max(len(columns), 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    height = rows * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    boxes: dict[int, dict[str, Any]] = {}
    for depth in sorted(columns):
        for row, node in enumerate(sorted(columns[depth], key=lambda n: int(n["id"]))):
            boxes[int(node["id"])] = {
                "id": node["id"],
                "kind": node["kind"] or "(gone)",
                "state": node["state"] or "gone",
                "x": round(depth * (NODE_WIDTH + COLUMN_GAP), 2),
                "y": round(row * (NODE_HEIGHT + ROW_GAP), 2),
                "current": node["id"] == graph["job_id"],
            }
    arrows = []
    for parent, child in graph["edges"]:
        start, end = boxes[int(parent)], boxes[int(child)]
        arrows.append(
            {
                "x1": start["x"] + NODE_WIDTH,
                "y1": round(start["y"] + NODE_HEIGHT / 2, 2),
                "x2": end["x"],
                "y2": round(end["y"] + NODE_HEIGHT / 2, 2),
            }
        )
    return {
        "width": round(width, 2),
        "height": round(height, 2),
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
        "nodes": [boxes[n] for n in sorted(boxes)],
        "edges": arrows,
    }
