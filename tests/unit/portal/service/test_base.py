"""The dashboard's security headers and cookies on every kind of response, and what a refused XSRF check says.

The hub's OAuth is real (HubOAuth reading its signed cookie and checking _xsrf); only the hub's answer to "whose
token is this" is replaced, so no hub has to run. tests/integration/test_hub_faults.py checks the same through
the real hub and proxy.
"""

from __future__ import annotations

import faulthandler
import json
import re
from http.cookies import SimpleCookie

from markupsafe import escape as xhtml_escape  # what the pages (Jinja2) escape with
from tornado.testing import AsyncHTTPTestCase
from tornado.web import create_signed_value

from portal.config import PortalConfig
from portal.scheduler.slurm.scheduler import JobDirError, SlurmError
from portal.service.app import make_app
from portal.service.base import (
    LOGIN_REFUSED,
    SECURITY_HEADERS,
    XSRF_REFUSED_API,
    XSRF_REFUSED_PAGE,
    OAuthCallbackHandler,
    PortalHandler,
    as_portal_error,
)
from portal.service.board import JobBoard
from tests.unit.helpers import ALICES_TOKEN, HUB_COOKIE, FakeDirectory, FakeJobsAPI, hub_oauth, slurm_cache, squeue_free

PREFIX = "/services/portal/"
COOKIE = HUB_COOKIE


