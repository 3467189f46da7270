"""Training runs compared epoch by epoch, drawn on the server: one curve per run (mean AUROC, loss, images/sec
against the epoch), overlaid on shared axes, as a small inline SVG a reader can read off: both axes with labelled
ticks (whole epochs along the bottom, the values up the side, on a log axis with `log_y`), each axis titled, and a
legend naming every run.

Laid out as a sweep's chart is (portal.service.charts, whose axes, ticks and frame it reuses) and as TensorBoard's
scalar view overlays runs. Runs are told apart three ways at once, so that none of them alone carries the meaning:
a colour, a dash pattern and a marker shape each, the legend showing all three beside the run's name. Colour alone
fails a reader who cannot tell red from green and a page printed in grey, and currentColor alone leaves eight runs
as eight grey lines told apart only by dashes that a short curve may not show. So each run also gets a colour, from a
small palette of mid tones, each with at least 3:1 contrast (WCAG's ratio for graphics) against white, the dark
theme's #212529 and #111 alike; the axes and all the words stay in the text's colour (`currentColor`). Colours are
SVG attributes, not `style=` (the pages' CSP allows no style attribute).

A line joins two points only when they are consecutive in the run's own cadence (its smallest step between epochs:
1, or 5 for a run validated every 5 epochs); a missing epoch, or a value dropped for not being finite (NaN, an
infinity) or not above 0 on a log axis, breaks the line rather than bridging it, and the chart says how many values
it left out. An epoch given twice keeps its last value (a resumed run writes it again). The legend takes as many
columns (up to 3) as the names fit whole, else stacks one run a row, cutting a name too long for that with an
ellipsis (its full name is the entry's `<title>`, shown on hover). `viewBox` lets CSS shrink it to a phone's width;
it says in words what it shows (`role="img"`, an `aria-label` and a `<title>`). No script, no library; every word
escaped (run names are the user's).

Pure: series in, markup out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from portal.service.charts import (
    BOTTOM,
    CHAR_PX,
    FONT,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    Axis,
    axis_titles,
    fitted,
    frame,
    linear_axis,
    log_axis,
    x_axis_marks,
    y_axis_marks,
)
from portal.service.sparkline import significant

__all__ = ["curves"]

# Mid tones: each at least 3:1 against #fff, #212529 (Bootstrap's dark body) and #111 (tests/.../test_curves.py).
PALETTE = ("#3a87c8", "#c25a00", "#2e9a3e", "#d4357f", "#9a6bd0", "#138a9a", "#a5662f", "#6e7f8c")
# stroke-dasharray values, each of a period short enough to show twice in the legend's sample ("": solid).
DASHES = ("", "6 3", "2 2", "8 3 2 3", "12 4", "1 3", "6 2 1 2 1 2", "4 4")


@dataclass(frozen=True)
class Marker:
    """A point's shape, centred on (0, 0): a path, filled with the run's colour or drawn as an outline."""

    name: str
    path: str
    filled: bool


MARKERS = (
    Marker("circle", "M-3.2,0a3.2,3.2 0 1,0 6.4,0a3.2,3.2 0 1,0 -6.4,0z", True),
    Marker("square", "M-2.8,-2.8h5.6v5.6h-5.6z", True),
    Marker("triangle", "M0,-3.7L3.4,2.3H-3.4z", True),
    Marker("diamond", "M0,-3.8L3.4,0L0,3.8L-3.4,0z", True),
    Marker("triangle-down", "M0,3.7L3.4,-2.3H-3.4z", False),
    Marker("plus", "M-3.6,0H3.6M0,-3.6V3.6", False),
    Marker("cross", "M-3,-3L3,3M-3,3L3,-3", False),
    Marker("ring", "M-3.2,0a3.2,3.2 0 1,0 6.4,0a3.2,3.2 0 1,0 -6.4,0z", False),
)
STROKE = 1.5
MARKED_MOST = 16  # markers on a run's line; a longer run gets one every few epochs (and at each break)
LEGEND_MARGIN, LEGEND_ROW, SAMPLE = 6, 15, 26  # pixels: the legend's side margin, a row, a run's line sample
MOST_COLUMNS = 3
EPOCH_TICKS = 6  # about as many epoch ticks: 1 2 3 4, 0 5 10 15 20 (4 would leave 1-8 with only 5)
LEGEND_TOP = HEIGHT + 2  # the legend's first row, below the x axis's title
NO_DATA = " (no data)"


@dataclass(frozen=True)
class Run:
    """One run as drawn: its name, its drawable (epoch, value) points by epoch, and its look."""

    label: str
    points: tuple[tuple[int, float], ...]
    colour: str
    dash: str
    marker: Marker


def look(index: int) -> tuple[str, str, Marker]:
    """The colour, dash pattern and marker of the run at `index`: all three differ between the first eight; after
    that the dash pattern shifts against the other two, so that two runs still differ in one of them."""
    turn = index // len(MARKERS)
    return (PALETTE[index % len(PALETTE)], DASHES[(index + turn) % len(DASHES)], MARKERS[index % len(MARKERS)])


def _label(raw: object, index: int) -> str:
    """A run's name as printable text (control characters out: they are not allowed in XML), else "run N"."""
    text = "".join(c for c in str(raw) if c.isprintable()).strip()
    return text or f"run {index + 1}"


