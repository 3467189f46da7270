"""The directory keeps its secrets (issue 49): the test box's real slapd refuses anonymous searches and passwords
without TLS, shows a user only their own entry, locks an account after directory_max_failures wrong passwords (the
hub then says so), never locks the portal's own identity, and the portal's reads, as that identity, still work. A
directory made by an earlier box gets the same rules at its next start. One directory serves several boxes: each
claims it, and it stops with the last one's claim."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import ldap3
import pytest
from ldap3.core.exceptions import LDAPBindError

from deploy.local.parts import slapd
from deploy.local.parts.layout import Layout
from portal.auth import ACCOUNT_LOCKED
from portal.directory import read_directory, search_password, search_password_file
from portal.ldap_login import Bind, user_bind
from tests.conftest import PASSWORDS, PORT_OFFSET, REPO, TEST_SETTINGS, TEST_STATE, box
from tests.directory_users import own_user

ALICE_DN = "uid=alice,ou=people,dc=dsportal,dc=local"


def server(cfg, mode: str = "starttls") -> ldap3.Server:
    tls = ldap3.Tls(ca_certs_file=str(cfg.ca_file), validate=ssl.CERT_REQUIRED)
    port = cfg.ldaps_port if mode == "ldaps" else cfg.ldap_port
    return ldap3.Server("127.0.0.1", port=port, use_ssl=mode == "ldaps", tls=tls, get_info=ldap3.NONE,
                        connect_timeout=5)


def bound(cfg, user: str | None, password: str | None, mode: str = "starttls") -> ldap3.Connection:
    """A connection over TLS (StartTLS or LDAPS), bound as `user` (None: anonymous); the bind's result kept."""
    conn = ldap3.Connection(server(cfg, mode), user=user, password=password, receive_timeout=5)
    conn.open()
    if mode == "starttls":
        conn.start_tls()
    conn.bind()
    return conn


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


def old_rules(config: str) -> str:
    """cn=config as the box wrote it before issue 49: everything readable by anyone, no TLS rule, no ppolicy."""
    config = re.sub(r"^(olcSecurity|olcRequires|olcModuleLoad: ppolicy).*\n", "", config, flags=re.M)
    config = config[:config.index("dn: olcOverlay=")]
    return re.sub(r"^olcAccess: \{1\}.*$", "olcAccess: {1}to * by * read", config, flags=re.M)


@pytest.fixture
def old_directory(tmp_path_factory):
    """A directory made by an earlier box (its own state dir and ports), and the settings file that names it."""
    state = Path(f"{TEST_STATE}-olddir")
    shutil.rmtree(state, ignore_errors=True)
    settings_file = tmp_path_factory.mktemp("olddir") / "settings.yaml"
    values = {**TEST_SETTINGS, "state_dir": str(state), "directory_dir": f"{state}-directory",
              "ldap_port": 23489 + PORT_OFFSET, "ldaps_port": 26736 + PORT_OFFSET}
    settings_file.write_text("".join(f"{k}: {v}\n" for k, v in values.items()))
    from portal.config import load
    cfg = load({"DSPORTAL_CONFIG": str(settings_file)})
    lay = Layout(cfg)  # the box's own state dir: where an earlier box kept its directory
    for part in (lay.root, lay.run, lay.log):
        part.mkdir(parents=True, exist_ok=True)
    os.chmod(lay.root, 0o755)
    slapd.ensure_tls(lay)
    slapd.ensure_ldap(lay)  # today's first start: then its rules and entries made as the earlier box made them
    shutil.rmtree(lay.ldap / "slapd.d")
    (lay.ldap / "slapd.d").mkdir(mode=0o700)
    old = lay.ldap / "old-config.ldif"
    old.write_text(old_rules(slapd.config_ldif(lay, slapd.ssha(slapd.rootpw_file(lay).read_text()))))
    subprocess.run(["slapadd", "-n0", "-F", str(lay.ldap / "slapd.d"), "-l", str(old)], check=True,
                   capture_output=True)
    try:
        yield cfg, settings_file
    finally:
        box("stop", "slapd", check=False, settings=settings_file)  # not `down`: its network is the test box's
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(cfg.directory_dir, ignore_errors=True)


