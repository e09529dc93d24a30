"""Inline SVG charts for the history page: several series over one x axis (nights, or a package's
versions) drawn as steps or lines, marked points, nice y ticks with their units, and a legend.

The layout is computed from the text it holds (an upper estimate of each label's width), so every
label lies inside the chart's box: the y ticks set the left margin, the rotated x labels the left and
bottom margins, the legend wraps and sets the height. Each point carries its raw value
(``data-value``) and what it is (``data-series``, ``data-x``), so a test can check the drawn numbers
against ``matrix.json``."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Optional

from bisector.core.units import human_value
from bisector.safety.safe_text import visible

W = 720                      # the chart's width in CSS pixels (scaled down, never clipped, on narrow pages)
PAD, PLOT_H, RIGHT = 8, 200, 18
TITLE_PX, TEXT_PX = 13, 11
CHAR_EM = 0.64               # an upper estimate of a character's advance, in em (DejaVu Sans digits: 0.636)
MAX_X_LABELS = 12
X_LABEL_MAX = 180            # px: a longer x label is cut (its points' tooltips keep it whole)
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
          "#d62728"]
COS30, SIN30 = math.cos(math.radians(30)), 0.5


@dataclass
class Series:
    """One line of a chart: a value (or a gap) per x label, and marks (x index, text) on its points."""

    name: str
    values: list[Optional[float]]
    marks: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Chart:
    """A chart: ``labels`` along x, its series, and what the marks mean (``mark_legend``)."""

    title: str
    metric: str
    kind: str                     # "nights" or "versions"
    x_title: str
    labels: list[str]
    series: list[Series]
    steps: bool = True            # a value holds until the next x (releases, nights): nothing in between
    mark_legend: str = ""


def esc(text: object) -> str:
    """Text for HTML and SVG (attributes included); controls and bidi characters shown (safe_text)."""
    return html.escape(visible(str(text)), quote=True)


def text_width(text: str, px: int = TEXT_PX) -> float:
    """An upper estimate of the rendered width of ``text`` at ``px``."""
    return len(text) * px * CHAR_EM


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering lo..hi (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if hi <= lo:
        pad = abs(hi) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < hi - 1e-9 * step:
        ticks.append(first + len(ticks) * step)
    return [round(t, 12) for t in ticks]


def _byte_scale(metric: str, values: list[float]) -> float:
    """The size of the unit a byte metric's ticks are shown in (KiB, MiB, GiB), so they are round in it;
    1 for other metrics."""
    if not values or human_value(float(1 << 20), metric) != "1.00 MiB":
        return 1.0
    top = max(abs(v) for v in values)
    return float(next((size for size in (1 << 30, 1 << 20, 1 << 10) if top >= size), 1))


def tick_texts(ticks: list[float], metric: str, scale: float = 1.0) -> list[str]:
    """The ticks as the report writes values (with their units); with more decimals where that would
    print two ticks alike (values that differ below the usual precision)."""
    texts = [human_value(t, metric) for t in ticks]
    if len(set(texts)) == len(texts) or len(ticks) < 2:
        return texts
    step = (ticks[1] - ticks[0]) / scale
    decimals = max(0, 1 - math.floor(math.log10(step)))
    unit = {float(1 << 30): " GiB", float(1 << 20): " MiB", float(1 << 10): " KiB"}.get(scale)
    suffix = unit or (" " + texts[0].split(" ", 1)[1] if " " in texts[0] else "")
    return [f"{t / scale:.{decimals}f}{suffix}" for t in ticks]


def _wrap(text: str, width: float, px: int) -> list[str]:
    """Words of ``text`` in lines that fit ``width``."""
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and text_width(trial, px) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line] if line else lines


def fit(text: str, width: float, px: int = TEXT_PX) -> str:
    """``text``, cut with an ellipsis to fit ``width``."""
    room = int(width / (px * CHAR_EM))
    return text if len(text) <= room else text[:max(1, room - 1)] + "…"


def _shown(labels: list[str]) -> list[int]:
    every = max(1, math.ceil(len(labels) / MAX_X_LABELS))
    return [i for i in range(len(labels)) if i % every == 0 or i == len(labels) - 1]


class _Layout:
    """Where everything goes, from the chart's texts."""

    def __init__(self, chart: Chart):
        known = [v for s in chart.series for v in s.values if v is not None]
        scale = _byte_scale(chart.metric, known)
        self.ticks = [t * scale for t in nice_ticks(min(known) / scale, max(known) / scale)] if known else [0.0, 1.0]
        self.tick_text = tick_texts(self.ticks, chart.metric, scale)
        self.title = _wrap(chart.title, W - 2 * PAD, TITLE_PX)
        self.x_text = [fit(label, X_LABEL_MAX) for label in chart.labels]
        xw = max((text_width(self.x_text[i]) for i in _shown(chart.labels)), default=0.0)
        self.left = PAD + max(max(text_width(t) for t in self.tick_text) + 8, xw * COS30)
        self.top = PAD + len(self.title) * (TITLE_PX + 4) + TEXT_PX + 12
        self.bottom = self.top + PLOT_H
        self.x_title_y = self.bottom + 14 + xw * SIN30 + TEXT_PX + 10
        self.legend = self._legend(chart)
        self.height = (self.legend[-1][2] if self.legend else self.x_title_y) + PAD + 4

    def _legend(self, chart: Chart) -> list[tuple[float, str, float, str]]:
        """(x, text, baseline y, colour) per legend item, wrapped into rows."""
        items = [(s.name, COLORS[i % len(COLORS)]) for i, s in enumerate(chart.series)]
        if chart.mark_legend and any(s.marks for s in chart.series):
            items.append((chart.mark_legend, "mark"))
        out, x, y = [], PAD, self.x_title_y + 18
        for text, colour in items:
            text = fit(text, W - 2 * PAD - 26)
            width = 22 + text_width(text) + 14
            if x > PAD and x + width > W - PAD:
                x, y = PAD, y + 16
            out.append((x, text, y, colour))
            x += width
        return out

    def x(self, index: int, count: int) -> float:
        span = W - RIGHT - self.left
        return self.left + span * (index / (count - 1) if count > 1 else 0.5)

    def y(self, value: float) -> float:
        lo, hi = self.ticks[0], self.ticks[-1]
        return self.bottom - PLOT_H * (value - lo) / (hi - lo)


