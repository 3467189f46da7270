"""A directory user that a test makes for itself and removes afterwards (with whatever lock the test put on it):
the lockout tests lock their own user, never a demo user that other tests log in as."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from deploy.local.parts import directory, slapd
from portal.config import PortalConfig


@contextmanager
def own_user(cfg: PortalConfig, uid_number: int) -> Iterator[tuple[str, str, str]]:
    """(name, dn, password) of a new posixAccount in the directory `cfg` uses, written as the directory's root."""
    name = f"lockee{uuid.uuid4().hex[:6]}"
    dn, password = f"uid={name},ou=people,{cfg.ldap_base_dn}", "right-password"
    root = slapd.ldap_connection(directory.place(cfg), cfg.ldaps_port, use_ssl=True)
    root.add(dn, ["inetOrgPerson", "posixAccount"], {
        "uid": name, "cn": name, "sn": name, "uidNumber": uid_number, "gidNumber": 100,
        "homeDirectory": f"/tmp/{name}", "userPassword": slapd.ssha(password)})
    try:
        yield name, dn, password
    finally:
        root.delete(dn)
        root.unbind()
