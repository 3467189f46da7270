"""Slurm associations from the directory: the sacctmgr parsers, reading the directory, and the planning rules.
The command line and the real command runner: test_accounts_cli.py.

Slurm's answers are literal `sacctmgr -nP` output as Slurm 22.05 prints it; the directory and the command runner are
fakes passed in, as the box passes the real ones (tests/unit/helpers.py, which test_accounts_cli.py uses too).
"""

from __future__ import annotations

import dataclasses

import ldap3
import pytest
from ldap3.core.exceptions import LDAPSocketOpenError

from portal.config import PortalConfig
from portal.directory import (
    DirectoryError,
    directory_from_entries,
    directory_mail,
    ldap_connection,
    read_directory,
)
from portal.scheduler.slurm.accounts import (
    cluster_name,
    desired_state,
    gpu_limit,
    parse_associations,
    parse_default_accounts,
    parse_qos_flags,
    plan,
    read_slurm,
)
from portal.scheduler.slurm.errors import SlurmError
from tests.unit.helpers import ACCOUNTS_CFG as CFG
from tests.unit.helpers import DEMO, IN_SYNC, IN_SYNC_USERS, NEW_CLUSTER, NEW_USERS, FakeSlurm, group, slurm_state
from tests.unit.helpers import GROUP_BASE as BASE
from tests.unit.helpers import SCONTROL_CONFIG as CONFIG


def lines(directory=DEMO, assoc: str = IN_SYNC, users: str = IN_SYNC_USERS, cfg: PortalConfig = CFG) -> list[str]:
    return [c.line for c in plan(desired_state(directory, cfg), slurm_state(assoc, users))]


# --- Parsing Slurm's answers ---------------------------------------------------------------------------------


def test_associations_as_sacctmgr_prints_them():
    text = IN_SYNC + ("dsportal|datascientists|carol|\n"  # no GrpTRES at all: no GPU limit
                      "dsportal|gpu-users|dave|cpu=8,gres/gpu=2,mem=16G\n"
                      "dsportal|root|||\n"  # with -p instead of -P: one '|' more at the end
                      "other|gpu-users|erin|gres/gpu=9\n"  # another cluster in the same slurmdbd
                      "\n")
    accounts, associations = parse_associations(text, "dsportal")
    assert accounts == {"root", "datascientists", "gpu-users", "portal-admins"}
    assert [(a.user, a.account, a.gpus) for a in associations] == [
        ("admin", "portal-admins", 0), ("alice", "gpu-users", 4), ("bob", "datascientists", 0),
        ("carol", "datascientists", None), ("dave", "gpu-users", 2), ("root", "root", None)]


def test_gpu_limits_in_grp_tres():
    assert gpu_limit("gres/gpu=4") == 4
    assert gpu_limit("cpu=8,gres/gpu=0,mem=16G") == 0
    assert gpu_limit("") is None
    assert gpu_limit("cpu=8") is None
    assert gpu_limit("gres/gpu:v100=2") is None  # a typed GPU is another TRES


def test_default_accounts_qos_flags_and_cluster_name():
    assert parse_default_accounts("alice|gpu-users\nroot|root\ncarol|\n") == {"alice": "gpu-users", "root": "root"}
    assert parse_qos_flags("normal|\n") == ()
    assert parse_qos_flags("normal|DenyOnLimit,NoReserve\n") == ("DenyOnLimit", "NoReserve")
    assert parse_qos_flags("") is None
    assert cluster_name(CONFIG) == "dsportal"
    assert cluster_name("ClusterName = DSPortal\n") == "dsportal"
    with pytest.raises(SlurmError, match="ClusterName"):
        cluster_name("AccountingStorageType = accounting_storage/slurmdbd\n")


def test_a_missing_normal_qos_is_an_error_that_says_so():
    with pytest.raises(SlurmError, match="no QOS normal"):
        read_slurm(CFG, FakeSlurm(qos=""))


# --- Reading the directory -----------------------------------------------------------------------------------


def entry(dn: str, **attributes) -> dict:
    return {"type": "searchResEntry", "dn": dn, "attributes": attributes}


