"""The two plots of a failing case in report.html, written as SVG directly: error and bound (ULPs)
versus step, and a histogram of the per-element error at the worst step. Both have a log y axis
with one labelled tick per power of ten.

Written here rather than drawn with a plotting library: a report has up to 2 * PLOT_CASES of them,
rendered after the sweep while nothing else runs, and drawing them through matplotlib took 3 s of a
40 s main job (about 60 ms a figure); these take well under a millisecond each. The output is
deterministic (the same document gives the same bytes) and needs no ids, so several share a page.
"""
from __future__ import annotations

import html
import math

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
FONT = 'font-family="sans-serif"'


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _tick(v: float) -> str:
    """A log axis label, short: 0.01, 1, 1000, 1e5."""
    return f"{v:g}" if 1e-3 <= v < 1e4 else f"1e{round(math.log10(v))}"


class _Frame:
    """A plot area at (left, top) of (width, height) pixels: x linear over [x0, x1], y log10 over
    the decades [d0, d1] that hold every positive value given."""

    def __init__(self, left, top, width, height, x0, x1, values):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.x0, self.x1 = x0, (x1 if x1 > x0 else x0 + 1)
        logs = [math.log10(v) for v in values if v is not None and math.isfinite(v) and v > 0]
        self.d0 = math.floor(min(logs)) if logs else 0
        self.d1 = max(math.ceil(max(logs)) if logs else 1, self.d0 + 1)

    def x(self, v) -> float:
        return self.left + (v - self.x0) / (self.x1 - self.x0) * self.width

    def y(self, v) -> float | None:
        """The pixel row of a positive value; None where the log axis has no place for it."""
        if v is None or not math.isfinite(v) or v <= 0:
            return None
        return self.top + (self.d1 - math.log10(v)) / (self.d1 - self.d0) * self.height

    def axes(self, ylabel: str, xlabel: str = "") -> list[str]:
        """The box, a grid line and a label per decade (at most 8 labelled: every k-th), axis titles."""
        out = [f'<rect x="{self.left:.1f}" y="{self.top:.1f}" width="{self.width:.1f}" height="{self.height:.1f}" '
               'fill="none" stroke="#444" stroke-width="0.8"/>']
        step = max(1, math.ceil((self.d1 - self.d0 + 1) / 8))
        for d in range(self.d0, self.d1 + 1, step):
            y = self.y(10.0 ** d)
            out.append(f'<line x1="{self.left:.1f}" y1="{y:.1f}" x2="{self.left + self.width:.1f}" y2="{y:.1f}" '
                       'stroke="#bbb" stroke-width="0.5"/>')
            out.append(f'<text x="{self.left - 4:.1f}" y="{y + 3:.1f}" text-anchor="end" font-size="9" {FONT}>'
                       f'{_tick(10.0 ** d)}</text>')
        mid = self.top + self.height / 2
        out.append(f'<text x="12" y="{mid:.1f}" transform="rotate(-90 12 {mid:.1f})" text-anchor="middle" '
                   f'font-size="10" {FONT}>{_esc(ylabel)}</text>')
        if xlabel:
            out.append(f'<text x="{self.left + self.width / 2:.1f}" y="{self.top + self.height + 28:.1f}" '
                       f'text-anchor="middle" font-size="10" {FONT}>{_esc(xlabel)}</text>')
        return out


def _svg(width: int, height: int, title_lines: list[str], body: list[str]) -> str:
    title = "".join(f'<text x="{width / 2:.1f}" y="{13 + 11 * k}" text-anchor="middle" font-size="9" {FONT}>'
                    f'{_esc(line)}</text>' for k, line in enumerate(title_lines))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{title}{"".join(body)}</svg>')


def _runs(points):
    """Consecutive drawable points: a value the log axis cannot show breaks the line there."""
    run = []
    for p in points:
        if p[1] is None:
            if run:
                yield run
            run = []
        else:
            run.append(p)
    if run:
        yield run


def _x_ticks(frame: _Frame, steps) -> list[str]:
    """Up to 6 integer step labels under the plot area."""
    lo, hi = min(steps), max(steps)
    every = max(1, math.ceil((hi - lo + 1) / 6))
    out = []
    for s in range(lo, hi + 1, every):
        x, y = frame.x(s), frame.top + frame.height
        out.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 3:.1f}" stroke="#444" stroke-width="0.8"/>')
        out.append(f'<text x="{x:.1f}" y="{y + 13:.1f}" text-anchor="middle" font-size="9" {FONT}>{s}</text>')
    return out


def series_plot(series: list, width: int = 460, height: int = 250) -> str:
    """series: [(check name, steps, error ULPs, bound ULPs)], at most 6 drawn (one colour each):
    the error solid (with markers up to 8 steps), the bound dashed; the legend beside the plot."""
    series = series[:6]
    steps = [s for _, st, _, _ in series for s in st]
    values = [v for _, _, err, bound in series for v in (*err, *bound)]
    frame = _Frame(58, 36, width - 58 - 150, height - 36 - 40, min(steps), max(steps), values)
    body = frame.axes("ULPs", "step") + _x_ticks(frame, steps)
    legend_x = frame.left + frame.width + 10
    for k, ((name, st, err, bound), colour) in enumerate(zip(series, COLOURS)):
        for values_, dash in ((err, ""), (bound, ' stroke-dasharray="4 3" opacity="0.7"')):
            for run in _runs([(frame.x(s), frame.y(v)) for s, v in zip(st, values_)]):
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                body.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.2"{dash}/>')
                if not dash and len(st) <= 8:
                    body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>' for x, y in run]
        for j, (label, dash) in enumerate(((f"{name} error", ""), (f"{name} bound", ' stroke-dasharray="4 3"'))):
            y = frame.top + 6 + 13 * (2 * k + j)
            body.append(f'<line x1="{legend_x:.1f}" y1="{y:.1f}" x2="{legend_x + 16:.1f}" y2="{y:.1f}" '
                        f'stroke="{colour}" stroke-width="1.2"{dash}/>')
            body.append(f'<text x="{legend_x + 20:.1f}" y="{y + 3:.1f}" font-size="8" {FONT}>{_esc(label)}</text>')
    return _svg(width, height, ["error and bound versus step", "(the worst element of each step)"], body)


def histogram_plot(labels: list[str], counts: list[int], title_lines: list[str], width: int = 400,
                   height: int = 260) -> str:
    """Element counts per error bin on a log axis (an empty bin draws nothing), bin labels turned."""
    frame = _Frame(58, 36, width - 58 - 12, height - 36 - 62, 0, len(counts), [0.5, *counts])  # a count of 1 shows
    body = frame.axes("elements")
    bar = frame.width / max(len(counts), 1)
    base = frame.top + frame.height
    for i, (label, n) in enumerate(zip(labels, counts)):
        x = frame.left + i * bar
        y = frame.y(n)
        if y is not None:
            body.append(f'<rect x="{x + 0.1 * bar:.1f}" y="{y:.1f}" width="{0.8 * bar:.1f}" height="{base - y:.1f}" '
                        f'fill="#4575b4"><title>{_esc(label)}: {n}</title></rect>')
        cx = x + bar / 2
        body.append(f'<text x="{cx:.1f}" y="{base + 8:.1f}" transform="rotate(-60 {cx:.1f} {base + 8:.1f})" '
                    f'text-anchor="end" font-size="6.5" {FONT}>{_esc(label)}</text>')
    return _svg(width, height, title_lines, body)


__all__ = ["histogram_plot", "series_plot"]
