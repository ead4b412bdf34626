"""Small inline SVG charts for the HTML report (no JavaScript, nothing fetched).

One kind of chart is enough: lines over seconds since the run started, with
the nemesis fault windows shaded and labelled, so throughput, errors and
latency can be read against the faults that caused them.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
FAULT_FILL = ("#fde2c8", "#e0d4f5", "#d2eedb", "#f9d3d9", "#d6e6f7")


def _nice_step(span: float, ticks: int) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def line_chart(
    title: str,
    series: list[tuple[str, list[tuple[float, float | None]]]],
    x_max: float,
    windows: list[dict] = (),
    y_label: str = "",
    width: int = 960,
    height: int = 230,
) -> str:
    """An SVG line chart. series: [(label, [(x seconds, y or None)])]; windows in seconds."""
    left, right, top, bottom = 64, 16, 28, 34
    pw, ph = width - left - right, height - top - bottom
    ys = [y for _, pts in series for _, y in pts if y is not None]
    y_max = max(ys) if ys else 1.0
    y_max = y_max * 1.08 if y_max > 0 else 1.0
    x_max = max(x_max, 1.0)

    def sx(x):
        return left + pw * x / x_max

    def sy(y):
        return top + ph - ph * y / y_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="ct">{escape(title)}</text>',
    ]
    for i, w in enumerate(windows):
        x0, x1 = sx(max(0.0, w["start_s"])), sx(min(x_max, w["stop_s"]))
        fill = FAULT_FILL[i % len(FAULT_FILL)]
        out.append(
            f'<rect x="{x0:.1f}" y="{top}" width="{max(1.0, x1 - x0):.1f}" height="{ph}" '
            f'fill="{fill}" opacity="0.75"><title>{escape(w["label"])}</title></rect>'
        )
        if x1 - x0 >= 6 * len(w["label"]) or len(windows) <= 6:  # narrow windows: tooltip only
            out.append(
                f'<text x="{x0 + 2:.1f}" y="{top + 11 + 11 * (i % 3)}" class="wl">{escape(w["label"])}</text>'
            )
    step = _nice_step(y_max, 4)
    v = 0.0
    while v <= y_max:
        y = sy(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="yt">{_fmt(v)}</text>')
        v += step
    xstep = _nice_step(x_max, 8)
    v = 0.0
    while v <= x_max + 1e-9:
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" class="xt">{_fmt(v)}</text>')
        v += xstep
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" class="axis"/>')
    out.append(f'<text x="{left + pw}" y="{height - 2}" class="xa">seconds since start</text>')
    if y_label:
        out.append(
            f'<text x="12" y="{top + ph / 2:.1f}" class="yl" transform="rotate(-90 12 {top + ph / 2:.1f})">'
            f"{escape(y_label)}</text>"
        )
    for i, (label, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        segs, cur = [], []
        for x, y in pts:
            if y is None:
                if cur:
                    segs.append(cur)
                cur = []
                continue
            cur.append(f"{sx(x):.1f},{sy(y):.1f}")
        if cur:
            segs.append(cur)
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(seg)}"/>')
        lx = left + 10 + 150 * i
        out.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="3" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 8}" class="lg">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


CHART_CSS = """
svg.chart { background: #fff; border: 1px solid #ddd; margin: 6px 0 14px; }
svg.chart .ct { font: 600 13px sans-serif; fill: #222; }
svg.chart .wl { font: 10px sans-serif; fill: #7a4a10; }
svg.chart .yt { font: 10px sans-serif; fill: #555; text-anchor: end; }
svg.chart .xt { font: 10px sans-serif; fill: #555; text-anchor: middle; }
svg.chart .yl, svg.chart .lg { font: 10px sans-serif; fill: #333; }
svg.chart .xa { font: 10px sans-serif; fill: #555; text-anchor: end; }
svg.chart .grid { stroke: #eee; }
svg.chart .axis { stroke: #888; }
"""