def test_posix_groups_and_groups_of_names():
    groups = directory_from_entries([
        entry(f"cn=gpu-users,{BASE}", cn=["gpu-users"], memberUid=["alice", " Bob "], member=[], uniqueMember=[]),
        entry(f"cn=team,{BASE}", cn=["team"], member=["uid=carol,ou=people,dc=dsportal,dc=local",
                                                      "UID = Dave , ou=people,dc=dsportal,dc=local"]),
        entry(f"cn=auditors,{BASE}", cn=["auditors"], uniqueMember=["uid=erin,ou=people,dc=dsportal,dc=local"]),
        entry(f"cn=all,{BASE}", cn=["all"], member=[f"cn=team,{BASE}", "not a dn", "uid=frank,ou=people"]),
        {"type": "searchResRef", "uri": ["ldap://elsewhere/"]},
    ])
    assert {g.name: g.members for g in groups} == {
        "all": {"frank"}, "auditors": {"erin"}, "gpu-users": {"alice", "bob"}, "team": {"carol", "dave"}}
    assert {g.name: g.skipped for g in groups if g.skipped} == {"all": (f"cn=team,{BASE}", "not a dn")}
    warnings = desired_state(groups, CFG).warnings
    assert any("group all: members" in w and "nested groups are not followed" in w for w in warnings)


def mock_connection(*entries: tuple[str, dict]) -> ldap3.Connection:
    conn = ldap3.Connection(ldap3.Server("mock", get_info=ldap3.NONE), user="cn=reader,dc=dsportal,dc=local",
                            password="secret", client_strategy=ldap3.MOCK_SYNC, raise_exceptions=True)
    conn.strategy.add_entry("cn=reader,dc=dsportal,dc=local", {"userPassword": "secret", "sn": "reader"})
    conn.strategy.add_entry(BASE, {"objectClass": ["organizationalUnit"], "ou": "groups"})
    for dn, attributes in entries:
        conn.strategy.add_entry(dn, attributes)
    conn.bind()
    return conn


def test_read_directory_searches_the_group_base():
    conn = mock_connection((f"cn=gpu-users,{BASE}", {"objectClass": ["posixGroup"], "cn": "gpu-users",
                                                     "gidNumber": 10101, "memberUid": ["alice"]}),
                           (f"cn=team,{BASE}", {"objectClass": ["groupOfNames"], "cn": "team",
                                                "member": ["uid=bob,ou=people,dc=dsportal,dc=local"]}),
                           ("cn=elsewhere,dc=dsportal,dc=local", {"objectClass": ["posixGroup"], "cn": "elsewhere",
                                                                  "memberUid": ["mallory"]}))
    groups = read_directory(CFG, connect=lambda cfg: conn)
    assert [(g.name, sorted(g.members)) for g in groups] == [("gpu-users", ["alice"]), ("team", ["bob"])]


def test_a_directory_that_shows_no_group_changes_nothing():
    # An anonymous bind that the ACLs keep from the groups would otherwise remove every association.
    with pytest.raises(DirectoryError, match="no group under ou=groups"):
        read_directory(CFG, connect=lambda cfg: mock_connection())


def test_a_directory_that_does_not_answer_is_one_line_with_its_own_words():
    def refused(cfg):
        raise LDAPSocketOpenError("socket connection error while opening: [Errno 111] Connection refused")

    with pytest.raises(DirectoryError) as err:
        read_directory(CFG, connect=refused)
    assert str(err.value) == "LDAP at ldap://127.0.0.1:3389: socket connection error while opening: [Errno 111] " \
                             "Connection refused"


def test_tls_needs_a_readable_ca_file(tmp_path):
    with pytest.raises(DirectoryError, match=r"ldap_tls is ldaps, but its CA file .*ca\.pem \(ldap_ca_file\)"):
        ldap_connection(PortalConfig(state_dir=tmp_path, directory_dir=tmp_path, ldap_tls="ldaps"))


# --- The rules -------------------------------------------------------------------------------------------------


