"""A directory user that a test makes for itself and removes afterwards (with whatever lock the test put on it):
the lockout tests lock their own user, never a demo user that other tests log in as. And connections to a box's
directory over TLS, as its clients make them."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import ldap3

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
