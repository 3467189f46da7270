"""A sweep's chart, drawn on the server: the objective (y) against one searched parameter (x), one dot per trial,
as a small inline SVG with what a reader needs to read it off: both axes, a few ticks with their values, each axis
titled, the best trial ringed and labelled "best".

Laid out as the slice plot of Optuna's visualisation and TensorBoard's HParams scatter view are: the objective up
the side, the parameter along the bottom, a log-scaled parameter on a log axis with ticks at powers of ten (or at
1-2-5 within a decade), a categorical one as evenly spaced named places. The data range is padded, so no dot sits on
an axis or the frame. Everything strokes and fills with `currentColor` (the text's colour: the light and the dark
theme alike), the `viewBox` lets CSS shrink it to a phone's width, and it says in words what it shows
(`role="img"`, an `aria-label` and a `<title>`). No script, no library.

Pure: points in, markup out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from portal.service.sparkline import significant

WIDTH, HEIGHT = 320, 210  # pixels; fits a 375 px phone beside the page's margins (and shrinks: portal.css)
LEFT, RIGHT, TOP, BOTTOM = 54, 14, 18, 42  # room for the y tick labels and title, "best", the x labels and title
FONT = 10
DOT, RING = 3.5, 7.5  # a trial's dot, and the ring around the best one
PAD_SHARE = 0.1  # of the data's range, kept free at each end of an axis
MOST_TICKS = 6
CHAR_PX = 6.0  # about the width of one character at FONT: to fit category names under their places


@dataclass(frozen=True)
class Axis:
    """Where values fall along one axis: `low`..`high` in axis units (log10 of the value on a log axis, a
    category's place on a categorical one), and the ticks as (axis units, label)."""

    low: float
    high: float
    ticks: tuple[tuple[float, str], ...]
    minor: tuple[float, ...] = ()  # unlabelled marks: 2 to 9 times each power of ten, on a log axis

    def share(self, at: float) -> float:
        """How far along the axis (0 to 1) a point in axis units falls."""
        return (at - self.low) / (self.high - self.low)


def nice_step(span: float, count: int = 4) -> float:
    """A tick spacing of 1, 2 or 5 times a power of ten that cuts `span` into about `count` pieces."""
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _padded(low: float, high: float, floor_pad: float) -> tuple[float, float]:
    pad = (high - low) * PAD_SHARE if high > low else floor_pad
    return low - pad, high + pad


def linear_axis(values: Sequence[float], whole: bool = False, count: int = 4) -> Axis:
    """A linear axis over `values`, padded, with ticks at a 1-2-5 step that cuts it into about `count` pieces (at
    least 1 for whole numbers); each tick labelled to the digits its step needs ("0.94", "0.96"), where a fixed
    number of digits would print "0.955" twice, or one number three times."""
    low, high = _padded(min(values), max(values), abs(min(values)) * PAD_SHARE or 0.5)
    step = nice_step(high - low, count)
    if whole:
        step = max(1.0, round(step))
    first = math.ceil(low / step - 1e-9)
    ticks = [(n * step, n) for n in range(first, first + MOST_TICKS * 3) if n * step <= high + 1e-9 * step]
    largest = max((abs(at) for at, _ in ticks), default=0.0) or step
    digits = max(1, math.floor(math.log10(largest)) - math.floor(math.log10(step)) + 1)
    return Axis(low, high, tuple((at, significant(float(at), digits)) for at, _ in ticks))


def log_axis(values: Sequence[float]) -> Axis:
    """A log axis (in log10 units) over positive `values`, padded: ticks at the powers of ten it spans (every
    other one beyond six), else at 1, 2 and 5 times them, else at every whole multiple, else at the two ends."""
    low, high = _padded(math.log10(min(values)), math.log10(max(values)), PAD_SHARE)
    for mantissas in ((1,), (1, 2, 5), tuple(range(1, 10))):
        found = [math.log10(m) + power for power in range(math.floor(low), math.ceil(high) + 1)
                 for m in mantissas if low <= math.log10(m) + power <= high]
        if len(found) >= 2:
            break
    else:
        found = [math.log10(min(values)), math.log10(max(values))] if min(values) < max(values) else \
            [math.log10(min(values))]
    thin = math.ceil(len(found) / MOST_TICKS)
    minor = tuple(math.log10(m) + power for power in range(math.floor(low), math.ceil(high) + 1)
                  for m in range(2, 10) if low <= math.log10(m) + power <= high) \
        if mantissas == (1,) and high - low <= MOST_TICKS else ()
    return Axis(low, high, tuple((at, significant(10.0 ** at)) for at in found[::thin]), minor)


def category_axis(names: Sequence[str]) -> Axis:
    """Each category at a whole-numbered place, half a place free at each end."""
    return Axis(-0.5, len(names) - 0.5, tuple((float(i), name) for i, name in enumerate(names)))


def _number(x: object, positive: bool = False) -> float | None:
    """`x` as a float when it is a finite number (above 0 with `positive`), else None (a category, or nothing)."""
    if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and (not positive or x > 0):
        return float(x)
    return None


def fitted(label: str, room_px: float) -> str:
    """`label` as it fits in `room_px` at FONT: whole, or cut with an ellipsis."""
    most = max(1, int(room_px / CHAR_PX))
    return label if len(label) <= most else label[:max(1, most - 1)] + "…"


def x_axis_marks(axis: Axis, to_px: Any, base: float, categorical: bool) -> list[str]:
    """The x axis's ticks as SVG, below the plot's `base`: a tick and its label (a category's name cut to fit its
    place); an unlabelled short mark at each of `axis.minor`."""
    room = (WIDTH - LEFT - RIGHT) / max(1, len(axis.ticks)) if categorical else 60.0
    marks = [f'<line x1="{to_px(at):.1f}" y1="{base:.1f}" x2="{to_px(at):.1f}" y2="{base + 2.5:.1f}" '
             'stroke="currentColor" stroke-opacity="0.6"/>' for at in axis.minor]
    for at, label in axis.ticks:
        x = to_px(at)
        marks.append(f'<line x1="{x:.1f}" y1="{base:.1f}" x2="{x:.1f}" y2="{base + 4:.1f}" stroke="currentColor"/>'
                     f'<text x="{x:.1f}" y="{base + 15:.1f}" text-anchor="middle">{escape(fitted(label, room))}'
                     "</text>")
    return marks


def y_axis_marks(axis: Axis, to_px: Any) -> list[str]:
    """The y axis's ticks as SVG: a faint grid line across the plot, a tick and its label left of the axis; an
    unlabelled short mark at each of `axis.minor`."""
    marks = [f'<line x1="{LEFT - 2.5}" y1="{to_px(at):.1f}" x2="{LEFT}" y2="{to_px(at):.1f}" '
             'stroke="currentColor" stroke-opacity="0.6"/>' for at in axis.minor]
    for at, label in axis.ticks:
        y = to_px(at)
        marks.append(f'<line x1="{LEFT - 4}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="currentColor" '
                     f'stroke-opacity="0.15"/><line x1="{LEFT - 4}" y1="{y:.1f}" x2="{LEFT}" y2="{y:.1f}" '
                     f'stroke="currentColor"/><text x="{LEFT - 7}" y="{y:.1f}" dy="0.32em" text-anchor="end">'
                     f"{escape(label)}</text>")
    return marks


def frame(base: float) -> str:
    """The two axes' lines: up the left of the plot from `base` to the top, and along its bottom."""
    return (f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base:g}" stroke="currentColor"/>'
            f'<line x1="{LEFT}" y1="{base:g}" x2="{WIDTH - RIGHT}" y2="{base:g}" stroke="currentColor"/>')


