"""The geometry of the statistics plots: the latency histogram and the runs over time.

Bars are placed in percent of the width and pixels of a fixed height, so the
server-rendered SVG (templates/audit/_bars.html) stretches to the page while
its text keeps its size. The counts come from chat/audit/stats.py; nothing
here queries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from chat.audit.buckets import short_duration
from chat.audit.figures import HistogramBin, TimeSeries

PLOT_HEIGHT = 150  # the bars' area, in px
TOP = 16  # room for the top count
AXIS = 20  # room for the x labels under the bars
GAP_PCT = 0.2  # of a slot, left empty between bars


@dataclass(frozen=True)
class BarPiece:
    """A stacked part of one bar: its kind (for the colour), its count and its box."""

    kind: str
    count: int
    y: float
    height: float


@dataclass(frozen=True)
class PlotBar:
    x_pct: float
    width_pct: float
    title: str  # the tooltip
    count: int
    pieces: list[BarPiece]

    @property
    def top(self) -> float:
        return min((p.y for p in self.pieces), default=float(TOP + PLOT_HEIGHT))


@dataclass(frozen=True)
class AxisLabel:
    x_pct: float
    text: str
    anchor: str
    minor: bool = False  # left out on narrow screens (audit.css), where labels would touch


@dataclass(frozen=True)
class Plot:
    bars: list[PlotBar]
    labels: list[AxisLabel]
    max_count: int
    total: int

    @property
    def height(self) -> int:
        return TOP + PLOT_HEIGHT + AXIS

    @property
    def baseline(self) -> int:
        return TOP + PLOT_HEIGHT

    @property
    def label_y(self) -> int:
        return TOP + PLOT_HEIGHT + 14

    @property
    def max_label_y(self) -> int:
        return 11


def _anchor(x_pct: float) -> str:
    return "start" if x_pct < 4 else ("end" if x_pct > 96 else "middle")


def _stack(parts: Sequence[tuple[str, int]], scale: float) -> list[BarPiece]:
    pieces: list[BarPiece] = []
    bottom = float(TOP + PLOT_HEIGHT)
    for kind, count in parts:
        if count <= 0:
            continue
        height = count * scale
        bottom -= height
        pieces.append(BarPiece(kind=kind, count=count, y=round(bottom, 2), height=round(height, 2)))
    return pieces


def histogram_plot(bins: Sequence[HistogramBin]) -> Plot:
    """One bar per latency bin, its height the runs in it; the bins' edges under them."""
    slots = len(bins)
    top = max((b.runs for b in bins), default=0)
    scale = PLOT_HEIGHT / top if top else 0.0
    slot = 100.0 / slots if slots else 100.0
    bars = [
        PlotBar(
            x_pct=round(i * slot + slot * GAP_PCT / 2, 4),
            width_pct=round(slot * (1 - GAP_PCT), 4),
            title=f"{b.bin.label}: {b.runs:,} run{'s' if b.runs != 1 else ''}",
            count=b.runs,
            pieces=_stack([("runs", b.runs)], scale),
        )
        for i, b in enumerate(bins)
    ]
    # The bins' edges, between the bars: 0, 50ms, 100ms, ... (the last bin is open).
    labels = [AxisLabel(0.0, "0", "start")] + [
        AxisLabel(round(i * slot, 4), short_duration(b.bin.low_ms), "middle", minor=i % 2 == 1)
        for i, b in enumerate(bins)
        if i > 0
    ]
    return Plot(bars=bars, labels=labels, max_count=top, total=sum(b.runs for b in bins))


def _time_label(start: datetime, width_s: int, span_s: float) -> str:
    """A bin's start as the axis says it: the day, the time, or both."""
    local = timezone.localtime(start)
    day = f"{local:%b} {local.day}"
    if width_s >= 86400:
        return day
    if span_s > 86400:
        return f"{day} {local:%H:%M}"
    return f"{local:%H:%M}"


def timeseries_plot(series: TimeSeries) -> Plot:
    """One stacked bar per time bin (completed, failed, the rest); a few times under them."""
    bins = series.bins
    slots = len(bins)
    top = max((b.runs for b in bins), default=0)
    scale = PLOT_HEIGHT / top if top else 0.0
    slot = 100.0 / slots if slots else 100.0
    width = timedelta(seconds=series.width_s)
    span = slots * series.width_s
    bars: list[PlotBar] = []
    for i, b in enumerate(bins):
        other = b.runs - b.completed - b.failed
        when = timezone.localtime(b.start)
        title = (
            f"{when:%Y-%m-%d %H:%M} + {width_text(series.width_s)}: {b.runs:,} run"
            f"{'s' if b.runs != 1 else ''} ({b.completed:,} completed, {b.failed:,} failed"
            f"{f', {other:,} other' if other else ''})"
        )
        bars.append(
            PlotBar(
                x_pct=round(i * slot + slot * GAP_PCT / 2, 4),
                width_pct=round(slot * (1 - GAP_PCT), 4),
                title=title,
                count=b.runs,
                pieces=_stack(
                    [("completed", b.completed), ("failed", b.failed), ("other", other)], scale
                ),
            )
        )
    # Three or four labels: the starts of evenly spaced bins, then the end.
    every = max(1, math.ceil(slots / 3))
    labels: list[AxisLabel] = []
    for i in range(0, slots, every):
        x = round(i * slot, 4)
        labels.append(AxisLabel(x, _time_label(bins[i].start, series.width_s, span), _anchor(x)))
    if bins:
        end = bins[-1].start + width
        labels.append(AxisLabel(100.0, _time_label(end, series.width_s, span), "end"))
    # The last label ends at the right edge: drop one that would sit on top of it.
    if len(labels) > 1 and labels[-2].x_pct > 85:
        del labels[-2]
    return Plot(bars=bars, labels=labels, max_count=top, total=sum(b.runs for b in bins))


def width_text(width_s: int) -> str:
    if width_s % 86400 == 0:
        days = width_s // 86400
        return f"{days} day{'s' if days != 1 else ''}"
    if width_s % 3600 == 0:
        return f"{width_s // 3600} h"
    return f"{width_s // 60} min"