def _epoch(label: str, epoch: object) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"series: run {label[:40]!r}: epoch {str(epoch)[:20]!r} is not allowed; allowed: whole "
                         "numbers from 0")
    return epoch


def _runs(series: Sequence[tuple[str, Sequence[tuple[int, float]]]], log_y: bool) -> tuple[list[Run], dict[str, int]]:
    """Each run with the points it can draw, and how many values were left out, by reason. ValueError for an epoch
    that is not a whole number from 0, or a value that is not a number (None counts as a missing value)."""
    runs, dropped = [], {"not finite": 0, "not above 0": 0}
    for index, (raw_label, raw_points) in enumerate(series):
        label = _label(raw_label, index)
        by_epoch: dict[int, float] = {}
        for epoch, value in raw_points:
            at = _epoch(label, epoch)
            if value is None or isinstance(value, int | float) and not isinstance(value, bool) and \
                    not math.isfinite(value):
                dropped["not finite"] += 1
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"series: run {label[:40]!r}: value {str(value)[:20]!r} at epoch {at} is not a "
                                 "number; allowed: numbers")
            elif log_y and value <= 0:
                dropped["not above 0"] += 1
            else:
                by_epoch[at] = float(value)
        runs.append(Run(label, tuple(sorted(by_epoch.items())), *look(index)))
    return runs, dropped


