"""The directory's starts with no box around it (issue 49): a directory made by an earlier box gets today's rules
at its next start, and a changed lock policy restarts it; one directory serves several boxes, each claims it, and it
stops with the last one's claim. Each runs its own slapd (its own state dirs and ports) and needs the demo accounts
at most: a module of the box-free side (tests/conftest.py's NO_BOX_PATHS), beside the test boxes. The test box's
own directory keeps its rules in test_directory.py."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.local.parts import slapd
from deploy.local.parts.layout import Layout
from portal.directory import read_directory, search_password_file
from portal.ldap_login import Bind, user_bind
from tests.conftest import PASSWORDS, PORT_OFFSET, TEST_SETTINGS, TEST_STATE, box
from tests.directory_users import ALICE_DN, bound, server

pytestmark = pytest.mark.integration


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
        box("stop", "slapd", check=False, settings=settings_file)  # not `down`: its nodes are the test box's
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