def _series_parts(chart: Chart, box: _Layout, i: int, s: Series) -> list[str]:
    colour, n = COLORS[i % len(COLORS)], len(chart.labels)
    points = [None if v is None else (box.x(j, n), box.y(v)) for j, v in enumerate(s.values)]
    drawn = [p for p in points if p is not None]
    parts = []
    if len(drawn) > 1:
        d = f"M{drawn[0][0]:.1f},{drawn[0][1]:.1f}" + "".join(
            f" H{x:.1f} V{y:.1f}" if chart.steps else f" L{x:.1f},{y:.1f}" for x, y in drawn[1:])
        parts.append(f'<path class="series" stroke="{colour}" d="{d}"/>')
    for j, (p, v) in enumerate(zip(points, s.values)):
        if p is not None:
            parts.append(f'<circle class="point" fill="{colour}" cx="{p[0]:.1f}" cy="{p[1]:.1f}" r="3.5" '
                         f'data-series="{esc(s.name)}" data-x="{esc(chart.labels[j])}" data-value="{v!r}">'
                         f'<title>{esc(s.name)} at {esc(chart.labels[j])}: {esc(human_value(v, chart.metric))}</title>'
                         f'</circle>')
    for j, text in s.marks:
        if 0 <= j < n and points[j] is not None:
            px, py = points[j]
            right = px > (box.left + W - RIGHT) / 2
            ty = py - 10 if py - 10 - TEXT_PX > box.top else py + 10 + TEXT_PX
            tx = min(px - 12, W - PAD) if right else max(px + 12, PAD)
            parts.append(f'<circle class="change-point mark-ring" cx="{px:.1f}" cy="{py:.1f}" r="8" fill="none"/>'
                         f'<text class="mark" x="{tx:.1f}" y="{ty:.1f}" text-anchor="{"end" if right else "start"}">'
                         f'{esc(text)}</text>')
    return parts


def svg(chart: Chart) -> str:
    """The chart as an inline ``<svg class="plot">``."""
    box = _Layout(chart)
    h, n = round(box.height), len(chart.labels)
    parts = [f'<svg class="plot" data-metric="{esc(chart.metric)}" data-kind="{chart.kind}" width="{W}" '
             f'height="{h}" viewBox="0 0 {W} {h}" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'aria-label="{esc(chart.title)}">']
    parts += [f'<text class="title" x="{PAD}" y="{PAD + (k + 1) * (TITLE_PX + 4) - 4}">{esc(line)}</text>'
              for k, line in enumerate(box.title)]
    parts.append(f'<text class="axis-title" x="{PAD}" y="{box.top - 10:.1f}">'
                 f'{esc(fit(chart.metric, W - 2 * PAD))}</text>')
    for value, text in zip(box.ticks, box.tick_text):
        y = box.y(value)
        parts.append(f'<line class="grid" x1="{box.left:.1f}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>'
                     f'<text class="tick y-tick" x="{box.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" '
                     f'data-value="{value!r}">{esc(text)}</text>')
    parts += [f'<line class="axis" x1="{box.left:.1f}" y1="{box.bottom:.1f}" x2="{W - RIGHT}" y2="{box.bottom:.1f}"/>',
              f'<line class="axis" x1="{box.left:.1f}" y1="{box.top:.1f}" x2="{box.left:.1f}" y2="{box.bottom:.1f}"/>']
    for i in _shown(chart.labels):
        x, y = box.x(i, n), box.bottom + 14
        parts.append(f'<text class="tick x-tick" x="{x:.1f}" y="{y:.1f}" text-anchor="end" '
                     f'transform="rotate(-30 {x:.1f} {y:.1f})">{esc(box.x_text[i])}</text>')
    parts.append(f'<text class="axis-title" x="{(box.left + W - RIGHT) / 2:.1f}" y="{box.x_title_y:.1f}" '
                 f'text-anchor="middle">{esc(fit(chart.x_title, W - box.left - RIGHT))}</text>')
    for i, s in enumerate(chart.series):
        parts += _series_parts(chart, box, i, s)
    for x, text, y, colour in box.legend:
        swatch = (f'<circle class="change-point mark-ring" cx="{x + 9:.1f}" cy="{y - 4:.1f}" r="6" fill="none"/>'
                  if colour == "mark" else
                  f'<line stroke="{colour}" stroke-width="3" x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 18:.1f}" '
                  f'y2="{y - 4:.1f}"/>')
        parts.append(f'<g class="legend-item">{swatch}<text class="legend" x="{x + 22:.1f}" y="{y:.1f}">'
                     f'{esc(text)}</text></g>')
    return "".join(parts) + "</svg>"
