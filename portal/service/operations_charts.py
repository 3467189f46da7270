"""The Operations page's charts (docs/operations.md): a few PromQL range queries to the operators' Prometheus
(portal.prometheus_access: the box's or a site's), each answer checked against the shape of Prometheus' API before
it is drawn with portal.service.curves, one line per series, minutes along the bottom.

What Prometheus answers is read like any outside answer: at most MOST_BYTES, JSON, `status` success, a `matrix` of
at most MOST_SERIES series of at most MOST_POINTS [time, "value"] pairs, labels strings. Anything else is a
`ChartError` naming the query and what was wrong, shown in the chart's place; the other charts still draw.
"""

from __future__ import annotations

import base64
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from portal import prometheus_access
from portal.config import PortalConfig
from portal.config_values import ConfigError
from portal.errors import BadAnswer
from portal.service.curves import curves

MOST_BYTES = 4 << 20
MOST_SERIES, MOST_POINTS, MOST_LABEL = 50, 2000, 80
TIMEOUT_S = 10.0
# The windows the page offers: (its name, seconds, step seconds); the first is the default.
WINDOWS = (("1h", 3600, 60), ("6h", 6 * 3600, 300), ("24h", 24 * 3600, 900))


@dataclass(frozen=True)
class Chart:
    """One chart: its title, the y axis's words, and its queries as (legend, PromQL); a legend may name a label of
    the series it draws ("{partition}"), each series of the answer then one line."""

    title: str
    y_label: str
    unit: str
    queries: tuple[tuple[str, str], ...]




def or_zero(query: str, job: str) -> str:
    """`query`, else 0 while its target answers with none of it (no GPU held yet), else nothing (not read)."""
    return f'{query} or on() (up{{job="{job}"}} == 1) * 0'


GPU_SHARES = ("held", "busy", "idle", "unknown")
CHARTS = (
    Chart("Targets scraped", "up", "1 read, 0 failed", (("{job}", "up"),)),
    Chart("GPUs held, busy and idle", "GPUs", "", tuple(
        (name, or_zero(f"sum(rate(dsportal_gpu_{name}_seconds_total[5m]))", "portal")) for name in GPU_SHARES)),
    Chart("Jobs and servers waiting", "waiting", "", (("{partition}", "sum by (partition) (dsportal_queue_pending)"),)),
    Chart("Longest wait in the queue", "wait", "s",
          (("{partition}", "max by (partition) (dsportal_queue_oldest_wait_seconds)"),)),
    Chart("Jobs and servers by state", "count", "", (("{state}", "sum by (state) (dsportal_jobs)"),)),
    Chart("Sweeps' trials by state", "trials", "", (("{state}", "sum by (state) (dsportal_sweep_trials)"),)),
    Chart("Servers running (the hub)", "servers", "",
          (("servers", or_zero("sum(jupyterhub_running_servers)", "hub")),)),
    Chart("Spawns that did not succeed, each hour (the hub)", "spawns", "per hour",
          (("{status}: {reason}", 'sum by (status, reason) (increase('
                                  'jupyterhub_server_spawn_duration_seconds_count{status!="success"}[1h]))'),)),
    Chart("Refusals and GPU-watch events, each hour", "events", "per hour",
          (("refused {action}", "sum by (action) (increase(dsportal_refusals_total[1h]))"),
           ("{act} {kind}", "sum by (act, kind) (increase(dsportal_gpu_watch_events_total[1h]))"))),
)


class ChartError(BadAnswer):
    """A chart that cannot be drawn: Prometheus did not answer, or its answer is not what its API says (shown in the
    chart's place, never raised to the page)."""


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (unix time, value)


def window_of(name: str | None) -> tuple[str, int, int]:
    """The window named (1h, 6h, 24h); the first for none. ValueError naming the field for another."""
    if not name:
        return WINDOWS[0]
    for window in WINDOWS:
        if window[0] == name:
            return window
    raise ValueError(f"window: {name[:20]!r} is not allowed; allowed: {', '.join(w[0] for w in WINDOWS)}")


