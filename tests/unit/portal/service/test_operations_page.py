"""The Operations page (portal.service.operations_charts): what Prometheus answers is checked against its API's
shape before a chart is drawn from it, wrong shapes named in the chart's place; the page is the hub admins' alone;
with no Prometheus, or one that does not answer, it says so. (The box's real Prometheus: tests/integration/
test_metrics.py and tests/kubernetes/test_hub_on_kubernetes.py.)"""

from __future__ import annotations

import socket

import pytest
from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.service import operations_charts
from portal.service.app import make_app
from portal.service.board import JobBoard
from portal.service.operations import ADMINS_ONLY
from portal.service.operations_charts import (
    CHARTS,
    MOST_SERIES,
    ChartError,
    legend,
    parse_matrix,
    read_charts,
    window_of,
)
from tests.unit.helpers import FakeDirectory, FakeJobsAPI, TestHeaderUser, slurm_cache, squeue_free

# Prometheus 2.42's answer to `up` over two minutes, as the box's server gave it (trimmed to two points a series).
RECORDED = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "up", "instance": "127.0.0.1:18000", "job": "hub"},
     "values": [[1796565600, "1"], [1796565660, "1"]]},
    {"metric": {"__name__": "up", "instance": "127.0.0.1:18000", "job": "portal"},
     "values": [[1796565600, "0"], [1796565660, "1"]]}]}}


def test_a_recorded_answer_gives_each_series_its_labels_and_points():
    hub, portal = parse_matrix(RECORDED, "up")
    assert (hub.labels["job"], hub.points) == ("hub", ((1796565600.0, 1.0), (1796565660.0, 1.0)))
    assert portal.points[0] == (1796565600.0, 0.0)
    assert legend("{job}", hub.labels) == "hub" and legend("refused {action}", {}) == "refused none"
    assert legend("{job}", {"job": "x" * 500}).endswith("…") and len(legend("{job}", {"job": "x" * 500})) == 80


@pytest.mark.parametrize(("answer", "words"), [
    ([], "not a JSON object"),
    ({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}, "bad_data: parse error"),
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, "data is not a matrix"),
    ({"status": "success", "data": {"resultType": "matrix", "result": {}}}, "data is not a matrix"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"job": 7}, "values": []}]}},
     r"result\[0\].metric is not labels"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": "1,2"}]}},
     r"result\[0\].values is not a list"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "2", 3]]}]}},
     r"result\[0\].values\[0\] is not \[time, value\]"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "many"]]}]}},
     r"result\[0\].values\[0\]\[1\] is not a number"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[True, "1"]]}]}},
     r"result\[0\].values\[0\]\[0\] is not a number"),
    ({"status": "success", "data": {"resultType": "matrix",
                                    "result": [{"metric": {}, "values": []}] * (MOST_SERIES + 1)}},
     f"{MOST_SERIES + 1} series; at most {MOST_SERIES}"),
])
def test_an_answer_of_the_wrong_shape_is_named_never_drawn(answer, words):
    with pytest.raises(ChartError, match=words):
        parse_matrix(answer, "up")


def test_no_prometheus_or_one_that_does_not_answer_is_said_in_the_page(tmp_path):
    assert "prometheus_url is empty" in read_charts(PortalConfig(prometheus_url=""), window_of(None))["error"]
    missing = read_charts(PortalConfig(state_dir=tmp_path), window_of("6h"))
    assert "prometheus_reader_file" in missing["error"] and "No such file" in missing["error"]
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    reader = tmp_path / "reader"
    reader.write_text("portal:pw\n")
    reader.chmod(0o600)
    gone = read_charts(PortalConfig(prometheus_url=f"http://127.0.0.1:{port}", prometheus_reader_file=str(reader)),
                       window_of("24h"))
    assert len(gone["charts"]) == len(CHARTS) and all(not c["svg"] for c in gone["charts"])
    assert f"Prometheus at http://127.0.0.1:{port} does not answer" in gone["charts"][0]["error"]


def test_the_charts_end_with_the_second_under_way_so_a_target_just_read_is_drawn(monkeypatch, tmp_path):
    """A range query ends at a whole second: one ending before a scrape of this second leaves it out, while an
    instant query (what the box's tests wait for) already has it."""
    asked: list[dict] = []
    monkeypatch.setattr(operations_charts, "_get", lambda base, auth, params: asked.append(params) or RECORDED)
    reader = tmp_path / "reader"
    reader.write_text("portal:pw\n")
    reader.chmod(0o600)
    cfg = PortalConfig(prometheus_url="http://127.0.0.1:9", prometheus_reader_file=str(reader))
    drawn = read_charts(cfg, window_of("1h"), now=1796565660.4)
    assert all(chart["svg"] for chart in drawn["charts"]), drawn
    assert {(params["start"], params["end"]) for params in asked} == {(1796565661 - 3600, 1796565661)}


class OperationsPageTest(TestHeaderUser, AsyncHTTPTestCase):
    def get_app(self):
        cfg = PortalConfig(prometheus_url="")
        cluster = slurm_cache(cfg, squeue_free)
        board = JobBoard(cfg, cluster, api=FakeJobsAPI(self.tmp_dir))
        return make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster, board=board,
                        directory=FakeDirectory())

    def page(self, user, query=""):
        return self.fetch(f"/services/portal/operations{query}", headers={"X-Test-User": user},
                          follow_redirects=False)

    def test_only_the_hubs_admins_see_it_and_a_bad_window_names_the_field(self):
        refused = self.page("alice")
        assert refused.code == 403 and ADMINS_ONLY.replace("'", "&#39;") in refused.body.decode()
        assert ">Operations</a>" not in self.fetch("/services/portal/cluster",
                                                   headers={"X-Test-User": "alice"}).body.decode()
        shown = self.page("admin").body.decode()
        assert 'id="operations-error"' in shown and "prometheus_url is empty" in shown
        assert 'aria-current="page" href="/services/portal/operations">Operations</a>' in shown
        bad = self.page("admin", "?window=1y")
        assert bad.code == 400 and "window: &#39;1y&#39; is not allowed; allowed: 1h, 6h, 24h" in bad.body.decode()
