"""Bar charts as geometry for an SVG template: the server draws them, the browser runs no script.

A ``BarChart`` holds labelled values; ``bars()`` lays them out left to right in a fixed
viewBox, scaled to the largest value (a chart of zeros stays flat). Labels stay plain text and
the template escapes them, so a model or finding name cannot inject markup.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bar", "BarChart"]

WIDTH = 640
HEIGHT = 200
_TOP = 16
_BOTTOM = 36
_LEFT = 8
_GAP = 6
MAX_BARS = 40
_MAX_BAR_WIDTH = 56.0


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class BarChart:
    title: str
    points: tuple[tuple[str, float], ...]
    """(label, value) in display order; the last ``MAX_BARS`` are drawn."""

    @property
    def max_value(self) -> float:
        return max((value for _, value in self.points), default=0.0)

    def bars(self) -> list[Bar]:
        points = self.points[-MAX_BARS:]
        if not points:
            return []
        plot_height = HEIGHT - _TOP - _BOTTOM
        slot = (WIDTH - 2 * _LEFT) / len(points)
        width = min(max(slot - _GAP, 1.0), _MAX_BAR_WIDTH)
        top = self.max_value or 1.0
        bars = []
        for index, (label, value) in enumerate(points):
            height = plot_height * max(value, 0.0) / top
            x = _LEFT + index * slot + (slot - width) / 2
            bars.append(
                Bar(
                    label,
                    value,
                    round(x, 1),
                    round(_TOP + plot_height - height, 1),
                    round(width, 1),
                    round(height, 1),
                )
            )
        return bars
