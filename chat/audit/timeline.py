"""Time on a drawn axis: spans merged and measured, positions in percent, the axis's ticks.

What the run's waterfall (chat/audit/waterfall.py) draws with; pure
arithmetic over (start, end) pairs in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from chat.audit.buckets import short_duration


def pct(ms: float, total_ms: float) -> float:
    return round(100.0 * ms / total_ms, 4) if total_ms > 0 else 0.0


@dataclass(frozen=True)
class Tick:
    x_pct: float
    label: str
    anchor: str


def union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(spans: Iterable[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


def max_parallel(spans: Iterable[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, e in spans if e > s] + [(e, -1) for s, e in spans if e > s])
    running = best = 0
    for _, change in edges:
        running += change
        best = max(best, running)
    return best


def tick_step(total_ms: float) -> float:
    """A round step giving about five ticks."""
    if total_ms <= 0:
        return 1.0
    raw = total_ms / 5
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0):
        if raw <= factor * power:
            return factor * power
    return 10.0 * power


def ticks(total_ms: float) -> list[Tick]:
    """The axis's ticks, about five, at round steps."""
    step = tick_step(total_ms)
    marks: list[Tick] = []
    value = 0.0
    while value <= total_ms + 1e-9:
        x_pct = pct(value, total_ms)
        anchor = "start" if x_pct < 3 else ("end" if x_pct > 92 else "middle")
        marks.append(Tick(x_pct, short_duration(round(value, 3)), anchor))
        value += step
    return marks


def clip(spans: list[tuple[float, float]], low: float, high: float) -> list[tuple[float, float]]:
    return [(max(s, low), min(e, high)) for s, e in spans if min(e, high) > max(s, low)]
