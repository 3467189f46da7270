"""The lab's way to its GPU figures (portal.lab_gpus): the server asks the dashboard with its own token, at the
address the spawner gave it, and passes the answer on as it came; a dashboard that is not there or answers no JSON
object is a 502 saying so. (The real lab through a real server and dashboard: tests/browser/test_login_to_lab.py.)"""

from __future__ import annotations

import json
import os
import socket
from unittest import mock

from tornado.testing import AsyncHTTPTestCase, gen_test
from tornado.web import Application, RequestHandler

from portal import lab_gpus
from portal.config import SERVER_DASHBOARD_ENV


class Recorded(RequestHandler):
    """What the dashboard's api/gpus and api/gpus/keep were asked, answered as `answer` says."""

    def get(self) -> None:
        self.settings["asked"].append(("GET", self.request.path, self.request.headers.get("Authorization"), b""))
        self.write(self.settings["answer"])

    def post(self) -> None:
        self.settings["asked"].append(("POST", self.request.path, self.request.headers.get("Authorization"),
                                       self.request.body))
        self.set_status(404)
        self.write({"error": "12 is not a server or job of yours with an idle warning now", "field": "holder"})


class AskTest(AsyncHTTPTestCase):
    def get_app(self):
        self.asked: list = []
        return Application([(r"/services/portal/api/gpus(?:/keep)?", Recorded)], asked=self.asked,
                           answer={"warnings": [], "server_gpus": [{"node": "n1", "index": 0, "busy": 12.0}]})

    def setUp(self):
        super().setUp()
        self.environ = {SERVER_DASHBOARD_ENV: f"http://127.0.0.1:{self.get_http_port()}/services/portal/",
                        lab_gpus.TOKEN_ENV: "the-servers-token"}

    async def ask(self, *args, env=None):
        with mock.patch.dict(os.environ, self.environ if env is None else env):
            return await lab_gpus.ask(*args)

    @gen_test
    async def test_it_asks_with_the_servers_token_and_passes_the_answer_on_as_it_came(self):
        status, data = await self.ask("GET", "api/gpus")
        assert (status, data["server_gpus"][0]["busy"]) == (200, 12.0)
        status, data = await self.ask("POST", "api/gpus/keep", {"holder": "12"})
        assert status == 404 and data["field"] == "holder"  # the dashboard's own refusal, whole
        assert self.asked == [("GET", "/services/portal/api/gpus", "token the-servers-token", b""),
                              ("POST", "/services/portal/api/gpus/keep", "token the-servers-token",
                               json.dumps({"holder": "12"}).encode())]

    @gen_test
    async def test_no_way_to_the_dashboard_or_no_json_object_is_said(self):
        status, data = await self.ask("GET", "api/gpus", env={SERVER_DASHBOARD_ENV: "", lab_gpus.TOKEN_ENV: "t"})
        assert status == 503 and f"{SERVER_DASHBOARD_ENV} is not set" in data["error"]
        self._app.settings["answer"] = "<html>a proxy's error page</html>"
        status, data = await self.ask("GET", "api/gpus")
        assert status == 502 and "answered 200 without a JSON object" in data["error"]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        status, data = await self.ask("GET", "api/gpus", env={SERVER_DASHBOARD_ENV: f"http://127.0.0.1:{port}/",
                                                              lab_gpus.TOKEN_ENV: "t"})
        assert status == 502 and "did not answer" in data["error"]
