"""The directory's users and groups as Unix accounts of this machine (and so of every node: they share it)."""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import stat
from collections.abc import Iterator

from deploy.local.parts.layout import Layout
from deploy.supervise import BoxError, run
from portal.directory import ldap_connection

# Who makes the demo accounts takes this lock first: a box's sync here, and the tests' own (tests/conftest.py's
# demo_accounts), which run beside a starting box in `make test`. Of two useradd of one name at once, one fails.
ACCOUNTS_LOCK = "/run/lock/dsportal-demo-accounts.lock"


@contextlib.contextmanager
def accounts_locked() -> Iterator[None]:
    """ACCOUNTS_LOCK held: one maker of accounts at a time, across processes."""
    with open(ACCOUNTS_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def sync_unix_users(lay: Layout) -> list[str]:
    """Create the directory's posix groups and users as local Unix accounts; return what was done.

    Slurm runs jobs as Unix users, so alice must exist for the kernel. On a real cluster nslcd (libnss-ldapd)
    or sssd would resolve them from LDAP on every node; the box copies them instead, reading as the portal
    (ldap_search_user), as nslcd would with its own bind identity.
    """
    conn = ldap_connection(lay.cfg)
    base = lay.cfg.ldap_base_dn
    conn.search(base, "(objectClass=posixGroup)", attributes=["cn", "gidNumber", "memberUid"])
    groups = [(str(e.cn), int(e.gidNumber.value), [str(m) for m in e.memberUid]) for e in conn.entries]
    conn.search(base, "(objectClass=posixAccount)",
                attributes=["uid", "uidNumber", "gidNumber", "homeDirectory", "loginShell", "cn"])
    users = [e.entry_attributes_as_dict for e in conn.entries]
    conn.unbind()
    with accounts_locked():
        done = [ensure_group(name, gid) for name, gid, _ in groups]
        for u in users:
            first = {key: values[0] for key, values in u.items() if values}  # single-valued in practice
            done.append(ensure_user(first["uid"], int(first["uidNumber"]), int(first["gidNumber"]),
                                    first["homeDirectory"], first.get("loginShell", "/bin/bash"), first.get("cn", "")))
        local_users = {u["uid"][0] for u in users}
        for name, _, members in groups:
            done += [ensure_member(m, name) for m in members if m in local_users]
    return [d for d in done if d]


def report_sync(lay: Layout) -> str:
    done = sync_unix_users(lay)
    return f"unix users: {'created ' + ', '.join(done) if done else 'up to date'}"


def ensure_group(name: str, gid: int) -> str:
    try:
        existing = grp.getgrnam(name)
    except KeyError:
        run(["groupadd", "-g", str(gid), name], f"Unix group {name}")
        return f"group {name} ({gid})"
    if existing.gr_gid != gid:
        raise BoxError(f"Unix group {name} exists with gid {existing.gr_gid}, but LDAP says {gid}")
    return ""


def ensure_user(name: str, uid: int, gid: int, home: str, shell: str, gecos: str) -> str:
    try:
        existing = pwd.getpwnam(name)
    except KeyError:
        # HOME_MODE: a home (job logs, notebooks, checkpoints) is its owner's alone, not Debian's 0755.
        run(["useradd", "-u", str(uid), "-g", str(gid), "-d", home, "-s", shell, "-c", gecos,
             "--create-home", "-K", "HOME_MODE=0700", name], f"Unix user {name}")
        return f"user {name} ({uid})"
    if existing.pw_uid != uid:
        raise BoxError(f"Unix user {name} exists with uid {existing.pw_uid}, but LDAP says {uid}; "
                       f"remove or renumber the local account")
    if os.path.isdir(existing.pw_dir) and stat.S_IMODE(os.stat(existing.pw_dir).st_mode) & 0o077:
        os.chmod(existing.pw_dir, 0o700)  # homes made before the box closed them
        return f"home of {name} closed to others"
    return ""


def ensure_member(user: str, group: str) -> str:
    if user in grp.getgrnam(group).gr_mem or pwd.getpwnam(user).pw_gid == grp.getgrnam(group).gr_gid:
        return ""
    run(["usermod", "-a", "-G", group, user], f"adding {user} to Unix group {group}")
    return f"{user} in {group}"
