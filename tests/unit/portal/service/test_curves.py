"""Runs compared epoch by epoch (portal.service.curves): parsed as the SVG it is, it has both axes with labelled
ticks (whole epochs; values to their significant digits; powers of ten on a log axis), both axes titled, a legend
naming every run (8 long names inside 320 px), points placed by their epochs and values, runs told apart by dash
and marker as well as colour, values it cannot draw left out and said so, hostile names inert, and its words."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from portal.service.charts import BOTTOM, CHAR_PX, HEIGHT, LEFT, RIGHT, TOP, WIDTH
from portal.service.curves import MARKED_MOST, PALETTE, curves, look, segments
from portal.service.sparkline import significant

SVG = "{http://www.w3.org/2000/svg}"
BASE = HEIGHT - BOTTOM  # the plot's bottom, where the x axis runs
# Three runs as a comparison page passes them: differing epoch ranges, one with a NaN (a diverged batch).
RUNS = [("densenet121", [(1, 0.71), (2, 0.76), (3, 0.80), (4, 0.82)]),
        ("resnet50", [(1, 0.65), (2, 0.70), (3, math.nan), (4, 0.75), (5, 0.77), (6, 0.78)]),
        ("efficientnetb0", [(0, 0.60), (1, 0.69)])]


def drawn(markup: Markup) -> ET.Element:
    assert isinstance(markup, Markup)
    return ET.fromstring(str(markup))


def chart(series=RUNS, **kwargs) -> ET.Element:
    return drawn(curves(series, **{"title": "mean AUROC per epoch", "y_label": "mean AUROC", **kwargs}))


def texts(svg: ET.Element, cls: str | None = None) -> list[ET.Element]:
    return [t for t in svg.iter(f"{SVG}text") if cls is None or t.get("class") == cls]


def tick_labels(svg: ET.Element, axis: str) -> list[tuple[float, str]]:
    """(position, label) of the x ticks (centred below the plot) or the y ticks (right-aligned left of it)."""
    if axis == "x":
        return [(float(t.get("x")), t.text) for t in texts(svg) if t.get("class") is None
                and t.get("text-anchor") == "middle"]
    return [(float(t.get("y")), t.text) for t in texts(svg) if t.get("class") is None
            and t.get("text-anchor") == "end"]


def runs(svg: ET.Element) -> dict[str, ET.Element]:
    """Each drawn run's group, by its name (the group's <title>)."""
    return {g.find(f"{SVG}title").text: g for g in svg.iter(f"{SVG}g") if g.get("class") == "run"}


def markers(group: ET.Element, cls: str = "point") -> list[tuple[float, float]]:
    found = []
    for path in group.iter(f"{SVG}path"):
        if path.get("class") == cls:
            x, y = re.fullmatch(r"translate\(([-\d.]+) ([-\d.]+)\)", path.get("transform")).groups()
            found.append((float(x), float(y)))
    return found


def lines(group: ET.Element) -> list[list[tuple[float, float]]]:
    return [[tuple(map(float, xy.split(","))) for xy in line.get("points").split()]
            for line in group.iter(f"{SVG}polyline")]


def legend(svg: ET.Element) -> list[tuple[str, str]]:
    """(shown text, full name) of each legend entry, in order."""
    return [(g.find(f"{SVG}text").text, g.find(f"{SVG}title").text)
            for g in svg.iter(f"{SVG}g") if g.get("class") == "legend-entry"]


def test_both_axes_are_titled_with_whole_epoch_ticks_and_value_ticks_to_their_digits():
    svg = chart()
    assert [t.text for t in texts(svg, "x-title")] == ["epoch"]
    assert [t.text for t in texts(svg, "y-title")] == ["mean AUROC"]
    x_ticks = [label for _, label in tick_labels(svg, "x")]
    assert x_ticks == ["0", "2", "4", "6"]  # whole epochs, at a 1-2-5 step
    y_ticks = [label for _, label in tick_labels(svg, "y")]
    assert len(y_ticks) >= 3 and len(set(y_ticks)) == len(y_ticks)
    assert all(significant(float(label)) == label for label in y_ticks)  # as the pages print numbers
    wide = chart([("a", [(e, 400.0 + e) for e in range(1, 120)])], y_label="images/sec", unit="img/s")
    assert all(re.fullmatch(r"\d+", label) for _, label in tick_labels(wide, "x"))
    assert 3 <= len(tick_labels(wide, "x")) <= 7
    assert [t.text for t in texts(wide, "y-title")] == ["images/sec (img/s)"]
    lines_ = [(ln.get("x1"), ln.get("y1"), ln.get("x2"), ln.get("y2")) for ln in svg.iter(f"{SVG}line")]
    assert (str(LEFT), str(TOP), str(LEFT), str(BASE)) in lines_ and (str(LEFT), str(BASE), str(WIDTH - RIGHT),
                                                                       str(BASE)) in lines_


def test_points_sit_at_their_epoch_and_value_on_the_axes_ticks():
    svg = chart()
    x_at = {label: x for x, label in tick_labels(svg, "x")}
    y_at = {label: y for y, label in tick_labels(svg, "y")}
    densenet = markers(runs(svg)["densenet121"])
    assert [densenet[1][0], densenet[3][0]] == pytest.approx([x_at["2"], x_at["4"]], abs=0.01)
    assert [x for x, _ in densenet] == sorted(x for x, _ in densenet)  # later epoch: further right
    assert [y for _, y in densenet] == sorted((y for _, y in densenet), reverse=True)  # higher value: higher up
    assert densenet[2][1] == pytest.approx(y_at["0.8"], abs=0.06)  # 0.80 at the "0.8" tick
    for group in runs(svg).values():  # every point inside the plot
        assert all(LEFT < x < WIDTH - RIGHT and TOP < y < BASE for x, y in markers(group))
    line = lines(runs(svg)["densenet121"])[0]
    assert line == densenet  # the line runs through the markers


def test_differing_epoch_ranges_share_one_epoch_axis():
    svg = chart([("early", [(0, 0.5), (1, 0.6), (2, 0.7)]), ("late", [(10, 0.55), (15, 0.65), (20, 0.75)])])
    early, late = (markers(runs(svg)[name]) for name in ("early", "late"))
    assert max(x for x, _ in early) < min(x for x, _ in late)
    assert [label for _, label in tick_labels(svg, "x")] == ["0", "5", "10", "15", "20"]
    assert "epoch 0 to 20" in svg.get("aria-label")
    assert len(lines(runs(svg)["late"])) == 1  # validated every 5 epochs: its cadence, joined


def test_lines_join_only_consecutive_points_and_a_single_point_is_its_marker():
    assert segments([(1, 0.1), (2, 0.2), (4, 0.3), (5, 0.4)]) == [[(1, 0.1), (2, 0.2)], [(4, 0.3), (5, 0.4)]]
    assert segments([(0, 0.1), (5, 0.2), (10, 0.3), (20, 0.4)]) == [[(0, 0.1), (5, 0.2), (10, 0.3)], [(20, 0.4)]]
    resnet = runs(chart())["resnet50"]  # its epoch 3 is NaN: the line breaks there, epoch 4 is not bridged to 2
    assert [len(piece) for piece in lines(resnet)] == [2, 3]
    svg = chart([("one", [(3, 0.7)]), ("two", [(1, 0.5), (2, 0.6)])])
    one = runs(svg)["one"]
    assert len(markers(one)) == 1 and not lines(one)
    alone = chart([("only", [(7, 0.25)])])  # the whole chart a single point: still two axes with their ticks
    assert markers(runs(alone)["only"]) and tick_labels(alone, "x") == [(markers(runs(alone)["only"])[0][0], "7")]
    assert tick_labels(alone, "y")


def test_a_long_run_has_markers_every_few_epochs_and_at_each_end():
    svg = chart([("long", [(e, 0.5 + e / 400) for e in range(100)])])
    group = runs(svg)["long"]
    placed = markers(group)
    assert len(placed) <= MARKED_MOST + 2
    assert placed[0] == lines(group)[0][0] and placed[-1] == lines(group)[0][-1]


def test_an_epoch_given_twice_keeps_its_last_value():
    svg = chart([("resumed", [(1, 0.5), (2, 0.9), (2, 0.6), (3, 0.7)])])
    assert len(markers(runs(svg)["resumed"])) == 3 and "last 0.7 at epoch 3" in svg.get("aria-label")


def test_a_log_axis_has_ticks_at_powers_of_ten_and_leaves_out_what_is_not_above_0():
    loss = [("a", [(0, 2.0), (1, 0.5), (2, 0.1), (3, 0.0), (4, 0.02), (5, -1.0)])]
    svg = chart(loss, title="loss per epoch", y_label="loss", log_y=True)
    ticks = tick_labels(svg, "y")
    assert [label for _, label in ticks] == ["0.1", "1"]
    (y_01, _), (y_1, _) = ticks
    group = runs(svg)["a"]
    y_of = dict(zip((0, 1, 2, 4), (y for _, y in markers(group)), strict=True))
    assert y_of[2] == pytest.approx(y_01, abs=0.06)  # 0.1 at the "0.1" tick
    assert y_of[4] - y_of[2] == pytest.approx(math.log10(5) * (y_01 - y_1), abs=0.1)  # a decade's share
    assert [t.text for t in texts(svg, "y-title")] == ["loss (log scale)"]
    assert [t.text for t in texts(svg, "note")] == ["2 values not drawn: not above 0, on a log axis"]
    assert "2 values not drawn: not above 0, on a log axis" in svg.get("aria-label")
    assert [t.text for t in texts(chart(loss, y_label="loss", unit="nats", log_y=True), "y-title")] == [
        "loss (nats, log scale)"]
    decades = chart([("b", [(e, 10.0 ** -e) for e in range(5)])], log_y=True)
    assert [label for _, label in tick_labels(decades, "y")] == ["0.0001", "0.001", "0.01", "0.1", "1"]


def test_values_that_are_not_finite_are_left_out_and_said_so():
    svg = chart([("a", [(0, 0.5), (1, math.nan), (2, math.inf), (3, None), (4, 0.6)])])
    assert len(markers(runs(svg)["a"])) == 2
    assert [t.text for t in texts(svg, "note")] == ["3 values not drawn: not finite (NaN or infinity)"]
    assert svg.get("aria-label").endswith("3 values not drawn: not finite (NaN or infinity)")
    assert texts(chart(), "note") and not texts(chart(RUNS[:1]), "note")  # nothing left out: no note


def test_the_legend_names_every_run_and_a_run_without_data_says_so():
    svg = chart([*RUNS, ("crashed", [(1, math.nan)]), ("queued", [])])
    assert [name for _, name in legend(svg)] == ["densenet121", "resnet50", "efficientnetb0", "crashed", "queued"]
    assert [shown for shown, _ in legend(svg)][-2:] == ["crashed (no data)", "queued (no data)"]
    assert set(runs(svg)) == {"densenet121", "resnet50", "efficientnetb0"}  # nothing drawn for them
    assert "queued: no data" in svg.get("aria-label")


def test_eight_runs_with_long_names_fit_320_px_each_told_apart_by_dash_and_marker():
    names = [f"run {i}: densenet121 lr=1e-{i} batch 64 augment=heavy seed={i * 1111}" for i in range(8)]
    svg = chart([(name, [(e, 0.6 + 0.01 * e + 0.02 * i) for e in range(1, 21)]) for i, name in enumerate(names)])
    assert int(svg.get("width")) == WIDTH <= 320
    _, _, width, height = map(float, svg.get("viewBox").split())
    assert (width, height) == (WIDTH, float(svg.get("height")))
    entries = legend(svg)
    assert [name for _, name in entries] == names  # the full name kept, in the entry's <title>
    assert all(shown.endswith("…") and name.startswith(shown[:-1]) for shown, name in entries)
    for text in (g.find(f"{SVG}text") for g in svg.iter(f"{SVG}g") if g.get("class") == "legend-entry"):
        assert float(text.get("x")) + len(text.text) * CHAR_PX <= WIDTH and float(text.get("y")) < height
    keys = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "legend-entry"]
    dashes = [k.find(f"{SVG}line").get("stroke-dasharray") for k in keys]
    shapes = [k.find(f"{SVG}path").get("data-marker") for k in keys]
    colours = [k.find(f"{SVG}line").get("stroke") for k in keys]
    assert len(set(dashes)) == len(set(shapes)) == len(set(colours)) == 8
    drawn_dashes = [runs(svg)[n].find(f"{SVG}polyline").get("stroke-dasharray") for n in names]
    assert drawn_dashes == dashes  # the legend's sample is the run's line
    assert all(look(i) != look(j) for i, j in itertools.combinations(range(20), 2))  # more runs: still distinct
    short = chart([(f"r{i}", [(1, 0.5)]) for i in range(8)])
    assert len({t.get("x") for t in (g.find(f"{SVG}text") for g in short.iter(f"{SVG}g")
                                     if g.get("class") == "legend-entry")}) == 3  # short names: 3 to a row


def lum(colour: str) -> float:
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("background", ["#ffffff", "#212529", "#111111"])
def test_every_colour_reads_on_the_light_and_the_dark_theme(background):
    for colour in PALETTE:
        high, low = sorted((lum(colour), lum(background)), reverse=True)
        assert (high + 0.05) / (low + 0.05) >= 3.0, colour  # WCAG 1.4.11: graphics at 3:1


def test_words_are_in_the_texts_colour_and_there_is_no_style_or_script():
    markup = str(curves(RUNS, title="t", y_label="y"))
    assert "style=" not in markup and "<script" not in markup
    svg = drawn(Markup(markup))
    inside = {id(t) for g in svg.findall(f"{SVG}g") if g.get("fill") == "currentColor" for t in g.iter(f"{SVG}text")}
    assert inside and inside == {id(t) for t in svg.iter(f"{SVG}text")}  # all its words in the text's colour
    assert set(re.findall(r'(?:fill|stroke)="([^"]+)"', markup)) <= {"currentColor", "none", *PALETTE}


def test_it_says_what_it_shows_in_words():
    svg = chart()
    words = svg.get("aria-label")
    assert svg.get("role") == "img" and svg.find(f"{SVG}title").text == words
    assert words == ("mean AUROC per epoch for 3 runs: epoch 0 to 6; mean AUROC from 0.6 to 0.82; densenet121: "
                     "4 epochs, last 0.82 at epoch 4; resnet50: 5 epochs, last 0.78 at epoch 6; efficientnetb0: "
                     "2 epochs, last 0.69 at epoch 1; 1 value not drawn: not finite (NaN or infinity)")


def test_hostile_names_come_out_as_text():
    hostile = ['<script>alert(1)</script>', '"onload=alert(1)', "x' onmouseover='y", "a\x00b&amp;"]
    markup = curves([(name, [(1, 0.5), (2, 0.6)]) for name in hostile], title='<img src=x onerror=alert(1)>',
                    y_label='"><script>', unit="</svg>")
    svg = drawn(markup)  # parses: nothing closed early
    assert not [e for e in svg.iter() if e.tag.endswith(("script", "img"))]
    assert all(not a.startswith("on") for e in svg.iter() for a in e.attrib)
    assert [name for _, name in legend(svg)] == ["<script>alert(1)</script>", '"onload=alert(1)',
                                                 "x' onmouseover='y", "ab&amp;"]
    assert svg.get("aria-label").startswith("<img src=x onerror=alert(1)> for 4 runs")
    assert [t.text for t in texts(svg, "y-title")] == ['"><script> (</svg>)']
    empty = str(curves([], title="<b>x</b>", y_label="y"))
    assert "<b>" not in empty and "&lt;b&gt;" in empty


def test_nothing_to_draw_is_a_sentence_not_a_chart():
    assert curves([], title="mean AUROC per epoch", y_label="mean AUROC") == Markup(
        '<p class="curves-empty">Nothing to draw for mean AUROC per epoch: no runs.</p>')
    none_yet = str(curves([("a", []), ("b", [(1, math.nan)])], title="loss per epoch", y_label="loss"))
    assert none_yet == ('<p class="curves-empty">Nothing to draw for loss per epoch: 2 runs, none with a value yet '
                        "(1 value not drawn: not finite (NaN or infinity)).</p>")


@pytest.mark.parametrize("points, named", [([(-1, 0.5)], "epoch '-1'"), ([(1.5, 0.5)], "epoch '1.5'"),
                                           ([(True, 0.5)], "epoch 'True'"), ([(1, "0.5")], "value '0.5'")])
def test_an_epoch_or_value_of_the_wrong_kind_is_refused_naming_the_run(points, named):
    with pytest.raises(ValueError, match=f"run 'mine': {named}.*allowed"):
        curves([("mine", points)], title="t", y_label="y")