def _number(raw: object, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ChartError(f"{where} is not a number")
    try:
        return float(raw)  # Prometheus writes values as strings ("1", "NaN", "+Inf")
    except ValueError:
        raise ChartError(f"{where} is not a number") from None


def parse_matrix(answer: object, query: str) -> list[Series]:
    """The series of a query_range answer, checked against its shape (ChartError naming what is wrong)."""
    def wrong(what: str) -> ChartError:
        return ChartError(f"Prometheus' answer to {query!r}: {what}")
    if not isinstance(answer, dict):
        raise wrong("not a JSON object")
    if answer.get("status") != "success":
        raise wrong(f"{str(answer.get('errorType', 'error'))[:40]}: {str(answer.get('error', ''))[:200]}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise wrong("data is not a matrix")
    if len(data["result"]) > MOST_SERIES:
        raise wrong(f"{len(data['result'])} series; at most {MOST_SERIES} are drawn")
    found = []
    for i, item in enumerate(data["result"]):
        metric, values = (item.get("metric"), item.get("values")) if isinstance(item, dict) else (None, None)
        if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in metric.items()):
            raise wrong(f"result[{i}].metric is not labels (strings)")
        if not isinstance(values, list) or len(values) > MOST_POINTS:
            raise wrong(f"result[{i}].values is not a list of at most {MOST_POINTS} points")
        points = []
        for j, pair in enumerate(values):
            if not isinstance(pair, list) or len(pair) != 2:
                raise wrong(f"result[{i}].values[{j}] is not [time, value]")
            points.append((_number(pair[0], f"result[{i}].values[{j}][0]"),
                           _number(pair[1], f"result[{i}].values[{j}][1]")))
        found.append(Series(metric, tuple(points)))
    return found


def legend(template: str, labels: Mapping[str, str]) -> str:
    """A series' name: the template's {label}s filled from its labels ("none" for one it lacks), cut short."""
    out, rest = [], template
    while "{" in rest and "}" in rest.split("{", 1)[1]:
        before, _, after = rest.partition("{")
        name, _, rest = after.partition("}")
        out.append(before + (labels.get(name) or "none"))
    text = "".join(out) + rest
    return text if len(text) <= MOST_LABEL else text[:MOST_LABEL - 1] + "…"


def _get(base: str, auth: str, params: Mapping[str, Any]) -> object:
    url = f"{base}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url, headers={"Authorization": auth, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read(MOST_BYTES + 1)
    except urllib.error.HTTPError as err:
        body = err.read(MOST_BYTES + 1)
        if err.code in (401, 403):
            raise ChartError(f"Prometheus at {base} refused the reader (HTTP {err.code}): check "
                             "prometheus_reader_file") from None
        if not body.startswith(b"{"):
            raise ChartError(f"Prometheus at {base} answered HTTP {err.code}") from None
    except (urllib.error.URLError, OSError) as err:
        raise ChartError(f"Prometheus at {base} does not answer: {getattr(err, 'reason', err)}") from None
    if len(body) > MOST_BYTES:
        raise ChartError(f"Prometheus' answer is over {MOST_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise ChartError("Prometheus' answer is not JSON") from None


def read_charts(cfg: PortalConfig, window: tuple[str, int, int], now: float | None = None,
                charts: Sequence[Chart] = CHARTS) -> dict[str, Any]:
    """Every chart's SVG (or the error in its place) for the window ending now: blocking, one query at a time."""
    base = prometheus_access.url(cfg)
    if not base:
        return {"source": "", "error": "prometheus_url is empty: this portal has no Prometheus to draw from "
                                       "(docs/operations.md)", "charts": []}
    try:
        user, password = prometheus_access.reader(cfg)
    except ConfigError as err:
        return {"source": base, "error": str(err), "charts": []}
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    _, span, step = window
    # Up to now, the second under way included (a scrape of this second is drawn: a server scraping for a minute
    # draws already, and a target read a moment ago is in the chart as it is in an instant query).
    end = math.ceil(time.time() if now is None else now)
    start = end - span
    x_title = f"minutes since {time.strftime('%H:%M', time.gmtime(start))} UTC"
    drawn = []
    for chart in charts:
        try:
            lines = []
            for template, query in chart.queries:
                answer = _get(base, auth, {"query": query, "start": start, "end": end, "step": step})
                for series in parse_matrix(answer, query):
                    lines.append((legend(template, series.labels),
                                  [(max(0, round((t - start) / 60)), v) for t, v in series.points]))
            svg: Markup | None = curves(lines, title=chart.title, y_label=chart.y_label, unit=chart.unit,
                                        x_title=x_title, x_span=(0, span // 60))
            drawn.append({"title": chart.title, "svg": svg, "error": ""})
        except ChartError as err:
            drawn.append({"title": chart.title, "svg": None, "error": str(err)})
    return {"source": base, "error": "", "charts": drawn}
