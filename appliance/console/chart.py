"""The schedule page's run chart as SVG geometry: one bar per recent run, two series.

Server-rendered (no script, no chart library, nothing from the network): the template draws each
``Bar`` as an SVG ``<rect>`` with a ``<title>`` tooltip. Bars are coloured by the run's state
through a CSS class (an inline ``style`` would be refused by the console's CSP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from appliance.console.views import RunPoint, rfc3339

WIDTH: Final = 640
HEIGHT: Final = 110
PAD_TOP: Final = 8
PAD_BOTTOM: Final = 4
GAP: Final = 2
BAR_SLOT_MAX: Final = 24  # a few runs stay bars, not a wall


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str
    href: str


@dataclass(frozen=True)
class Series:
    name: str
    unit: str
    max_value: int
    bars: tuple[Bar, ...]
    width: int = WIDTH
    height: int = HEIGHT


def _series(
    name: str, points: Sequence[RunPoint], value: Callable[[RunPoint], int | None]
) -> Series:
    values = [value(p) for p in points]
    top = max([v for v in values if v is not None] or [0])
    scale_max = max(1, top)
    slot = min(BAR_SLOT_MAX, WIDTH / max(1, len(points)))
    usable = HEIGHT - PAD_TOP - PAD_BOTTOM
    bars = []
    for i, (point, v) in enumerate(zip(points, values, strict=True)):
        height = 0.0 if v is None else max(1.0, usable * v / scale_max)
        bars.append(
            Bar(
                x=round(i * slot + GAP / 2, 1),
                y=round(HEIGHT - PAD_BOTTOM - height, 1),
                width=round(max(1.0, slot - GAP), 1),
                height=round(height, 1),
                css=f"state-{point.state.lower()}",
                title=f"occurrence {point.occurrence_id}, due {rfc3339(point.due_s)}: "
                f"{'unknown' if v is None else f'{v} s'} ({point.state})",
                href=f"/occurrences/{point.occurrence_id}",
            )
        )
    return Series(name, "s", top, tuple(bars))


def run_chart(points: Sequence[RunPoint]) -> list[Series]:
    """Duration and start lateness of ``points`` (oldest first); empty without runs."""
    if not points:
        return []
    return [
        _series("duration", points, lambda p: p.duration_s),
        _series("start lateness", points, lambda p: p.lateness_s),
    ]
