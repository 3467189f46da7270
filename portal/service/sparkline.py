"""Small figures for the jobs list and a job's page, drawn on the server: a sparkline (an inline SVG), a duration in
words ("1 h 05 min") and a number to its significant digits (a sweep's chart is portal.service.charts).

Pure: values in, markup or text out. The SVG strokes with `currentColor`, so it takes the colour of the text around
it and reads in the light and the dark theme alike; it carries its own words (`role="img"` and an `aria-label`
with the count, the last value and the range), so a screen reader says what the line shows. No script, no library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from markupsafe import Markup, escape

MAX_SIDE = 2000  # pixels: a sparkline is small; a bigger ask is a mistake in a template
PAD = 2.0  # pixels kept free at each edge, so the stroke and the end dot are not cut off
STROKE = 1.5


def finite_values(values: Iterable[object]) -> list[float]:
    """The finite numbers of `values`, in order (NaN and infinities are points that do not exist: skipped).
    ValueError for anything that is not a number: a series is numbers or it is a mistake."""
    found = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"values: {str(value)[:20]!r} is not a number; allowed: numbers")
        if math.isfinite(value):
            found.append(float(value))
    return found


def significant(value: object, digits: int = 3) -> str:
    """A value as the pages print a parameter or a tick: a float to `digits` significant digits, trailing zeros
    dropped, without an exponent from 1e-4 to 1e4 ("0.000682", "0.01", "1230") and with one beyond ("6.82e-5");
    anything else (an int, a bool, a name) as it is; None: "-". One function for the sweep's summary, its table,
    its chart and the API, so that they print the same trial's `lr` alike."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits - 1}e}")  # to `digits`, first: 9.996e-4 becomes 1.00e-3
    magnitude = math.floor(math.log10(abs(rounded)))
    if -4 <= magnitude < 4:
        text = f"{rounded:.{max(0, digits - 1 - magnitude)}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = f"{rounded:.{digits - 1}e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.') if '.' in mantissa else mantissa}e{int(exponent)}"


def short_number(value: float) -> str:
    """About four significant digits without an exponent: 412.3, 0.8123, 12345."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    return f"{value:.{max(0, 3 - magnitude)}f}"


def points(values: list[float], width: int, height: int) -> list[tuple[float, float]]:
    """(x, y) in SVG coordinates (y down) of each value, spread evenly across the width, the lowest value at the
    bottom and the highest at the top; a constant series is a level line at mid-height, one value a point in the
    middle."""
    low, high = min(values), max(values)
    inner_w, inner_h = width - 2 * PAD, height - 2 * PAD
    step = inner_w / (len(values) - 1) if len(values) > 1 else 0.0
    found = []
    for i, value in enumerate(values):
        x = PAD + i * step if len(values) > 1 else width / 2
        y = height / 2 if high == low else PAD + (high - value) / (high - low) * inner_h
        found.append((round(x, 2), round(y, 2)))
    return found


def _side(name: str, value: object) -> int:
    if type(value) is not int or not 8 <= value <= MAX_SIDE:
        raise ValueError(f"{name}: {str(value)[:20]!r} is not a whole number of pixels in 8-{MAX_SIDE}")
    return value


def describe(label: str, values: list[float]) -> str:
    """What the line shows, in words: "images/sec per epoch: 5 values, last 412.3 (from 380.1 to 415.0)"."""
    if not values:
        return f"{label}: no values yet"
    text = f"{label}: {len(values)} value{'s' if len(values) != 1 else ''}, last {short_number(values[-1])}"
    if len(values) > 1:
        text += f" (from {short_number(min(values))} to {short_number(max(values))})"
    return text


def sparkline(values: Iterable[object], width: int = 120, height: int = 24, label: str = "values") -> Markup:
    """An inline `<svg role="img">` of the values as a line (non-finite values skipped), its last point marked.
    No finite value: empty markup (there is nothing to draw, and the figure beside it says so)."""
    found = finite_values(values)
    width, height = _side("width", width), _side("height", height)
    if not found:
        return Markup("")
    xy = points(found, width, height)
    last_x, last_y = xy[-1]
    line = ""
    if len(xy) > 1:
        coords = " ".join(f"{x:g},{y:g}" for x, y in xy)
        line = (f'<polyline points="{coords}" fill="none" stroke="currentColor" stroke-width="{STROKE:g}" '
                f'stroke-linejoin="round" stroke-linecap="round"/>')
    words = escape(describe(label, found))
    return Markup(
        f'<svg class="sparkline" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{words}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" focusable="false">'
        f'<title>{words}</title>{line}<circle cx="{last_x:g}" cy="{last_y:g}" r="{STROKE + 0.5:g}" '
        f'fill="currentColor"/></svg>')


def format_duration(seconds: float | None) -> str:
    """A time left in words: "45 s", "4 min", "1 h 05 min" (rounded to the second, then to the minute from a
    minute on). Nothing known (None, not finite): ""; a negative time (the estimate ran over) is "0 s"."""
    if seconds is None or isinstance(seconds, bool) or not math.isfinite(seconds):
        return ""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total} s"
    minutes = round(total / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