def test_a_directory_made_by_an_earlier_box_gets_the_rules_at_its_next_start(old_directory):
    cfg, settings_file = old_directory
    assert not search_password_file(cfg).exists()
    started = box("start", "slapd", settings=settings_file)
    assert "rules and managed entries brought in line (5 added)" in started.stdout, started.stdout
    assert f"moved from {cfg.state_dir} to {cfg.directory_dir}" in started.stdout  # its CA and data kept
    assert not (cfg.state_dir / "ldap").exists() and (cfg.directory_dir / "ldap" / ".initialized").exists()
    anonymous = bound(cfg, None, None)
    assert not anonymous.search("dc=dsportal,dc=local", "(objectClass=*)") and not anonymous.entries
    assert {g.name for g in read_directory(cfg)} >= {"datascientists", "gpu-users", "portal-admins"}
    assert user_bind(server(cfg), ALICE_DN, PASSWORDS["alice"], True, 5) is Bind.BOUND
    again = box("start", "slapd", settings=settings_file)
    assert "already running" in again.stdout and "brought in line" not in again.stdout  # nothing left to do
    stricter = replace(cfg, directory_max_failures=2)
    settings_file.write_text(settings_file.read_text() + "directory_max_failures: 2\n")
    restarted = box("start", "slapd", settings=settings_file)  # a changed policy: slapd stopped, changed, started
    assert "stopped to bring its rules in line" in restarted.stdout, restarted.stdout
    for _ in range(stricter.directory_max_failures):
        user_bind(server(cfg), ALICE_DN, "guess", True, 5)
    assert user_bind(server(cfg), ALICE_DN, PASSWORDS["alice"], True, 5) is Bind.LOCKED


def test_one_directory_serves_two_boxes_and_stops_with_the_last(tmp_path):
    """Two boxes (their own state dirs) name one directory_dir: the second finds it running with the first's CA,
    the first's `stop slapd` keeps it for the second (whose logins still work), the second's stops it."""
    shared = Path(f"{TEST_STATE}-shared-directory")
    states = [Path(f"{TEST_STATE}-box{i}") for i in (1, 2)]
    files = []
    for state in [shared, *states]:
        shutil.rmtree(state, ignore_errors=True)
    for i, state in enumerate(states):
        state.mkdir()
        files.append(tmp_path / f"box{i + 1}.yaml")
        values = {**TEST_SETTINGS, "state_dir": str(state), "directory_dir": str(shared),
                  "ldap_port": 23589 + PORT_OFFSET, "ldaps_port": 26836 + PORT_OFFSET}
        files[-1].write_text("".join(f"{k}: {v}\n" for k, v in values.items()))
    from portal.auth import PortalLDAPAuthenticator
    from portal.config import load
    first, second = (load({"DSPORTAL_CONFIG": str(f)}) for f in files)
    try:
        assert "slapd: started" in box("start", "slapd", settings=files[0]).stdout
        ca = first.ca_file.read_bytes()
        joined = box("start", "slapd", settings=files[1]).stdout
        assert "already running" in joined and f"shared with {states[0]}" in joined, joined
        assert second.ca_file == first.ca_file and second.ca_file.read_bytes() == ca
        kept = box("stop", "slapd", settings=files[0]).stdout
        assert f"kept running for {states[1]}" in kept, kept
        status = box("status", settings=files[1]).stdout
        assert re.search(r"^slapd: running \(\d+\), .*needed by this box and 0 other.*logins: work \(bound as "
                         r"cn=portal,ou=services,dc=dsportal,dc=local; alice found\)", status, re.M), status
        login = asyncio.run(PortalLDAPAuthenticator(portal=second).authenticate(
            None, {"username": "alice", "password": PASSWORDS["alice"]}))
        assert login["groups"] == ["datascientists", "gpu-users"]
        assert "slapd: stopped" in box("stop", "slapd", settings=files[1]).stdout
        status = box("status", settings=files[0]).stdout
        assert re.search(r"^slapd: stopped, .*needed by not this box; 0 other.*logins: FAIL", status, re.M), status
    finally:
        for f in files:
            box("stop", "slapd", check=False, settings=f)
        for state in [shared, *states]:
            shutil.rmtree(state, ignore_errors=True)