def segments(points: Sequence[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """`points` (by epoch) cut where a step between epochs is longer than the run's cadence (its shortest step):
    each piece is drawn as one line; a piece of one point is a marker alone."""
    if not points:
        return []
    cadence = min((b[0] - a[0] for a, b in zip(points, points[1:], strict=False)), default=1)
    pieces = [[points[0]]]
    for before, point in zip(points, points[1:], strict=False):
        if point[0] - before[0] > cadence:
            pieces.append([])
        pieces[-1].append(point)
    return pieces


def marked(pieces: list[list[tuple[int, float]]], index: int) -> list[tuple[int, float]]:
    """The points of a run that carry its marker: all of them up to MARKED_MOST, else every few (each run starting
    at a different one, so that runs' markers do not pile up on the same epochs) and the ends of every piece."""
    points = [p for piece in pieces for p in piece]
    if len(points) <= MARKED_MOST:
        return points
    every = math.ceil(len(points) / MARKED_MOST)
    ends = {p for piece in pieces for p in (piece[0], piece[-1])}
    return [p for i, p in enumerate(points) if i % every == index % every or p in ends]


def _marker(marker: Marker, colour: str, x: float, y: float, cls: str = "point") -> str:
    fill = colour if marker.filled else "none"
    return (f'<path class="{cls}" data-marker="{marker.name}" transform="translate({x:.2f} {y:.2f})" '
            f'd="{marker.path}" fill="{fill}" stroke="{colour}" stroke-width="1.2"/>')


def _run_marks(run: Run, index: int, x_px: Callable[[float], float], y_px: Callable[[float], float]) -> str:
    """One run's lines and markers as an SVG group, its name as the group's `<title>` (shown on hover)."""
    pieces = segments(run.points)
    dash = f' stroke-dasharray="{run.dash}"' if run.dash else ""
    lines = [f'<polyline class="line" points="{" ".join(f"{x_px(e):.2f},{y_px(v):.2f}" for e, v in piece)}" '
             f'fill="none" stroke="{run.colour}" stroke-width="{STROKE}"{dash}/>' for piece in pieces if len(piece) > 1]
    markers = [_marker(run.marker, run.colour, x_px(e), y_px(v)) for e, v in marked(pieces, index)]
    return (f'<g class="run" stroke-linejoin="round" stroke-linecap="round"><title>{escape(run.label)}</title>'
            f'{"".join(lines)}{"".join(markers)}</g>')


def columns(runs: Sequence[Run]) -> int:
    """The most legend columns (up to MOST_COLUMNS, no more than runs) in which every name fits whole; else 1."""
    for count in range(min(MOST_COLUMNS, len(runs)), 1, -1):
        if all(len(_entry_text(run, count)) == len(run.label + ("" if run.points else NO_DATA)) for run in runs):
            return count
    return 1


def _text_room(count: int) -> float:
    return (WIDTH - 2 * LEGEND_MARGIN) / count - SAMPLE - 10


def _entry_text(run: Run, count: int) -> str:
    """The run's name as its legend entry shows it in `count` columns: cut to fit, "(no data)" kept whole."""
    if run.points:
        return fitted(run.label, _text_room(count))
    return fitted(run.label, _text_room(count) - len(NO_DATA) * CHAR_PX) + NO_DATA


def legend(runs: Sequence[Run], top: float) -> tuple[str, float]:
    """Each run's sample (its line's colour and dash, its marker) and name, in rows from `top`; and its height."""
    count = columns(runs)
    width = (WIDTH - 2 * LEGEND_MARGIN) / count
    entries = []
    for i, run in enumerate(runs):
        row, column = divmod(i, count)
        x, y = LEGEND_MARGIN + column * width, top + (row + 0.5) * LEGEND_ROW
        sample = ""
        if run.points:
            dash = f' stroke-dasharray="{run.dash}"' if run.dash else ""
            sample = (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + SAMPLE:.1f}" y2="{y:.1f}" stroke="{run.colour}" '
                      f'stroke-width="{STROKE}"{dash}/>{_marker(run.marker, run.colour, x + SAMPLE / 2, y, "key")}')
        entries.append(f'<g class="legend-entry"><title>{escape(run.label)}</title>{sample}'
                       f'<text x="{x + SAMPLE + 5:.1f}" y="{y:.1f}" dy="0.32em">{escape(_entry_text(run, count))}'
                       "</text></g>")
    return "".join(entries), math.ceil(len(runs) / count) * LEGEND_ROW


def notes(dropped: dict[str, int]) -> list[str]:
    """What was left out, in words: "2 values not drawn: not finite (NaN or infinity)"."""
    why = {"not finite": "not finite (NaN or infinity)", "not above 0": "not above 0, on a log axis"}
    return [f"{count} value{'s' if count != 1 else ''} not drawn: {why[reason]}"
            for reason, count in dropped.items() if count]


def note_marks(left_out: Sequence[str], top: float) -> str:
    """The notes as lines of text from `top`, below the legend."""
    return "".join(f'<text class="note" x="{LEGEND_MARGIN}" y="{top + (i + 0.8) * LEGEND_ROW:.1f}">'
                   f"{escape(fitted(note, WIDTH - 2 * LEGEND_MARGIN))}</text>" for i, note in enumerate(left_out))


def describe(title: str, runs: Sequence[Run], y_title: str, left_out: Sequence[str], x_title: str = "epoch") -> str:
    """What the chart shows, in words: "mean AUROC per epoch for 2 runs: epoch 1 to 20; mean AUROC from 0.712 to
    0.843; baseline: 20 epochs, last 0.843 at epoch 20; small lr: no data; 1 value not drawn: not finite (NaN or
    infinity)"."""
    drawn = [p for run in runs for p in run.points]
    noun = "epoch" if x_title == "epoch" else "value"
    parts = [f"{x_title} {min(e for e, _ in drawn)} to {max(e for e, _ in drawn)}",
             f"{y_title} from {significant(min(v for _, v in drawn))} to {significant(max(v for _, v in drawn))}"]
    for run in runs:
        if run.points:
            epoch, value = run.points[-1]
            count = len(run.points)
            parts.append(f"{run.label}: {count} {noun}{'s' if count != 1 else ''}, last {significant(value)} at "
                         f"{x_title} {epoch}")
        else:
            parts.append(f"{run.label}: no data")
    return f"{title} for {counted(len(runs), x_title)}: {'; '.join([*parts, *left_out])}"


def counted(count: int, x_title: str = "epoch") -> str:
    """"2 runs" (a chart per epoch), "2 series" (any other: an Operations chart's lines are no runs)."""
    return f"{count} run{'s' if count != 1 else ''}" if x_title == "epoch" else f"{count} series"


def nothing_to_draw(title: str, runs: Sequence[Run], left_out: Sequence[str], x_title: str = "epoch") -> Markup:
    """A short paragraph in the chart's place: no runs, or no run with a value to draw."""
    why = f"no {counted(2, x_title).split()[1]}" if not runs else \
        f"{counted(len(runs), x_title)}, none with a value yet"
    extra = f" ({'; '.join(left_out)})" if left_out else ""
    return Markup('<p class="curves-empty">Nothing to draw for {}: {}{}.</p>').format(title, why, extra)


def y_axis_title(y_label: str, unit: str, log_y: bool) -> str:
    """The y axis's title: "images/sec (img/s)", "loss (log scale)", "loss (nats, log scale)"."""
    inside = ", ".join(part for part in (unit, "log scale" if log_y else "") if part)
    return f"{y_label} ({inside})" if inside else y_label


def _axes(runs: Sequence[Run], log_y: bool, x_span: tuple[int, int] | None = None) -> tuple[Axis, Axis]:
    drawn = [p for run in runs for p in run.points]
    x_axis = linear_axis([e for e, _ in drawn] + list(x_span or ()), whole=True, count=EPOCH_TICKS)
    values = [v for _, v in drawn]
    return x_axis, log_axis(values) if log_y else linear_axis(values)


def curves(series: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, title: str, y_label: str, unit: str = "",
           log_y: bool = False, x_title: str = "epoch", x_span: tuple[int, int] | None = None) -> Markup:
    """An inline `<svg role="img">` of several runs' per-epoch values, overlaid: `series` is (run name, [(epoch,
    value), ...]) per run, in the legend's order; epochs whole numbers from 0, in any order, with gaps, differing
    between runs; values numbers, those not finite (NaN, infinities, None) left out and counted in a note, as are
    those not above 0 with `log_y` (a log axis cannot show them). `title` says what it shows ("mean AUROC per
    epoch"); `y_label` and `unit` title the y axis ("images/sec (img/s)"). A run with nothing to draw is named in
    the legend with "(no data)". No runs, or none with a value: a short paragraph saying there is nothing to draw.
    ValueError for an epoch or a value of the wrong kind (the message names the run). `x_title`: what the whole
    numbers along the bottom count where they are not epochs ("minutes since 13:05 UTC"); `x_span`: the least
    range the x axis spans, whatever the points (an hour's window: (0, 60))."""
    runs, dropped = _runs(series, log_y)
    left_out = notes(dropped)
    if not any(run.points for run in runs):
        return nothing_to_draw(title, runs, left_out, x_title)
    x_axis, y_axis = _axes(runs, log_y, x_span)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def x_px(epoch: float) -> float:
        return LEFT + x_axis.share(epoch) * plot_w

    def y_px(value: float) -> float:
        return base - y_axis.share(math.log10(value) if log_y else value) * plot_h

    def y_tick_px(at: float) -> float:  # the axis's own units (log10 of the value on a log axis)
        return base - y_axis.share(at) * plot_h

    y_title = y_axis_title(y_label, unit, log_y)
    keys, keys_h = legend(runs, LEGEND_TOP)
    height = math.ceil(LEGEND_TOP + keys_h + len(left_out) * LEGEND_ROW + 4)
    words = escape(describe(title, runs, y_title, left_out, x_title))
    lines = "".join(_run_marks(run, i, x_px, y_px) for i, run in enumerate(runs) if run.points)
    return Markup(
        f'<svg class="curves" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{words}" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" focusable="false"><title>{words}</title>'
        f'<g fill="currentColor" font-size="{FONT}">'
        f'{"".join(y_axis_marks(y_axis, y_tick_px))}{frame(base)}{"".join(x_axis_marks(x_axis, x_px, base, False))}'
        f'{axis_titles(x_title, fitted(y_title, plot_h + TOP), base)}{keys}{note_marks(left_out, LEGEND_TOP + keys_h)}'
        f"</g>{lines}</svg>")