def test_a_new_cluster_from_scratch():
    changes = plan(desired_state(DEMO, CFG), slurm_state(NEW_CLUSTER, NEW_USERS, flags=""))
    assert [c.line for c in changes] == [
        "add account datascientists", "add account gpu-users", "add account portal-admins",
        "set DenyOnLimit on QOS normal",
        "add admin to account portal-admins with no GPUs",
        "add alice to account gpu-users with at most 4 GPUs",
        "add bob to account datascientists with no GPUs"]
    gpu_users, qos, alice = (changes[i].commands for i in (1, 3, 5))
    assert gpu_users == (("sacctmgr", "-i", "add", "account", "Name=gpu-users", "Cluster=dsportal"),)
    assert qos == (("sacctmgr", "-i", "modify", "qos", "where", "Name=normal", "set", "Flags+=DenyOnLimit"),)
    assert alice == (("sacctmgr", "-i", "add", "user", "Name=alice", "Cluster=dsportal", "Account=gpu-users",
                      "DefaultAccount=gpu-users", "GrpTRES=gres/gpu=4", "MaxSubmitJobs=50"),)


def test_in_sync_gives_no_changes():
    assert lines() == []


def test_quota_raised():
    changes = plan(desired_state(DEMO, dataclasses.replace(CFG, gpu_quota={"gpu-users": 8})),
                   slurm_state(IN_SYNC, IN_SYNC_USERS))
    assert [(c.line, c.commands) for c in changes] == [("alice: GPU limit 4 -> 8", (
        ("sacctmgr", "-i", "modify", "user", "where", "Name=alice", "Account=gpu-users", "Cluster=dsportal", "set",
         "GrpTRES=gres/gpu=8", "MaxSubmitJobs=50"),))]


def test_an_association_without_a_gpu_limit_gets_one():
    assoc = IN_SYNC.replace("dsportal|datascientists|bob|gres/gpu=0|50", "dsportal|datascientists|bob||50")
    assert lines(assoc=assoc) == ["bob: GPU limit none -> 0"]


def test_a_weekly_gpu_hours_budget_becomes_the_associations_gpu_minutes_and_goes_with_it():
    """Slurm holds each user to their weekly budget itself (GrpTRESMins=gres/gpu, minutes), submitted outside the
    portal too; a budget taken away is cleared (-1), and what Slurm has is read back."""
    budgeted = dataclasses.replace(CFG, gpu_hours_budget={"gpu-users": 40})
    changes = plan(desired_state(DEMO, budgeted), slurm_state(IN_SYNC, IN_SYNC_USERS))
    assert [(c.line, c.commands) for c in changes] == [("alice: no weekly budget -> 40 GPU-hours a week", (
        ("sacctmgr", "-i", "modify", "user", "where", "Name=alice", "Account=gpu-users", "Cluster=dsportal", "set",
         "GrpTRES=gres/gpu=4", "MaxSubmitJobs=50", "GrpTRESMins=gres/gpu=2400"),))]
    held = IN_SYNC.replace("dsportal|gpu-users|alice|gres/gpu=4|50",
                           "dsportal|gpu-users|alice|gres/gpu=4|50|gres/gpu=2400")
    assert lines(assoc=held, cfg=budgeted) == []  # in sync: read back from sacctmgr's GrpTRESMins column
    changes = plan(desired_state(DEMO, CFG), slurm_state(held, IN_SYNC_USERS))
    assert [(c.line, c.commands[0][-1]) for c in changes] == [
        ("alice: 40 GPU-hours a week -> no weekly budget", "GrpTRESMins=gres/gpu=-1")]


def test_every_association_gets_the_job_limit_and_a_changed_one_follows_the_setting():
    assoc = IN_SYNC.replace("dsportal|gpu-users|alice|gres/gpu=4|50", "dsportal|gpu-users|alice|gres/gpu=4|")
    changes = plan(desired_state(DEMO, CFG), slurm_state(assoc, IN_SYNC_USERS))
    assert [(c.line, c.commands) for c in changes] == [("alice: job limit none -> 50", (
        ("sacctmgr", "-i", "modify", "user", "where", "Name=alice", "Account=gpu-users", "Cluster=dsportal", "set",
         "GrpTRES=gres/gpu=4", "MaxSubmitJobs=50"),))]
    fewer = dataclasses.replace(CFG, max_jobs_per_user=20)
    assert lines(cfg=fewer) == ["admin: job limit 50 -> 20", "alice: job limit 50 -> 20", "bob: job limit 50 -> 20"]


