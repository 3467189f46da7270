"""Logging in through the hub's real login form, against the real slapd."""

import asyncio
import subprocess
from dataclasses import replace

import pytest
from tornado import web

from portal.auth import DIRECTORY_UNAVAILABLE, PortalLDAPAuthenticator
from tests.conftest import box

REFUSED = "Invalid username or password"


def test_alice_logs_in_and_is_sent_to_spawn(hub):
    session, response = hub.post_login("alice", "wonderland")
    assert response.status_code == 302
    assert response.headers["Location"].endswith("/hub/spawn")
    assert "jupyterhub-session-id" in session.cookies or any("jupyterhub" in c for c in session.cookies.keys())


def test_groups_come_from_the_directory(hub, admin):
    hub.login("alice")
    hub.login("admin")
    alice = hub.api(admin, "GET", "users/alice").json()
    assert sorted(alice["groups"]) == ["datascientists", "gpu-users"]
    assert alice["admin"] is False
    assert hub.api(admin, "GET", "users/admin").json()["admin"] is True


@pytest.mark.parametrize(("username", "password"), [
    ("alice", "not-her-password"),
    ("alice", ""),
    ("alice", "   "),
    ("nobody", "whatever"),
    ("mallory", "mallory"),  # a valid directory account, but in no allowed group
    ("*)(uid=*", "wonderland"),
    ("alice,ou=x", "wonderland"),
    ("alice)(|(uid=*", "x"),
    ("*", "*"),
])
def test_bad_logins_get_the_forms_error(hub, username, password):
    _, response = hub.post_login(username, password)
    assert response.status_code == 403
    assert REFUSED in response.text
    assert 'name="_xsrf"' in response.text  # the login form again, not an error page


def test_usernames_are_normalised(hub):
    _, response = hub.post_login("  ALICE ", "wonderland")
    assert response.status_code == 302


def test_directory_down_says_so_and_the_hub_stays_up(hub, cluster):
    box("stop", "slapd")
    try:
        session, response = hub.post_login("alice", "wonderland")
        assert response.status_code == 503
        assert "directory service (LDAP) is unavailable" in response.text
        assert 'name="password"' in response.text  # shown on the login page itself
        assert session.get(f"{hub.url}/hub/api/", timeout=10).status_code == 200
        assert session.get(f"{hub.url}/hub/login", timeout=10).status_code == 200
    finally:
        box("start", "slapd")
    _, response = hub.post_login("alice", "wonderland")
    assert response.status_code == 302


def authenticate(portal, username, password):
    authenticator = PortalLDAPAuthenticator(portal=portal)
    return asyncio.run(authenticator.authenticate(None, {"username": username, "password": password}))


def test_ldaps_and_starttls_verify_the_directory(cluster):
    for mode in ("starttls", "ldaps"):
        result = authenticate(replace(cluster, ldap_tls=mode), "alice", "wonderland")
        assert result["name"] == "alice" and result["groups"] == ["datascientists", "gpu-users"]


def test_a_certificate_from_another_ca_is_refused(cluster, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=Other CA",
                    "-keyout", str(tmp_path / "other-ca.key"), "-out", str(other_ca)],
                   check=True, capture_output=True)
    for mode in ("starttls", "ldaps"):
        untrusting = replace(cluster, ldap_tls=mode, ldap_ca_file=str(other_ca))
        with pytest.raises(web.HTTPError) as err:
            authenticate(untrusting, "alice", "wonderland")
        assert err.value.status_code == 503 and err.value.log_message == DIRECTORY_UNAVAILABLE


def test_allow_all_and_unverified_tls_are_refused(cluster):
    from traitlets import TraitError
    with pytest.raises(TraitError, match="allowed_groups"):
        PortalLDAPAuthenticator(portal=cluster, allow_all=True)
    with pytest.raises(TraitError, match="verify"):
        PortalLDAPAuthenticator(portal=cluster, tls_kwargs={})
