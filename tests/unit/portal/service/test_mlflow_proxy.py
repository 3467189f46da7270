"""The dashboard's way to the portal's MLflow server (portal.service.mlflow_proxy), against a real `mlflow server`
with the portal's basic-auth settings (tests/mlflow_server.py): each user reaches MLflow as their own account and
sees only what is theirs; what identified them to the dashboard never reaches MLflow; MLflow's UI, its files and a
few MB of artifact come through; a server that does not answer, a user who is not logged in and a request from
another site are answered in words.

Who is asking comes from the X-Test-User header (TestHeaderUser), or from the hub's own OAuth (HubOAuth reading its
signed cookie and checking _xsrf; only the hub's answer to "whose token is this" replaced) where cookies, tokens and
the cross-site rule are the point. What the dashboard sends on is read by an echo server standing in for MLflow.
The session's one MLflow server is shared with other modules' tests: the users here have names of their own.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import time
from pathlib import Path

import pytest
from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPHeaders
from tornado.testing import AsyncHTTPTestCase, bind_unused_port
from tornado.web import Application, RequestHandler, create_signed_value

from portal.config import PortalConfig
from portal.mlflow_accounts import Account, Accounts, user_password
from portal.service.app import make_app
from portal.service.base import PortalHandler
from portal.service.board import JobBoard
from portal.service.headers import mlflow_policy
from portal.service.mlflow_proxy import (
    NO_MLFLOW,
    forwarded_query,
    from_this_site,
    returned_headers,
    upstream_headers,
)
from tests.mlflow_server import free_port
from tests.unit.helpers import (
    HUB_COOKIE,
    FakeDirectory,
    FakeJobsAPI,
    TestHeaderUser,
    hub_oauth,
    slurm_cache,
    squeue_free,
)

ALICE, BOB = "proxy-alice", "proxy-bob"
PREFIX = "/services/portal/"
API = "mlflow/api/2.0/mlflow"
SITE = "http://127.0.0.1"  # the test server's scheme and host; its port is the test's
ARTIFACT_BYTES = 3 * 1024 * 1024 + 17  # "a few MB": under the dashboard's 4 MiB, over portal.inputs' 64 KiB


def portal_config(server_url: str, admin_file: Path, state_dir: Path) -> PortalConfig:
    return PortalConfig(mlflow_url=server_url, mlflow_admin_file=str(admin_file), state_dir=state_dir)


@pytest.fixture(scope="module")
def mlflow_setup(mlflow_server, tmp_path_factory):
    """The server, and the portal's settings for it: the admin's file, one state dir for the module (the portal's
    record of each user's experiment)."""
    base = tmp_path_factory.mktemp("proxy")
    admin = base / "mlflow-admin"
    admin.write_text(":".join(mlflow_server.admin) + "\n")
    admin.chmod(0o600)
    return mlflow_server, portal_config(mlflow_server.url, admin, base / "state")


def dashboard(cfg: PortalConfig, tmp: Path, accounts=None) -> Application:
    cluster = slurm_cache(cfg, squeue_free)
    return make_app(cfg, prefix=PREFIX, hub_base_url="/", cluster=cluster,
                    board=JobBoard(cfg, cluster, api=FakeJobsAPI(tmp)), directory=FakeDirectory(),
                    notebooks_dir=tmp, accounts=accounts)


class ProxyTest(TestHeaderUser, AsyncHTTPTestCase):
    """Requests name their user in X-Test-User; one Accounts for the module (as one per dashboard process)."""

    accounts: Accounts | None = None

    @pytest.fixture(autouse=True)
    def _mlflow(self, mlflow_setup, monkeypatch):
        self.server, self.cfg = mlflow_setup
        if ProxyTest.accounts is None or ProxyTest.accounts.cfg is not self.cfg:
            ProxyTest.accounts = Accounts(self.cfg)
        monkeypatch.setenv("ASYNC_TEST_TIMEOUT", "30")  # a user's first request makes their account

    def get_app(self):
        return dashboard(self.cfg, Path(self.tmp_dir), self.accounts)

    def call(self, path, user=ALICE, method="GET", body=None, headers=None):
        if isinstance(body, dict):
            body, headers = json.dumps(body), {"Content-Type": "application/json", **(headers or {})}
        return self.fetch(f"{PREFIX}{path}", method=method, body=body, follow_redirects=False,
                          headers={**({"X-Test-User": user} if user else {}), **(headers or {})},
                          allow_nonstandard_methods=True)

    def answer(self, path, user=ALICE, method="GET", body=None, code=200, headers=None):
        response = self.call(path, user, method, body, headers)
        assert response.code == code, (path, response.code, response.body[:500])
        return json.loads(response.body)

    def experiment_of(self, user) -> str:
        return self.accounts.account(user).experiment_id

    def new_run(self, user=ALICE) -> str:
        made = self.answer(f"{API}/runs/create", user, "POST",
                           {"experiment_id": self.experiment_of(user), "start_time": int(time.time() * 1000)})
        return made["run"]["info"]["run_id"]

    def test_alice_reaches_mlflow_as_herself_and_sees_her_experiment_alone(self):
        assert self.answer(f"{API}/users/current")["user"]["username"] == ALICE
        found = self.answer(f"{API}/experiments/search?max_results=100")["experiments"]
        assert [e["name"] for e in found] == [f"portal/{ALICE}"]
        assert [e["experiment_id"] for e in found] == [self.experiment_of(ALICE)]
        # The UI's own path to the same API, with the same answer.
        assert self.answer("mlflow/ajax-api/2.0/mlflow/users/current")["user"]["username"] == ALICE

    def test_alices_run_is_hers_alone(self):
        run = self.new_run()
        assert self.answer(f"{API}/runs/get?run_id={run}")["run"]["info"]["run_id"] == run
        read = self.call(f"{API}/runs/get?run_id={run}", BOB)
        assert read.code in (403, 404), read.body
        listed = self.call(f"{API}/runs/search", BOB, "POST", {"experiment_ids": [self.experiment_of(ALICE)]})
        assert listed.code in (403, 404) or not json.loads(listed.body).get("runs"), listed.body
        logged = self.call(f"{API}/runs/log-metric", BOB, "POST",
                           {"run_id": run, "key": "loss", "value": 1.0, "timestamp": 0})
        assert logged.code in (403, 404), logged.body
        assert [e["name"] for e in self.answer(f"{API}/experiments/search?max_results=100", BOB)["experiments"]] \
            == [f"portal/{BOB}"]

    def test_a_clients_own_authorization_and_cookies_are_replaced(self):
        run = self.new_run()
        # Bob claims to be alice, with her real MLflow password: MLflow hears bob all the same.
        alices = base64.b64encode(f"{ALICE}:{user_password(self.server.admin[1], ALICE)}".encode()).decode()
        claimed = {"Authorization": f"Basic {alices}", "Cookie": "session=alices"}
        assert self.answer(f"{API}/users/current", BOB, headers=claimed)["user"]["username"] == BOB
        assert self.call(f"{API}/runs/get?run_id={run}", BOB, headers=claimed).code in (403, 404)

    def test_an_admin_of_the_hub_is_an_ordinary_mlflow_user(self):
        run = self.new_run()
        me = self.answer(f"{API}/users/current", "admin")["user"]
        assert me["username"] == "admin" and not me.get("is_admin"), me
        assert self.call(f"{API}/runs/get?run_id={run}", "admin").code in (403, 404)
        assert self.call(f"{API}/users/get?username={ALICE}", "admin").code == 403  # MLflow's admins' call

    def test_a_hub_user_of_the_mlflow_admins_name_is_refused_and_the_admin_kept(self):
        refused = self.call(f"{API}/users/current", user=self.server.admin[0])
        assert refused.code == 403 and "name of the MLflow server's admin" in json.loads(refused.body)["error"]
        assert Accounts(self.cfg).account(BOB).username == BOB  # the admin's password still works

    def test_a_few_mb_of_artifact_go_up_and_come_back_whole(self):
        run = self.new_run()
        blob = bytes(range(256)) * (ARTIFACT_BYTES // 256) + b"x" * (ARTIFACT_BYTES % 256)
        where = f"{self.experiment_of(ALICE)}/{run}/artifacts/weights.bin"
        put = self.call(f"mlflow/api/2.0/mlflow-artifacts/artifacts/{where}", method="PUT", body=blob,
                        headers={"Content-Type": "application/octet-stream"})
        assert put.code == 200, put.body
        got = self.call(f"mlflow/get-artifact?path=weights.bin&run_uuid={run}")
        assert got.code == 200 and got.body == blob, (got.code, len(got.body))
        assert got.headers["Content-Disposition"].startswith("attachment")  # MLflow's: never shown in the page
        assert self.call(f"mlflow/get-artifact?path=weights.bin&run_uuid={run}", BOB).code in (403, 404)

    def test_mlflows_ui_its_files_and_its_headers_come_through(self):
        moved = self.call("mlflow")
        assert moved.code == 302 and moved.headers["Location"] == f"{PREFIX}mlflow/"  # its links are relative
        index = self.call("mlflow/")
        assert index.code == 200 and index.headers["Content-Type"].startswith("text/html"), index.code
        script = re.search(rb'src="(static-files/[^"]+\.js)"', index.body)
        assert script, index.body[:500]
        assert index.headers["Content-Security-Policy"] == mlflow_policy("/")  # not the dashboard's nonce policy
        assert index.headers["X-Frame-Options"] == "SAMEORIGIN"  # MLflow's own
        assert "Set-Cookie" not in index.headers and "WWW-Authenticate" not in index.headers
        code = self.call(f"mlflow/{script.group(1).decode()}")
        assert code.code == 200 and "javascript" in code.headers["Content-Type"] and len(code.body) > 10_000
        icon = self.call("mlflow/static-files/favicon.ico")
        assert icon.code == 200 and icon.body
        head = self.call("mlflow/static-files/favicon.ico", method="HEAD")
        assert head.code == 200 and not head.body and head.headers["Content-Length"] == str(len(icon.body))

    def test_a_browser_goes_to_login_and_a_script_gets_403(self):
        login = self.call("mlflow/", user=None)
        assert login.code == 302 and login.headers["Location"].startswith("/hub/login")
        refused = self.call(f"{API}/experiments/search", user=None)
        assert refused.code == 403 and "log in to JupyterHub" in json.loads(refused.body)["error"]

    def test_a_cookie_write_from_another_site_is_refused_and_mlflows_own_ui_writes(self):
        PortalHandler.check_xsrf_cookie = self.real_xsrf_check  # the dashboard's own check, as it runs
        body = {"experiment_id": self.experiment_of(ALICE), "start_time": 0}
        site = f"{SITE}:{self.get_http_port()}"
        for headers in ({}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                        {"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Referer": "https://evil.example/services/portal/mlflow/"},
                        {"Sec-Fetch-Site": "cross-site", "Origin": site}):
            refused = self.call(f"{API}/runs/create", method="POST", body=body, headers=headers)
            assert refused.code == 403 and "_xsrf" in json.loads(refused.body)["error"], (headers, refused.body)
        for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Origin": site},
                        {"Referer": f"{site}/services/portal/mlflow/#/experiments"}):
            passed = self.call("mlflow/ajax-api/2.0/mlflow/runs/create", method="POST", body=body, headers=headers)
            assert passed.code == 200, (headers, passed.body)

    def test_each_write_and_each_failure_is_one_log_line(self):
        with self.assertLogs("portal.service", level="INFO") as logged:
            run = self.new_run()
            self.call(f"{API}/runs/get?run_id={run}")  # a read that succeeds: not logged
            self.call(f"{API}/runs/get?run_id={run}", BOB)
        lines = [r.getMessage() for r in logged.records if r.getMessage().startswith("MLflow:")]
        assert lines[0] == f"MLflow: POST {PREFIX}{API}/runs/create for {ALICE}: 200", lines
        assert len(lines) == 2 and re.fullmatch(rf"MLflow: GET {PREFIX}{API}/runs/get for {BOB}: 40[34]", lines[1])

    def test_a_dot_dot_path_is_refused(self):
        refused = self.call(f"{API}/../../../health")
        assert refused.code == 400 and ". or .. segment" in json.loads(refused.body)["error"]


class MlflowDownTest(TestHeaderUser, AsyncHTTPTestCase):
    """A server that does not answer: the account cannot be made, or MLflow is gone once it was."""

    @pytest.fixture(autouse=True)
    def _config(self, mlflow_setup):
        server, cfg = mlflow_setup
        self.closed = f"http://127.0.0.1:{free_port()}/services/portal/mlflow"  # nothing listens there
        self.cfg = portal_config(self.closed, Path(cfg.mlflow_admin_file), cfg.state_dir.parent / "down")

    def get_app(self):
        return dashboard(self.cfg, Path(self.tmp_dir))

    def test_no_account_can_be_made_a_503_naming_the_server_quickly(self):
        for path, api in ((f"{API}/experiments/search", True), ("mlflow/", False)):
            started = time.monotonic()
            response = self.fetch(f"{PREFIX}{path}", headers={"X-Test-User": ALICE})
            assert response.code == 503 and time.monotonic() - started < 5, (response.code, response.body[:300])
            said = json.loads(response.body)["error"] if api else response.body.decode()
            assert f"the MLflow server at {self.closed} did not answer" in said, said

    def test_a_server_gone_after_the_account_was_made_is_a_503_naming_it(self):
        class Known:
            enabled = True

            def account(self, user):
                return Account(closed, user, "pw", "1")

        closed = self.closed
        self._app.settings["mlflow_accounts"] = Known()
        response = self.fetch(f"{PREFIX}{API}/experiments/search", headers={"X-Test-User": ALICE})
        assert response.code == 503
        assert json.loads(response.body)["error"].startswith(f"the MLflow server at {closed} did not answer")


class NoMlflowTest(TestHeaderUser, AsyncHTTPTestCase):
    def get_app(self):
        return dashboard(PortalConfig(mlflow_url=""), Path(self.tmp_dir))

    def test_the_route_says_there_is_no_mlflow_server(self):
        api = self.fetch(f"{PREFIX}{API}/experiments/search", headers={"X-Test-User": ALICE})
        assert api.code == 404 and json.loads(api.body)["error"] == NO_MLFLOW
        page = self.fetch(f"{PREFIX}mlflow/", headers={"X-Test-User": ALICE})
        assert page.code == 404 and NO_MLFLOW in page.body.decode()


class Echo(RequestHandler):
    """Stands in for MLflow: records what reached it, answers with headers a proxy must not pass on."""

    SUPPORTED_METHODS = ("GET", "POST")
    seen: list[tuple[str, str, HTTPHeaders, bytes]] = []

    def get(self, *_):
        self.seen.append((self.request.method, self.request.uri, self.request.headers, self.request.body))
        self.set_header("Set-Cookie", "mlflow=1")
        self.set_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.set_header("Keep-Alive", "timeout=5")
        self.set_header("X-Kept", "yes")
        self.set_header("Location", f"http://{self.request.host}/services/portal/mlflow/moved")
        self.set_status(201)
        self.write(b"x" * 300_000)

    post = get


class HeadersOnTheWayTest(AsyncHTTPTestCase):
    """The real HubOAuth (cookie, token, XSRF) in front of an echo server: what MLflow would get and give back."""

    def setUp(self):
        self.auth = hub_oauth(PREFIX, {"alices-token": ALICE})
        PortalHandler._hub_auth = self.auth
        super().setUp()
        sock, self.echo_port = bind_unused_port()
        self.echo = HTTPServer(Application([(r"/services/portal/mlflow/(.*)", Echo)]))
        self.echo.add_sockets([sock])
        Echo.seen.clear()

    def tearDown(self):
        self.echo.stop()
        del PortalHandler._hub_auth
        super().tearDown()

    def get_app(self):
        echo = self

        class EchoAccounts:
            enabled = True

            def account(self, user):
                return Account(f"http://127.0.0.1:{echo.echo_port}/services/portal/mlflow", user, "pw-" + user, "1")

        return dashboard(PortalConfig(), Path(tempfile.mkdtemp()), EchoAccounts())

    def login_cookie(self) -> str:
        value = create_signed_value(self._app.settings["cookie_secret"], HUB_COOKIE, "alices-token").decode()
        return f"{HUB_COOKIE}={value}"

    def test_mlflow_gets_the_users_basic_auth_and_only_its_own_headers(self):
        response = self.fetch(
            f"{PREFIX}mlflow/ajax-api/2.0/mlflow/runs/create?token=alices-token&x=1", method="POST", body=b"{}",
            headers={"Authorization": "token alices-token", "Cookie": f"{self.login_cookie()}; other=1",
                     "Content-Type": "application/json", "Accept": "application/json", "X-XSRFToken": "t",
                     "Origin": "https://evil.example", "Referer": "https://evil.example/",
                     "X-MLflow-Client-Version": "3", "X-Forwarded-User": "root"}, follow_redirects=False)
        assert response.code == 201, response.body[:300]
        ((method, uri, headers, body),) = Echo.seen
        assert (method, uri, body) == ("POST", "/services/portal/mlflow/ajax-api/2.0/mlflow/runs/create?x=1", b"{}")
        assert headers["Authorization"] == "Basic " + base64.b64encode(f"{ALICE}:pw-{ALICE}".encode()).decode()
        for gone in ("Cookie", "X-XSRFToken", "Origin", "Referer", "X-Forwarded-User"):
            assert gone not in headers, (gone, dict(headers))
        assert (headers["Content-Type"], headers["Accept"], headers["X-MLflow-Client-Version"]) == \
            ("application/json", "application/json", "3")
        for gone in ("Set-Cookie", "WWW-Authenticate", "Keep-Alive"):
            assert gone not in response.headers, (gone, dict(response.headers))
        assert response.headers["X-Kept"] == "yes" and len(response.body) == 300_000
        assert response.headers["Location"] == "/services/portal/mlflow/moved"

    def test_a_cookie_read_by_mlflows_ui_passes_and_one_from_another_site_does_not(self):
        url = f"{PREFIX}mlflow/ajax-api/2.0/mlflow/experiments/search"
        script = {"Cookie": self.login_cookie(), "Sec-Fetch-Mode": "cors"}  # fetch(): HubOAuth asks for _xsrf
        assert self.fetch(url, headers={**script, "Sec-Fetch-Site": "same-origin"}).code == 201
        refused = self.fetch(url, headers={**script, "Sec-Fetch-Site": "cross-site"})
        assert refused.code == 403 and not Echo.seen[1:], refused.body
        posted = self.fetch(url, method="POST", body=b"{}", headers={**script, "Sec-Fetch-Site": "same-site"})
        assert posted.code == 403 and len(Echo.seen) == 1, posted.body
        token = self.fetch(url, method="POST", body=b"{}", headers={"Authorization": "Bearer alices-token"})
        assert token.code == 201 and len(Echo.seen) == 2  # a hub token is no cookie: no XSRF to check


def test_the_browser_says_whether_a_request_comes_from_a_page_of_this_site():
    site = "https://hub.example.org"
    for headers, same in (({"Sec-Fetch-Site": "same-origin"}, True), ({"Sec-Fetch-Site": "same-site"}, False),
                          ({"Sec-Fetch-Site": "none"}, False), ({"Origin": site}, True),
                          ({"Origin": "HTTPS://HUB.example.org"}, True), ({"Origin": "http://hub.example.org"}, False),
                          ({"Origin": "null"}, False), ({"Referer": f"{site}/services/portal/mlflow/"}, True),
                          ({"Referer": "https://hub.example.org.evil/x"}, False), ({}, False),
                          ({"Sec-Fetch-Site": "cross-site", "Origin": site}, False)):
        assert from_this_site(HTTPHeaders(headers), site) is same, headers


def test_the_hubs_token_argument_never_reaches_mlflow():
    assert forwarded_query("") == ""
    assert forwarded_query("run_id=1&path=a%2Fb") == "?run_id=1&path=a%2Fb"  # as written
    assert forwarded_query("token=secret") == ""
    assert forwarded_query("a=1&token=secret&b=") == "?a=1&b="


def test_headers_both_ways():
    sent = HTTPHeaders({"Authorization": "Basic x", "Cookie": "c=1", "Range": "bytes=0-9", "Origin": "o",
                        "X-MLflow-Workspace": "w", "Connection": "close", "X-XSRFToken": "t"})
    assert dict(upstream_headers(sent)) == {"Range": "bytes=0-9", "X-Mlflow-Workspace": "w"}
    answered = HTTPHeaders({"Connection": "close, X-Hop", "X-Hop": "1", "Transfer-Encoding": "chunked",
                            "Content-Type": "text/html", "Location": "http://up:5000/services/portal/mlflow/#/"})
    answered.add("Vary", "Accept")
    answered.add("Vary", "Origin")
    assert returned_headers(answered, "http://up:5000") == [
        ("Content-Type", "text/html"), ("Location", "/services/portal/mlflow/#/"), ("Vary", "Accept"),
        ("Vary", "Origin")]