def test_a_user_moved_to_the_group_that_gives_them_a_quota():
    directory = (group("datascientists", "alice", "bob"), group("gpu-users", "alice", "bob"), DEMO[2])
    [change] = plan(desired_state(directory, CFG), slurm_state(IN_SYNC, IN_SYNC_USERS))
    assert change.line == "move bob from datascientists to gpu-users with at most 4 GPUs"
    # The new association and default come first: Slurm refuses to remove a user's default while another remains.
    assert change.commands == (
        ("sacctmgr", "-i", "add", "user", "Name=bob", "Cluster=dsportal", "Account=gpu-users",
         "DefaultAccount=gpu-users", "GrpTRES=gres/gpu=4", "MaxSubmitJobs=50"),
        ("sacctmgr", "-i", "modify", "user", "where", "Name=bob", "Cluster=dsportal", "set",
         "DefaultAccount=gpu-users"),
        ("sacctmgr", "-i", "delete", "user", "where", "Name=bob", "Account=datascientists", "Cluster=dsportal"))


def test_a_user_who_left_loses_their_association():
    directory = (group("datascientists", "alice"), *DEMO[1:])
    [change] = plan(desired_state(directory, CFG), slurm_state(IN_SYNC, IN_SYNC_USERS))
    assert change.line == "remove bob's association (account datascientists)"
    assert change.commands == (
        ("sacctmgr", "-i", "delete", "user", "where", "Name=bob", "Account=datascientists", "Cluster=dsportal"),)


def test_a_group_removed_from_the_directory():
    directory = DEMO[:2]  # portal-admins is gone, and admin with it
    changes = plan(desired_state(directory, CFG), slurm_state(IN_SYNC, IN_SYNC_USERS))
    assert [c.line for c in changes] == ["remove admin's association (account portal-admins)",
                                         "remove account portal-admins"]
    assert changes[1].commands == (
        ("sacctmgr", "-i", "delete", "account", "where", "Name=portal-admins", "Cluster=dsportal"),)
    assert "allowed group portal-admins is not under ou=groups" in desired_state(directory, CFG).warnings[0]


def test_an_account_of_the_directory_that_has_no_users_stays():
    assert lines(directory=(*DEMO, group("interns"))) == ["add account interns"]
    assoc = IN_SYNC + "dsportal|interns||\n"
    assert lines(directory=(*DEMO, group("interns")), assoc=assoc) == []


def test_root_is_never_touched():
    directory = (group("datascientists", "alice", "bob", "root"), *DEMO[1:], group("root", "alice"))
    assoc = IN_SYNC + "dsportal|old-team||\ndsportal|old-team|root|\ndsportal|root|mallory|gres/gpu=1\n"
    desired = desired_state(directory, CFG)
    assert "root" not in desired.accounts and "root" not in desired.default_accounts
    assert any("user 'root' in datascientists gets no association" in w for w in desired.warnings)
    assert any("group 'root' cannot be a Slurm account" in w for w in desired.warnings)
    # old-team is gone from the directory, but root's association there keeps it; mallory's root-account one stays.
    assert lines(directory, assoc=assoc) == []


def test_a_member_of_no_allowed_group_gets_nothing():
    directory = (*DEMO[:1], group("gpu-users", "alice", "mallory"), DEMO[2])  # a quota group, but not allowed
    assert "mallory" not in desired_state(directory, CFG).default_accounts
    assert lines(directory) == []
    stale = IN_SYNC + "dsportal|gpu-users|mallory|gres/gpu=4\n"
    assert lines(directory, assoc=stale) == ["remove mallory's association (account gpu-users)"]


def test_the_largest_quota_gives_the_account_and_ties_go_alphabetically():
    cfg = dataclasses.replace(CFG, gpu_quota={"gpu-b": 4, "gpu-a": 4, "gpu-power": 8})
    directory = (group("datascientists", "carol", "dave", "erin"), group("portal-admins", "erin"),
                 group("gpu-b", "carol", "dave"), group("gpu-a", "carol"), group("gpu-power", "dave"))
    users = {a.user: (a.account, a.gpus) for a in desired_state(directory, cfg).associations}
    assert users == {"carol": ("gpu-a", 4), "dave": ("gpu-power", 8), "erin": ("datascientists", 0)}


