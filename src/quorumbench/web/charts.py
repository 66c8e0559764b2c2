"""Server-side SVG: interval bars for tables and the score-history chart.

Pure functions returning markup (``markupsafe.Markup``); colours come from CSS
classes, so dark mode needs no second drawing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

BAR_WIDTH = 120
SERIES = 6  # CSS classes series-0 .. series-5


def _x(value: float, width: float) -> float:
    return round(min(1.0, max(0.0, value)) * width, 2)


def interval_bar(score: float, low: float, high: float, *, width: int = BAR_WIDTH) -> Markup:
    """A 95% interval as a bar on [0, 1] with a tick at the score."""
    x0, x1, xs = _x(low, width), _x(high, width), _x(score, width)
    label = f"{score:.3f} (95% interval {low:.3f} to {high:.3f})"
    return Markup(
        f'<svg class="ci" width="{width}" height="12" viewBox="0 0 {width} 12" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line class="ci-axis" x1="0" y1="6" x2="{width}" y2="6"/>'
        f'<rect class="ci-range" x="{x0}" y="2" width="{max(1.0, x1 - x0):.2f}" height="8" '
        f'rx="2"/><line class="ci-score" x1="{xs}" y1="0" x2="{xs}" y2="12"/></svg>'
    )


def history_chart(
    series: Mapping[str, Sequence[tuple[int, float]]],
    *,
    width: int = 640,
    height: int = 220,
    unit: str = "epoch",
    lines: str = "benchmark(s)",
) -> Markup:
    """Scores per epoch (or ``unit``), one line per benchmark (or what ``lines`` names),
    with a legend; empty when no points."""
    points = [p for values in series.values() for p in values]
    if not points:
        return Markup("")
    left, right, top, bottom = 40, 12, 12, 28
    epochs = [e for e, _ in points]
    lo, hi = min(epochs), max(epochs)
    span = max(1, hi - lo)
    plot_w, plot_h = width - left - right, height - top - bottom

    def xy(epoch: int, score: float) -> str:
        x = left + (epoch - lo) / span * plot_w if hi > lo else left + plot_w / 2
        y = top + (1 - min(1.0, max(0.0, score))) * plot_h
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg class="history" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Score per {escape(unit)} for {len(series)} {escape(lines)}">'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + (1 - tick) * plot_h
        parts.append(
            f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>'
        )
    parts.append(
        f'<text class="axis" x="{left}" y="{height - 8}">{escape(unit)} {lo}</text>'
        f'<text class="axis" x="{width - right}" y="{height - 8}" text-anchor="end">'
        f"{escape(unit)} {hi}</text>"
    )
    for i, (name, values) in enumerate(sorted(series.items())):
        cls = f"series-{i % SERIES}"
        coords = " ".join(xy(e, s) for e, s in values)
        parts.append(f'<g class="{cls}"><title>{escape(name)}</title>')
        if len(values) > 1:
            parts.append(f'<polyline fill="none" points="{coords}"/>')
        for e, s in values:
            cx, cy = xy(e, s).split(",")
            parts.append(
                f'<circle cx="{cx}" cy="{cy}" r="3"><title>{escape(name)}, {escape(unit)} {e}: '
                f"{s:.3f}</title></circle>"
            )
        parts.append("</g>")
    parts.append("</svg>")
    legend = "".join(
        f'<li><span class="swatch series-{i % SERIES}"></span>{escape(name)}</li>'
        for i, name in enumerate(sorted(series))
    )
    return Markup("".join(parts) + f'<ul class="legend">{legend}</ul>')