def axis_titles(x_title: str, y_title: str, base: float) -> str:
    """Each axis's title (escaped here): the x's centred below its tick labels, the y's turned up its left side."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, base - TOP
    return (f'<text class="x-title" x="{LEFT + plot_w / 2:.1f}" y="{base + BOTTOM - 6:g}" text-anchor="middle">'
            f'{escape(x_title)}</text>'
            f'<text class="y-title" transform="translate(12 {TOP + plot_h / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_title)}</text>')


def _best_mark(cx: float, cy: float) -> str:
    """A ring around the best dot, and the word beside it (to its left near the right edge, below near the top)."""
    right = cx + RING + 28 > WIDTH - RIGHT
    x = cx - RING - 1 if right else cx + RING + 1
    y = cy + RING + FONT if cy - RING - FONT < 2 else cy - RING + 1
    anchor = "end" if right else "start"
    return (f'<circle class="best" cx="{cx:.2f}" cy="{cy:.2f}" r="{RING}" fill="none" stroke="currentColor" '
            f'stroke-width="1.5"/><text class="best" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
            f'fill="currentColor" font-size="{FONT + 1}" font-weight="bold">best</text>')


def scatter(pairs: Iterable[tuple[object, object]], label: str = "values", log_x: bool = False,
            x_title: str = "x", y_title: str = "y", best: int | None = None, hollow: Collection[int] = (),
            categories: Sequence[object] = ()) -> Markup:
    """An inline `<svg role="img">` chart of (x, y) points, such as a sweep's objective (y) against one of its
    parameters (x): x numeric (on a log axis with `log_x`, when every x is above 0) or categories: `categories` in
    their order (a parameter's choices, numbers or not), else whatever x is not a number, in the order first met.
    `best`: the index in `pairs` of the point to ring and label "best"; `hollow`: the indices of points drawn as
    rings (a pruned trial's). A point whose y is not a finite number is left out; nothing left: empty markup."""
    found = [(i, x, y) for i, (x, raw) in enumerate(pairs) if (y := _number(raw)) is not None]
    if not found:
        return Markup("")
    xs = [x for _, x, _ in found]
    numbers = [n for x in xs if (n := _number(x, positive=log_x)) is not None]
    numeric = len(numbers) == len(xs) and not categories
    log_x = log_x and numeric
    if numeric:
        x_axis = log_axis(numbers) if log_x else linear_axis(numbers, whole=all(isinstance(x, int) for x in xs))
        x_at = [math.log10(x) if log_x else x for x in numbers]
    else:
        names = list(dict.fromkeys([*map(significant, categories), *map(significant, xs)]))
        x_axis = category_axis(names)
        x_at = [float(names.index(significant(x))) for x in xs]
    ys = [y for _, _, y in found]
    y_axis = linear_axis(ys)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def x_px(at: float) -> float:
        return LEFT + x_axis.share(at) * plot_w

    def y_px(at: float) -> float:
        return base - y_axis.share(at) * plot_h

    dots, marks = [], []
    for (i, _, y), at in zip(found, x_at, strict=True):
        cx, cy = x_px(at), y_px(y)
        fill = 'fill="none" stroke="currentColor" stroke-width="1.2"' if i in hollow else \
            'fill="currentColor" fill-opacity="0.75"'
        dots.append(f'<circle class="trial" cx="{cx:.2f}" cy="{cy:.2f}" r="{DOT}" {fill}/>')
        if i == best:
            marks.append(_best_mark(cx, cy))
    words = escape(describe(label, found, x_title, y_title, log_x if numeric else None, best))
    titles = axis_titles(f'{x_title}{" (log scale)" if log_x else ""}', y_title, base)
    return Markup(
        f'<svg class="scatter" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{words}" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" focusable="false"><title>{words}</title>'
        f'<g fill="currentColor" font-size="{FONT}">'
        f'{"".join(y_axis_marks(y_axis, y_px))}{frame(base)}{"".join(x_axis_marks(x_axis, x_px, base, not numeric))}'
        f'{titles}</g>{"".join(dots)}{"".join(marks)}</svg>')


def describe(label: str, found: list[tuple[int, object, float]], x_title: str, y_title: str, log_x: bool | None,
             best: int | None) -> str:
    """What the chart shows, in words: "final mean AUROC against lr: 4 trials; lr from 0.000125 to 0.00682 (log
    scale); final mean AUROC from 0.941 to 0.960; best 0.960 at lr 0.000682". `log_x` None: x is categories."""
    xs = [x for _, x, _ in found]
    numbers = [n for x in xs if (n := _number(x)) is not None]
    if log_x is not None:
        x_words = f"from {significant(min(numbers))} to {significant(max(numbers))}{' (log scale)' if log_x else ''}"
    else:
        x_words = ", ".join(dict.fromkeys(significant(x) for x in xs))
    ys = [y for _, _, y in found]
    text = (f"{label}: {len(found)} trial{'s' if len(found) != 1 else ''}; {x_title} {x_words}; "
            f"{y_title} from {min(ys):.3f} to {max(ys):.3f}")
    marked = [(x, y) for i, x, y in found if i == best]
    if marked:
        text += f"; best {marked[0][1]:.3f} at {x_title} {significant(marked[0][0])}"
    return text


def trial_chart(sweep: Mapping[str, Any], name: str) -> Markup:
    """A sweep's chart for one searched parameter (`sweep`: SweepView.to_dict()): each trial with an objective
    value (completed: a dot; pruned: a ring, its value where it stopped) against its value of `name`, the best
    trial (the view's `best`, so the chart marks the trial that the summary and the table name) ringed. A
    parameter searched among choices is categorical (as Optuna samples it), its choices in the plan's order."""
    plan_space = sweep["plan"]["space"].get(name) or {}
    best_task = sweep["best"]["task"] if sweep.get("best") else None
    pairs: list[tuple[object, object]] = []
    hollow: set[int] = set()
    best = None
    for row in sweep["trials"]:
        if name not in row["params"] or row["value"] is None:
            continue
        if row["task"] == best_task:
            best = len(pairs)
        if row["state"] == "PRUNED":
            hollow.add(len(pairs))
        pairs.append((row["params"][name], row["value"]))
    objective = sweep.get("objective", "objective")
    return scatter(pairs, label=f"{objective} against {name}", log_x=bool(plan_space.get("log")), x_title=name,
                   y_title=objective, best=best, hollow=hollow, categories=plan_space.get("choices") or ())
