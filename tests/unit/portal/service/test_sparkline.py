"""The server-drawn sparkline (an inline SVG that says in words what it shows), the time left in words, and a
number to its significant digits."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from portal.service.sparkline import PAD, format_duration, points, short_number, significant, sparkline

SVG = "{http://www.w3.org/2000/svg}"


def drawn(markup: Markup) -> ET.Element:
    """The SVG parsed as XML: well-formed, or the test fails."""
    assert isinstance(markup, Markup)
    return ET.fromstring(str(markup))


def polyline_points(svg: ET.Element) -> list[tuple[float, float]]:
    line = svg.find(f"{SVG}polyline")
    return [tuple(map(float, pair.split(","))) for pair in line.get("points").split()]


def test_a_rising_series_runs_from_bottom_left_to_top_right_in_the_texts_colour():
    svg = drawn(sparkline([380.1, 400.0, 412.3], width=120, height=24, label="images/sec per epoch"))
    assert (svg.get("role"), svg.get("width"), svg.get("height")) == ("img", "120", "24")
    assert svg.get("aria-label") == "images/sec per epoch: 3 values, last 412.3 (from 380.1 to 412.3)"
    assert svg.find(f"{SVG}title").text == svg.get("aria-label")
    line = svg.find(f"{SVG}polyline")
    assert (line.get("stroke"), line.get("fill")) == ("currentColor", "none")
    first, middle, last = polyline_points(svg)
    assert first == (PAD, 24 - PAD) and last == (120 - PAD, PAD)
    assert first[0] < middle[0] < last[0] and last[1] < middle[1] < first[1]
    assert (float(svg.find(f"{SVG}circle").get("cx")), float(svg.find(f"{SVG}circle").get("cy"))) == last


def test_a_constant_series_is_a_level_line_and_one_value_a_dot():
    assert {y for _, y in polyline_points(drawn(sparkline([0.8] * 4, height=20)))} == {10.0}
    one = drawn(sparkline([5], width=60, height=20, label="AUROC"))
    assert one.find(f"{SVG}polyline") is None and one.get("aria-label") == "AUROC: 1 value, last 5.000"
    assert (one.find(f"{SVG}circle").get("cx"), one.find(f"{SVG}circle").get("cy")) == ("30", "10")


def test_nothing_to_draw_is_no_markup_and_non_finite_points_are_skipped():
    assert sparkline([]) == Markup("") and sparkline([math.nan, math.inf]) == Markup("")
    assert len(polyline_points(drawn(sparkline([1.0, math.nan, 3.0, -math.inf])))) == 2


def test_the_label_is_escaped():
    markup = str(sparkline([1, 2], label='<script>"x"</script>'))
    assert "<script>" not in markup and drawn(Markup(markup)).get("aria-label").startswith('<script>"x"</script>:')


@pytest.mark.parametrize("kwargs, field", [({"values": [1, "2"]}, "values"), ({"values": [True]}, "values"),
                                           ({"width": 0}, "width"), ({"height": 1e9}, "height")])
def test_what_is_not_a_series_or_a_size_is_refused_by_name(kwargs, field):
    with pytest.raises(ValueError) as refused:
        sparkline(**{"values": [1.0, 2.0], **kwargs})
    assert str(refused.value).startswith(f"{field}: ")


def test_points_spread_evenly_and_numbers_read_short():
    assert [x for x, _ in points([1.0, 2.0, 3.0, 4.0, 5.0], 104, 20)] == [2.0, 27.0, 52.0, 77.0, 102.0]
    assert [short_number(v) for v in (412.25, 0.81234, 12345.6, 0.0, -3.5)] == [
        "412.2", "0.8123", "12346", "0", "-3.500"]


@pytest.mark.parametrize("seconds, words", [
    (0, "0 s"), (45.4, "45 s"), (59.6, "1 min"), (240, "4 min"), (3599, "1 h 00 min"), (3900, "1 h 05 min"),
    (27 * 3600 + 60, "27 h 01 min"), (-5, "0 s"), (None, ""), (math.nan, ""), (math.inf, "")])
def test_a_duration_in_words(seconds, words):
    assert format_duration(seconds) == words


@pytest.mark.parametrize("value, text", [
    (0.0006824078427098838, "0.000682"), (0.001, "0.001"), (0.0001, "0.0001"), (6.82e-5, "6.82e-5"),
    (3e-5, "3e-5"), (0.0009996, "0.001"), (1234.5, "1230"), (12345.0, "1.23e4"), (-0.5, "-0.5"), (0.0, "0"),
    (128, "128"), (True, "True"), ("densenet121", "densenet121"), (None, "-"), (math.nan, "nan")])
def test_a_parameter_prints_to_three_significant_digits(value, text):
    assert significant(value) == text


def test_more_digits_when_asked():
    assert significant(0.95556, 4) == "0.9556" and significant(0.95, 4) == "0.95"