def test_groups_that_cannot_be_accounts_are_left_out_with_a_warning():
    cfg = dataclasses.replace(CFG, gpu_quota={"GPU Users": 4})
    directory = (group("datascientists", "erin"), group("GPU Users", "erin"), group("a,b", "erin"))
    desired = desired_state(directory, cfg)
    assert desired.accounts == {"datascientists"}
    for name in ("'GPU Users'", "'a,b'"):
        assert any(w.startswith(f"group {name} cannot be a Slurm account (left out); allowed: lower-case letters")
                   for w in desired.warnings), desired.warnings
    # erin's quota still counts; her account is the group that can be one.
    assert [(a.user, a.account, a.gpus) for a in desired.associations] == [("erin", "datascientists", 4)]


def test_names_that_cannot_be_slurm_users_are_left_out_with_a_warning():
    desired = desired_state((group("datascientists", "alice", "bad.name", "x" * 33),), CFG)
    assert [a.user for a in desired.associations] == ["alice"]
    assert sum("gets no association; allowed: a lower-case letter" in w for w in desired.warnings) == 2


def test_an_allowed_group_named_by_its_dn():
    cfg = dataclasses.replace(CFG, allowed_groups=(f"CN=GPU-Users, {BASE.upper()}",))
    assert [a.user for a in desired_state(DEMO, cfg).associations] == ["alice"]


def test_a_second_association_goes_so_the_limit_cannot_double():
    assoc = IN_SYNC + "dsportal|datascientists|alice|gres/gpu=0\n"
    users = IN_SYNC_USERS.replace("alice|gpu-users", "alice|datascientists")
    changes = plan(desired_state(DEMO, CFG), slurm_state(assoc, users))
    assert [c.line for c in changes] == ["alice: default account datascientists -> gpu-users",
                                         "remove alice's association (account datascientists)"]
    assert changes[0].commands == (("sacctmgr", "-i", "modify", "user", "where", "Name=alice", "Cluster=dsportal",
                                    "set", "DefaultAccount=gpu-users"),)


def test_a_leaver_with_several_associations_loses_the_default_last():
    assoc = IN_SYNC + "dsportal|gpu-users|mallory|gres/gpu=4\ndsportal|portal-admins|mallory|gres/gpu=0\n"
    users = IN_SYNC_USERS + "mallory|gpu-users\n"
    assert lines(assoc=assoc, users=users) == ["remove mallory's association (account portal-admins)",
                                               "remove mallory's association (account gpu-users)"]


def test_a_users_mail_is_the_directorys_first_address_found_as_a_login_finds_them():
    people = "ou=people,dc=dsportal,dc=local"

    def directory(cfg):  # a new connection each time: directory_mail unbinds the one it gets
        return mock_connection(
            (f"uid=alice,{people}", {"objectClass": ["inetOrgPerson"], "uid": "alice", "sn": "L",
                                     "mail": ["alice@dsportal.local", "a2@dsportal.local"]}),
            (f"uid=bob,{people}", {"objectClass": ["inetOrgPerson"], "uid": "bob", "sn": "B"}),
            (f"uid=eve,{people}", {"objectClass": ["inetOrgPerson"], "uid": "eve", "sn": "E",
                                   "mail": ["eve@x, bob@dsportal.local"]}))

    assert directory_mail("alice", CFG, connect=directory) == "alice@dsportal.local"
    assert directory_mail("bob", CFG, connect=directory) is None  # no `mail`
    assert directory_mail("eve", CFG, connect=directory) is None  # not one address: not mailed to
    assert directory_mail("nobody", CFG, connect=directory) is None  # no entry
    lookup = dataclasses.replace(CFG, ldap_lookup_dn=True, ldap_user_search_base=people)
    assert directory_mail("alice", lookup, connect=directory) == "alice@dsportal.local"
    assert directory_mail("nobody", lookup, connect=directory) is None
    with pytest.raises(DirectoryError, match="is not a user name"):
        directory_mail("alice)(uid=*", lookup, connect=directory)
