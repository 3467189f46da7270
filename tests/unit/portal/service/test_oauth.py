"""The dashboard's HubOAuth gives every login a state cookie of its own: two logins begun at once in one browser (a
page of the portal, and the lab's idle-GPU notice in the background) no longer share the plain name, where the first
to come back was refused ("oauth state does not match")."""

from __future__ import annotations

import json

from tornado.testing import AsyncHTTPTestCase
from tornado.web import Application, RequestHandler

from portal.service.oauth import PortalOAuth


class TwoLogins(RequestHandler):
    def get(self) -> None:
        auth = PortalOAuth(api_url="http://127.0.0.1:9/hub/api", api_token="t", oauth_client_id="service-portal",
                           oauth_redirect_uri="/services/portal/oauth_callback", cache_max_age=0)
        states = [auth.set_state_cookie(self, next_url=f"/services/portal/{page}") for page in ("jobs", "gpus")]
        self.finish(json.dumps([auth.get_state_cookie_name(state) for state in states]))


class OAuthStateTest(AsyncHTTPTestCase):
    def get_app(self) -> Application:
        return Application([("/", TwoLogins)], cookie_secret="s" * 32)

    def test_two_logins_at_once_take_two_state_cookies_each_named_in_its_state(self):
        response = self.fetch("/")
        names = json.loads(response.body)
        assert len(set(names)) == 2 and all(n.startswith("service-portal-oauth-state-") for n in names), names
        cookies = response.headers.get_list("Set-Cookie")
        assert sorted(c.split("=", 1)[0] for c in cookies) == sorted(names)
