"""The dashboard's hub directory against a small hub API of its own (tornado): every user asked for at once, once
per interval for all requests together; a roster past its interval served while a fresh one is fetched; a user
made since asked for by name; a hub that does not answer is HubUnavailable, never a hang."""

from __future__ import annotations

import asyncio
import json

import pytest
from tornado.testing import AsyncHTTPTestCase, gen_test
from tornado.web import Application, HTTPError, RequestHandler

from portal.service import hub as hub_module
from portal.service.hub import HubDirectory, HubUnavailable

USERS = [{"name": f"user{i:03d}", "groups": ["datascientists"], "admin": i == 0, "servers": {}} for i in range(250)]


class FakeHub:
    def __init__(self) -> None:
        self.users = list(USERS)
        self.asked: list[str] = []
        self.down = False


def fake_hub_app(hub: FakeHub) -> Application:
    class Users(RequestHandler):
        def get(self) -> None:
            hub.asked.append("users")
            if hub.down:
                raise HTTPError(503)
            offset, limit = int(self.get_argument("offset")), int(self.get_argument("limit"))
            self.finish(json.dumps(hub.users[offset:offset + limit]))

    class User(RequestHandler):
        def get(self, name: str) -> None:
            hub.asked.append(f"users/{name}")
            found = [u for u in hub.users if u["name"] == name]
            if hub.down or not found:
                raise HTTPError(503 if hub.down else 404)
            self.finish(json.dumps(found[0]))

    class Server(RequestHandler):
        def delete(self, name: str) -> None:
            hub.asked.append(f"DELETE users/{name}/server {self.request.headers.get('Authorization')}")
            if hub.down or not any(u["name"] == name for u in hub.users):
                raise HTTPError(503 if hub.down else 404)
            self.set_status(202)  # the hub's "stop pending"

    return Application([("/hub/api/users", Users), ("/hub/api/users/([^/]+)", User),
                        ("/hub/api/users/([^/]+)/server", Server)])


class HubDirectoryTest(AsyncHTTPTestCase):
    def get_app(self) -> Application:
        self.hub = FakeHub()
        return fake_hub_app(self.hub)

    def directory(self, now: list[float]) -> HubDirectory:
        return HubDirectory(api_url=self.get_url("/hub/api"), token="t", ttl_s=2, clock=lambda: now[0])

    @gen_test
    async def test_many_users_at_once_cost_one_paged_roster(self):
        directory = self.directory([0.0])
        found = await asyncio.gather(*(directory.user(u["name"]) for u in USERS))
        assert [u.name for u in found] == [u["name"] for u in USERS]
        assert found[0].admin and not found[1].admin and found[1].groups == ("datascientists",)
        assert self.hub.asked == ["users", "users"]  # 250 users: two pages of 200, for every request together
        assert len(await directory.everyone()) == 250 and self.hub.asked == ["users", "users"]

    @gen_test
    async def test_a_stale_roster_answers_at_once_and_is_refreshed_in_the_background(self):
        now = [0.0]
        directory = self.directory(now)
        await directory.user("user001")
        self.hub.users[1] = {**USERS[1], "admin": True}
        now[0] = hub_module.ROSTER_S + 1  # past its age, within the grace
        assert not (await directory.user("user001")).admin  # the old answer, without waiting
        await asyncio.sleep(0.2)  # the background fetch
        assert (await directory.user("user001")).admin
        assert self.hub.asked.count("users") == 4

    @gen_test
    async def test_a_user_made_since_the_roster_is_asked_for_by_name(self):
        directory = self.directory([0.0])
        await directory.user("user001")
        self.hub.users.append({"name": "newcomer", "groups": [], "admin": False, "servers": {}})
        assert (await directory.user("newcomer")).name == "newcomer"
        await directory.user("newcomer")
        assert self.hub.asked == ["users", "users", "users/newcomer"]  # the by-name answer is kept too

    @gen_test
    async def test_a_fresh_ask_is_by_name_and_at_most_a_refresh_interval_old(self):
        now = [0.0]
        directory = self.directory(now)
        await directory.user("user001")
        self.hub.users[1] = {**USERS[1], "servers": {"": {"ready": True}}}
        assert not (await directory.user("user001")).server_ready  # the roster's answer
        assert (await directory.user("user001", fresh=True)).server_ready
        now[0] = 1.0
        await directory.user("user001", fresh=True)
        now[0] = 2.5
        await directory.user("user001", fresh=True)
        assert self.hub.asked == ["users", "users", "users/user001", "users/user001"]

    @gen_test
    async def test_a_hub_that_stays_down_past_the_grace_is_an_error(self):
        now = [0.0]
        directory = self.directory(now)
        await directory.user("user001")
        self.hub.down = True
        now[0] = hub_module.ROSTER_S + hub_module.STALE_GRACE_S + 1
        with pytest.raises(HubUnavailable, match="503"):
            await directory.user("user001")


class EveryoneTest(AsyncHTTPTestCase):
    """An admin's list of every user is at most a refresh interval old: a user made after the roster was fetched
    (who has not viewed a page yet, so nothing asked for them by name) is listed once the interval has passed."""

    def get_app(self) -> Application:
        self.hub = FakeHub()
        return fake_hub_app(self.hub)

    @gen_test
    async def test_a_new_user_is_in_everyone_after_one_interval_not_one_roster_age(self):
        now = [0.0]
        directory = HubDirectory(api_url=self.get_url("/hub/api"), token="t", ttl_s=2, clock=lambda: now[0])
        assert len(await directory.everyone()) == len(USERS)
        self.hub.users.append({"name": "newcomer", "groups": [], "admin": False, "servers": {}})
        now[0] = 1.0
        assert "newcomer" not in {u.name for u in await directory.everyone()}  # within the interval: kept
        now[0] = 2.5
        assert "newcomer" in {u.name for u in await directory.everyone()}
        assert (await directory.user("user001")).name == "user001"  # the viewers' path takes the same roster
        assert self.hub.asked.count("users") == 2 * 2  # two rosters of two pages each (250 users, 200 a page)


class StopServerTest(AsyncHTTPTestCase):
    def get_app(self) -> Application:
        self.hub = FakeHub()
        return fake_hub_app(self.hub)

    @gen_test
    async def test_a_stop_is_the_hubs_delete_of_the_users_server_with_the_services_token(self):
        directory = HubDirectory(api_url=self.get_url("/hub/api"), token="t")
        await directory.stop_server("user001")
        assert self.hub.asked == ["DELETE users/user001/server token t"]
        with pytest.raises(HubUnavailable, match="DELETE users/nobody/server with 404"):
            await directory.stop_server("nobody")