class HeadersTest(AsyncHTTPTestCase):
    def get_app(self):
        cfg = PortalConfig()
        import tempfile
        from pathlib import Path
        self.api = FakeJobsAPI(Path(tempfile.mkdtemp()))
        self.api.add("alice", "7", "RUNNING")
        cluster = slurm_cache(cfg, squeue_free)
        return make_app(cfg, prefix=PREFIX, hub_base_url="/", cluster=cluster,
                        board=JobBoard(cfg, cluster, api=self.api), directory=FakeDirectory())

    def setUp(self):
        self.auth = hub_oauth()
        for cls in (PortalHandler, OAuthCallbackHandler):
            cls._hub_auth = self.auth
        super().setUp()

    def tearDown(self):
        for cls in (PortalHandler, OAuthCallbackHandler):
            del cls._hub_auth
        super().tearDown()

    def login_cookie(self) -> str:
        value = create_signed_value(self._app.settings["cookie_secret"], COOKIE, ALICES_TOKEN).decode()
        return f"{COOKIE}={value}"

    def call(self, method: str, path: str, *, logged_in: bool = True, body: str | None = None, **headers: str):
        if logged_in:
            headers["Cookie"] = "; ".join(filter(None, [headers.get("Cookie"), self.login_cookie()]))
        # A browser's own navigation: HubOAuth skips the XSRF check of a GET only for these.
        headers.setdefault("Sec-Fetch-Mode", "navigate")
        return self.fetch(f"{PREFIX}{path}", method=method, headers=headers, body=body, follow_redirects=False,
                          allow_nonstandard_methods=True)

    def assert_secured(self, response, *, api: bool = False) -> None:
        policy = response.headers.get("Content-Security-Policy", "")
        assert "frame-ancestors 'none'" in policy and "report-uri /hub/security/csp-report" in policy, policy
        assert ("default-src 'none'" in policy) == api, policy
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (name, response.code, dict(response.headers))

    def cookies(self, response) -> dict[str, dict]:
        jar = SimpleCookie()
        for line in response.headers.get_list("Set-Cookie"):
            jar.load(line)
        return {name: {k: v for k, v in morsel.items() if v} for name, morsel in jar.items()}

    def test_pages_json_redirects_and_the_plain_text_log_carry_the_headers(self):
        for path, code, api in (("jobs", 200, False), ("jobs/7", 200, False), ("api/jobs", 200, True),
                                ("api/jobs/7", 200, True), ("", 302, False)):
            response = self.call("GET", path)
            assert response.code == code, (path, response.code, response.body[-500:])
            self.assert_secured(response, api=api)
        log = self.call("GET", "jobs/7/log?tail=5")
        assert log.code == 200 and log.headers["Content-Type"].startswith("text/plain")
        self.assert_secured(log)

    def test_a_hub_that_does_not_answer_is_a_503_saying_so_on_a_page_and_in_the_api(self):
        from unittest import mock

        from portal.service.hub import HubUnavailable

        async def silent(directory, name, fresh=False):
            raise HubUnavailable("GET /hub/api/users/alice: connection refused")

        with mock.patch.object(FakeDirectory, "user", silent):
            for path, api in (("jobs", False), ("api/jobs", True)):
                response = self.call("GET", path)
                assert response.code == 503 and b"JupyterHub is unavailable: GET /hub/api/users/alice" in \
                    response.body, (path, response.code, response.body[-300:])
                self.assert_secured(response, api=api)

    def test_errors_carry_the_headers(self):
        for method, path, code, api in (("GET", "jobs/8", 404, False), ("GET", "api/jobs/8", 404, True),
                                        ("GET", "jobs/7/log?tail=x", 400, False), ("GET", "no/such/page", 404, False),
                                        ("GET", "jobs/7/cancel", 405, False)):
            response = self.call(method, path)
            assert response.code == code, (path, response.code)
            self.assert_secured(response, api=api)
            assert b"Traceback" not in response.body
        anonymous = self.call("GET", "api/jobs", logged_in=False)
        assert anonymous.code == 403
        self.assert_secured(anonymous, api=True)
        callback = self.call("GET", "oauth_callback", logged_in=False)  # no code, no state: the hub's 400
        assert callback.code == 400
        self.assert_secured(callback)

    def nonce_of(self, response) -> str:
        """The nonce the response's policy allows, after checking that every inline <script>/<style> of its body
        carries it (the hub's page.html has one of each)."""
        policy = response.headers["Content-Security-Policy"]
        nonce = re.search(r"script-src 'self' 'nonce-([A-Za-z0-9_-]+)'", policy).group(1)
        assert f"style-src 'self' 'nonce-{nonce}'" in policy and "default-src 'self'" in policy, policy
        inline = re.findall(rb"<(?:script|style)\b(?![^>]*\bsrc=)[^>]*>", response.body)
        assert len(inline) >= 2 and all(f'nonce="{nonce}"'.encode() in tag for tag in inline), (nonce, inline)
        return nonce

    def test_every_page_and_error_page_runs_its_inline_code_with_a_nonce_of_its_own(self):
        nonces = [self.nonce_of(self.call("GET", path))
                  for path in ("jobs", "jobs", "jobs/7", "submit", "usage", "cluster", "templates")]
        assert len(set(nonces)) == len(nonces), nonces  # fresh for each response
        # Errors: tornado clears the headers and sets them again (a new nonce); the page shows that one.
        for path, code in (("jobs/8", 404), ("no/such/page", 404), ("jobs/7/log?tail=x", 400)):
            response = self.call("GET", path)
            assert response.code == code and self.nonce_of(response), (path, response.code)

    def test_hsts_only_on_an_answer_the_browser_got_over_https(self):
        for path in ("jobs", "api/jobs", "no/such/page", "jobs/8"):
            plain = self.call("GET", path)
            assert "Strict-Transport-Security" not in plain.headers, (path, dict(plain.headers))
            secure = self.call("GET", path, **{"X-Forwarded-Proto": "https"})
            assert secure.headers.get("Strict-Transport-Security") == "max-age=31536000", (path, secure.code)

    def test_cookies_are_samesite_httponly_and_secure_behind_https(self):
        login = self.call("GET", "jobs", logged_in=False)  # to the hub's login, with the OAuth state cookie
        assert login.code == 302 and "/hub/api/oauth2/authorize" in login.headers["Location"]
        self.assert_secured(login)
        (state,) = self.cookies(login).values()
        assert state["samesite"] == "Lax" and state["httponly"] and not state.get("secure"), state
        behind_https = self.call("GET", "jobs", logged_in=False, **{"X-Forwarded-Proto": "https"})
        (state,) = self.cookies(behind_https).values()
        assert state["samesite"] == "Lax" and state["secure"], state

        page = self.call("GET", "submit")  # the form sets the _xsrf cookie its token belongs to
        xsrf = self.cookies(page)["_xsrf"]
        assert xsrf["samesite"] == "Lax" and xsrf["httponly"] and xsrf["path"] == PREFIX, xsrf

    def test_a_cookie_post_without_its_xsrf_token_is_told_so(self):
        # A forged token once deadlocked the service (base.PortalHandler.get_current_user): fail, do not hang.
        faulthandler.dump_traceback_later(60, exit=True)
        self.addCleanup(faulthandler.cancel_dump_traceback_later)
        for token in (None, "forged"):
            body = "template=chexnet" + (f"&_xsrf={token}" if token else "")
            page = self.call("POST", "submit", body=body)
            assert page.code == 403, page.body[-500:]
            error = re.search(r'<div [^>]*id="error"[^>]*>(.*?)</div>', page.body.decode(), re.S)
            assert error and error.group(1) == xhtml_escape(XSRF_REFUSED_PAGE), page.body[-800:]
            self.assert_secured(page)
            api = self.call("POST", "api/jobs", body=json.dumps({"epochs": 1}),
                            **({"X-XSRFToken": token} if token else {}))
            assert api.code == 403 and json.loads(api.body) == {"error": XSRF_REFUSED_API, "field": "_xsrf"}
        assert self.call("DELETE", "api/jobs/7").code == 403
        assert len(self.api.owned["alice"]) == 1 and self.api.fake_scheduler.cancelled == []  # nothing happened

    def test_an_anonymous_post_is_still_asked_to_log_in(self):
        page = self.call("POST", "submit", logged_in=False, body="template=chexnet")
        assert page.code == 403 and xhtml_escape(LOGIN_REFUSED) in page.body.decode()
        api = self.call("POST", "api/jobs", logged_in=False, body="{}")
        assert api.code == 403 and json.loads(api.body)["error"] == LOGIN_REFUSED

    def test_a_cookie_post_with_the_pages_token_goes_through(self):
        page = self.call("GET", "submit")
        token = re.search(r'name="_xsrf" value="([^"]+)"', page.body.decode()).group(1)
        cookie = f"_xsrf={page_cookie(page, '_xsrf')}"
        done = self.call("POST", "submit", body=f"template=chexnet&_xsrf={token}", Cookie=cookie)
        assert done.code == 302, done.body[-800:]
        self.assert_secured(done)
        assert len(self.api.owned["alice"]) == 2


def page_cookie(response, name: str) -> str:
    jar = SimpleCookie()
    for line in response.headers.get_list("Set-Cookie"):
        jar.load(line)
    return jar[name].value


def test_a_full_job_directory_is_507_not_slurm_unavailable():
    error = as_portal_error(JobDirError("job 5 was cancelled: preparing /home/a/jobs/5 failed: No space left"))
    assert error.status_code == 507 and "Slurm is unavailable" not in error.message
    assert as_portal_error(SlurmError("Unable to contact slurm controller")).status_code == 503
