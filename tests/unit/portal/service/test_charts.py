"""A sweep's chart (portal.service.charts): parsed as the SVG it is, it has two axes, labelled ticks (log ticks at
powers of ten, categories by name), both axes titled, every dot inside the plot, the best trial ringed and labelled,
pruned trials hollow, the text's colour, a phone's width, and its words."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from portal.service.charts import (
    BOTTOM,
    DOT,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    linear_axis,
    log_axis,
    nice_step,
    scatter,
    trial_chart,
)

SVG = "{http://www.w3.org/2000/svg}"
# The reviewer's sweep: four learning rates as Optuna draws them, trial 0 the best by its final value.
LRS = [0.0006824078427098838, 0.00012345678901234, 0.0061999999, 0.0021000001]
AUROCS = [0.960, 0.951, 0.941, 0.955]


def drawn(markup: Markup) -> ET.Element:
    assert isinstance(markup, Markup)
    return ET.fromstring(str(markup))


def texts(svg: ET.Element, cls: str | None = None) -> list[ET.Element]:
    return [t for t in svg.iter(f"{SVG}text") if cls is None or t.get("class") == cls]


def tick_labels(svg: ET.Element, axis: str) -> list[str]:
    """The x ticks' labels (text-anchor middle, below the plot) or the y ticks' (text-anchor end, left of it)."""
    if axis == "x":
        return [t.text for t in texts(svg) if t.get("class") is None and t.get("text-anchor") == "middle"]
    return [t.text for t in texts(svg) if t.get("class") is None and t.get("text-anchor") == "end"]


def dots(svg: ET.Element, cls: str = "trial") -> list[ET.Element]:
    return [c for c in svg.iter(f"{SVG}circle") if c.get("class") == cls]


def lr_markup(**kwargs) -> Markup:
    return scatter(list(zip(LRS, AUROCS, strict=True)), label="final mean AUROC against lr", log_x=True,
                   x_title="lr", y_title="final mean AUROC", **kwargs)


def lr_chart(**kwargs) -> ET.Element:
    return drawn(lr_markup(**kwargs))


def test_the_chart_has_both_axes_each_titled_with_labelled_ticks():
    svg = lr_chart(best=0)
    base = HEIGHT - BOTTOM
    lines = [(line.get("x1"), line.get("y1"), line.get("x2"), line.get("y2")) for line in svg.iter(f"{SVG}line")]
    assert (str(LEFT), str(TOP), str(LEFT), str(base)) in lines  # the y axis
    assert (str(LEFT), str(base), str(WIDTH - RIGHT), str(base)) in lines  # the x axis
    assert [t.text for t in texts(svg, "x-title")] == ["lr (log scale)"]
    assert [t.text for t in texts(svg, "y-title")] == ["final mean AUROC"]
    assert "rotate(-90)" in texts(svg, "y-title")[0].get("transform")
    assert tick_labels(svg, "y") == ["0.94", "0.95", "0.96"]  # to the digits the step needs, not 0.940000001
    assert tick_labels(svg, "x") == ["0.0001", "0.001"]  # a log axis: at powers of ten


def test_no_dot_sits_on_an_axis_or_the_frame():
    for svg in (lr_chart(), drawn(scatter([(1, 0.5)])), drawn(scatter([("a", 0.1), ("b", 0.9), ("c", 0.5)]))):
        for dot in dots(svg):
            cx, cy = float(dot.get("cx")), float(dot.get("cy"))
            assert LEFT + 2 * DOT < cx < WIDTH - RIGHT - 2 * DOT and TOP + 2 * DOT < cy < HEIGHT - BOTTOM - 2 * DOT


def test_the_best_trial_is_ringed_and_labelled_at_its_dot_and_a_pruned_one_is_hollow():
    svg = lr_chart(best=0, hollow={2})
    trials = dots(svg)
    ring = dots(svg, "best")
    assert len(trials) == 4 and len(ring) == 1
    assert (ring[0].get("cx"), ring[0].get("cy")) == (trials[0].get("cx"), trials[0].get("cy"))
    assert ring[0].get("fill") == "none" and float(ring[0].get("r")) > float(trials[0].get("r"))
    assert [t.text for t in texts(svg, "best")] == ["best"]
    assert float(trials[0].get("cy")) == min(float(d.get("cy")) for d in trials)  # the highest value: the top
    assert [d.get("fill") for d in trials] == ["currentColor", "currentColor", "none", "currentColor"]
    assert not dots(lr_chart(), "best") and not texts(lr_chart(), "best")  # nothing to mark: nothing marked


def test_the_best_label_stays_inside_the_chart_at_the_right_edge():
    svg = drawn(scatter([(1.0, 0.5), (2.0, 0.9)], best=1))
    label = texts(svg, "best")[0]
    assert label.get("text-anchor") == "end" and 0 < float(label.get("y")) < HEIGHT


def test_colours_are_the_texts_and_it_fits_a_phone():
    markup = str(lr_markup(best=0, hollow={2}))
    assert not re.search(r"#[0-9a-fA-F]{3,6}\b|rgb\(", markup) and "style=" not in markup
    assert set(re.findall(r'(?:fill|stroke)="([^"]+)"', markup)) <= {"currentColor", "none"}
    svg = drawn(Markup(markup))
    assert int(svg.get("width")) <= 340 and svg.get("viewBox") == f"0 0 {WIDTH} {HEIGHT}"
    # every word is in the text's colour: its own fill, or its group's (SVG's default black is unreadable dark)
    group = svg.find(f"{SVG}g")
    assert group.get("fill") == "currentColor"
    assert all(t.get("fill") == "currentColor" for t in svg.findall(f"{SVG}text"))  # the ones outside the group
    assert svg.findall(f"{SVG}text") and len(texts(svg)) == len(svg.findall(f"{SVG}text")) + len(
        group.findall(f"{SVG}text"))


def test_it_says_what_it_shows_in_words():
    svg = lr_chart(best=0)
    words = svg.get("aria-label")
    assert svg.get("role") == "img" and svg.find(f"{SVG}title").text == words
    assert words == ("final mean AUROC against lr: 4 trials; lr from 0.000123 to 0.0062 (log scale); "
                     "final mean AUROC from 0.941 to 0.960; best 0.960 at lr 0.000682")
    assert "<b>" not in str(scatter([(1, 0.5)], label="<b>", x_title="<i>"))


def test_categories_are_named_places_in_the_choices_order_and_points_without_a_value_are_left_out():
    choices = ["densenet121", "resnet50", "efficientnetb0", "a", "b", "c"]
    svg = drawn(scatter([("resnet50", 0.7), ("densenet121", 0.8), (True, None), ("resnet50", math.nan)],
                        x_title="model", categories=choices))
    assert tick_labels(svg, "x") == ["densen…", "resnet…", "effici…", "a", "b", "c"]  # cut to fit its place
    assert len(dots(svg)) == 2
    resnet, densenet = (float(d.get("cx")) for d in dots(svg))
    assert densenet < resnet
    numbers = drawn(scatter([(0.001, 0.5), (1e-8, 0.6)], categories=[1e-8, 0.001]))
    assert tick_labels(numbers, "x") == ["1e-8", "0.001"]  # numeric choices: still categories, in order
    assert scatter([]) == Markup("") and scatter([(1, None), (2, math.inf)]) == Markup("")


@pytest.mark.parametrize("span, step", [(0.02, 0.005), (1.0, 0.5), (37, 10), (0.0011, 0.0005)])
def test_ticks_step_by_one_two_or_five_times_a_power_of_ten(span, step):
    assert nice_step(span) == pytest.approx(step)


def test_log_ticks_are_powers_of_ten_then_one_two_five_then_the_ends():
    def labels(values):
        return [label for _, label in log_axis(values).ticks]

    assert labels([1e-5, 1e-2]) == ["1e-5", "0.0001", "0.001", "0.01"]
    assert len(log_axis([1e-4, 1e-2]).minor) == 2 * 8 + 3  # 2 to 9 times each power, unlabelled, inside the axis
    assert labels([0.0011, 0.0048]) == ["0.001", "0.002", "0.005"]  # within a decade: 1-2-5
    assert labels([0.0013, 0.0042]) == ["0.002", "0.003", "0.004"]  # within a 1-2-5 step: every whole multiple
    assert labels([0.0031, 0.0033]) == ["0.0031", "0.0033"]  # closer still: the two ends
    assert labels([0.003]) == ["0.003"]  # one value: labelled where it is
    wide = labels([1e-12, 1.0])
    assert 2 <= len(wide) <= 6 and all(re.fullmatch(r"1e-\d+|0\.0*1|1", label) for label in wide)
    assert not log_axis([1e-12, 1.0]).minor  # many decades: no unlabelled marks between


def test_linear_ticks_are_distinct_and_whole_numbers_step_by_whole_numbers():
    labels = [label for _, label in linear_axis([0.9551, 0.9553, 0.9556]).ticks]
    assert len(labels) >= 2 and len(set(labels)) == len(labels)
    assert all(float(label) == int(float(label)) for _, label in linear_axis([1, 2], whole=True).ticks)


def test_a_sweeps_chart_marks_the_trial_the_view_calls_best_and_leaves_out_those_without_a_value():
    sweep = {"plan": {"space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}, "objective": "final mean AUROC",
             "best": {"task": 3},
             "trials": [{"task": 0, "state": "COMPLETED", "params": {"lr": 1e-3}, "value": 0.95},
                        {"task": 1, "state": "PRUNED", "params": {"lr": 1e-4}, "value": 0.99},
                        {"task": 2, "state": "RUNNING", "params": {"lr": 5e-3}, "value": None},
                        {"task": 3, "state": "COMPLETED", "params": {"lr": 2e-3}, "value": 0.96}]}
    svg = drawn(trial_chart(sweep, "lr"))
    trials, ring = dots(svg), dots(svg, "best")
    assert len(trials) == 3 and [d.get("fill") for d in trials] == ["currentColor", "none", "currentColor"]
    assert (ring[0].get("cx"), ring[0].get("cy")) == (trials[2].get("cx"), trials[2].get("cy"))
    assert svg.get("aria-label").startswith("final mean AUROC against lr: 3 trials;") and "(log scale)" in \
        svg.get("aria-label")
    assert trial_chart({**sweep, "best": None}, "lr").count('class="best"') == 0
