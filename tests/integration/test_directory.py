"""The directory keeps its secrets (issue 49): the test box's real slapd refuses anonymous searches and passwords
without TLS, shows a user only their own entry, locks an account after directory_max_failures wrong passwords (the
hub then says so), never locks the portal's own identity, and the portal's reads, as that identity, still work. (A
directory made by an earlier box, and one directory for several boxes: test_directory_starts.py, with no box.)"""

from __future__ import annotations

import re
import stat
import subprocess
import sys

import ldap3
import pytest
from ldap3.core.exceptions import LDAPBindError

from portal.auth import ACCOUNT_LOCKED
from portal.directory import read_directory, search_password, search_password_file
from portal.ldap_login import Bind, user_bind
from tests.conftest import PASSWORDS, REPO
from tests.directory_users import ALICE_DN, bound, own_user, server


@pytest.mark.parametrize("mode", ["starttls", "ldaps"])
def test_an_anonymous_search_is_refused(cluster, mode):
    conn = bound(cluster, None, None, mode)
    try:
        assert not conn.search("dc=dsportal,dc=local", "(objectClass=*)", attributes=["*"])
        assert conn.result["description"] == "unwillingToPerform" and not conn.entries, conn.result
        assert not conn.search("ou=groups,dc=dsportal,dc=local", "(memberUid=*)", attributes=["memberUid"])
    finally:
        conn.unbind()


def test_a_user_reads_their_own_entry_and_nothing_else(cluster):
    conn = bound(cluster, ALICE_DN, PASSWORDS["alice"])
    try:
        assert conn.search(ALICE_DN, "(objectClass=*)", ldap3.BASE, attributes=["mail", "uidNumber"])
        assert conn.entries[0].mail.value == "alice@dsportal.local"
        for base in ("uid=bob,ou=people,dc=dsportal,dc=local", "cn=portal-admins,ou=groups,dc=dsportal,dc=local",
                     "ou=people,dc=dsportal,dc=local", "dc=dsportal,dc=local"):
            conn.search(base, "(objectClass=*)", ldap3.SUBTREE, attributes=["*"])
            assert [e.entry_dn for e in conn.entries] in ([], [ALICE_DN]), (base, conn.entries)
        conn.search(ALICE_DN, "(objectClass=*)", ldap3.BASE, attributes=["userPassword"])
        assert not conn.entries[0].entry_attributes_as_dict.get("userPassword")  # not even her own hash
    finally:
        conn.unbind()


def test_a_password_without_tls_is_refused(cluster):
    conn = ldap3.Connection(ldap3.Server("127.0.0.1", port=cluster.ldap_port, get_info=ldap3.NONE),
                            user=ALICE_DN, password=PASSWORDS["alice"], receive_timeout=5)
    assert not conn.bind()
    assert conn.result["description"] == "confidentialityRequired", conn.result
    conn.unbind()
    assert bound(cluster, ALICE_DN, PASSWORDS["alice"]).bound  # the same password, over TLS


def test_the_portal_reads_as_its_own_identity(cluster):
    password_file = search_password_file(cluster)
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600 and password_file.stat().st_uid == 0
    groups = {group.name: group.members for group in read_directory(cluster)}
    assert groups["datascientists"] == {"alice", "bob"} and groups["portal-admins"] == {"admin"}
    synced = subprocess.run([sys.executable, "-m", "portal.accounts", "sync", "--dry-run"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    with pytest.raises(LDAPBindError):  # the portal's identity needs its password
        ldap3.Connection(server(cluster, "ldaps"), user=cluster.ldap_search_user, password="guess", auto_bind=True)


def test_wrong_passwords_never_lock_the_portal_out(cluster):
    for _ in range(cluster.directory_max_failures + 1):
        assert user_bind(server(cluster), cluster.ldap_search_user, "guess", True, 5) is Bind.WRONG
    assert user_bind(server(cluster), cluster.ldap_search_user, search_password(cluster), True, 5) is Bind.BOUND
    assert read_directory(cluster)


@pytest.fixture
def lockee(cluster):
    """A directory user of this test's own, removed afterwards (with the lock the test put on it)."""
    with own_user(cluster, 19999) as made:
        yield made


def test_wrong_passwords_lock_an_account_and_the_hub_says_so(cluster, hub, lockee):
    name, dn, password = lockee
    limit = cluster.directory_max_failures
    for _ in range(limit - 1):  # as a client that goes round the hub (a pod) would
        assert user_bind(server(cluster), dn, "guess", True, 5) is Bind.WRONG
    assert user_bind(server(cluster), dn, password, True, 5) is Bind.BOUND  # one short of the limit: no lock
    for _ in range(limit):
        assert user_bind(server(cluster), dn, "guess", True, 5) is Bind.WRONG
    assert user_bind(server(cluster), dn, password, True, 5) is Bind.LOCKED  # the right one, refused

    hub_log = cluster.state_dir / "log" / "hub.log"
    logged = hub_log.stat().st_size
    _, response = hub.post_login(name, password)
    assert response.status_code == 403, response.text[-500:]
    assert ACCOUNT_LOCKED in response.text.replace("&#39;", "'") and 'name="password"' in response.text
    new = hub_log.read_bytes()[logged:].decode(errors="replace")
    assert re.search(rf"Login refused for {name} from .*: account locked", new), new[-2000:]
    _, alice = hub.post_login("alice", PASSWORDS["alice"])
    assert alice.status_code == 302  # another account is not touched
