"""The directory: a self-signed CA and certificate, a private slapd with the demo users and groups."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl

import ldap3
from ldap3.core.exceptions import LDAPException

from deploy.local.parts.layout import LOCALHOST, Layout, make_dir, render
from deploy.selfsigned import ensure_ca_and_server_cert
from deploy.supervise import Service, run

# The demo directory: (uid, password, uidNumber, given name, surname). gidNumber 100 is Debian's `users`.
DEMO_USERS = [
    ("alice", "wonderland", 10001, "Alice", "Liddell"),
    ("bob", "builder", 10002, "Bob", "Builder"),
    ("mallory", "mallory", 10003, "Mallory", "Malicious"),
    ("admin", "admin-demo", 10004, "Portal", "Admin"),
]
DEMO_PRIMARY_GID = 100
DEMO_GROUPS = [
    ("datascientists", 10100, ["alice", "bob"]),
    ("gpu-users", 10101, ["alice"]),
    ("portal-admins", 10102, ["admin"]),
]


def rootpw_file(lay: Layout):
    return lay.ldap / "rootpw"


def root_dn(lay: Layout) -> str:
    return f"cn=admin,{lay.cfg.ldap_base_dn}"


def ensure_tls(lay: Layout) -> None:
    """A self-signed CA and a server certificate for 127.0.0.1 / localhost, made once."""
    # OpenLDAP's client tools check "localhost" against this machine's own name, so carry it too.
    names = sorted({"localhost", socket.gethostname(), socket.getfqdn()})
    # slapd runs as root here, so root-only keys are readable by it.
    ensure_ca_and_server_cert(make_dir(lay.tls), "server", ca_cn="dsportal demo CA", server_cn="localhost",
                              alt_names=["IP:127.0.0.1", *(f"DNS:{name}" for name in names)], what="server")


def ssha(password: str) -> str:
    return run(["slappasswd", "-h", "{SSHA}", "-s", password], "LDAP: hashing a password").stdout.strip()


def demo_ldif(base: str) -> str:
    """The demo directory: ou=people, ou=groups, the users and their posix groups."""
    entries = [
        f"dn: {base}\nobjectClass: dcObject\nobjectClass: organization\no: Data Scientist Portal\n"
        f"dc: {base.split(',')[0].split('=')[1]}",
        f"dn: ou=people,{base}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{base}\nobjectClass: organizationalUnit\nou: groups",
    ]
    for uid, password, number, given, surname in DEMO_USERS:
        entries.append(
            f"dn: uid={uid},ou=people,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"uid: {uid}\ncn: {given} {surname}\ngivenName: {given}\nsn: {surname}\n"
            f"mail: {uid}@dsportal.local\nuidNumber: {number}\ngidNumber: {DEMO_PRIMARY_GID}\n"
            f"homeDirectory: /home/{uid}\nloginShell: /bin/bash\nuserPassword: {ssha(password)}")
    for name, gid, members in DEMO_GROUPS:
        entries.append(f"dn: cn={name},ou=groups,{base}\nobjectClass: posixGroup\ncn: {name}\n"
                       f"gidNumber: {gid}\n" + "".join(f"memberUid: {m}\n" for m in members).rstrip())
    return "\n\n".join(entries) + "\n"


def ensure_ldap(lay: Layout) -> None:
    """Create slapd's cn=config and load the demo directory, both offline and only once."""
    ldap, marker = lay.ldap, lay.ldap / ".initialized"
    if marker.exists():
        return
    if ldap.exists():
        shutil.rmtree(ldap)  # no marker: an earlier first run failed half-way; nothing was ever served
    config_dir, data_dir = make_dir(ldap / "slapd.d", 0o700), make_dir(ldap / "data", 0o700)
    os.chmod(ldap, 0o700)
    rootpw = secrets.token_urlsafe(24)
    rootpw_file(lay).touch(mode=0o600)
    rootpw_file(lay).write_text(rootpw)
    config = ldap / "config.ldif"
    config.write_text(render(
        "slapd-config.ldif", config_dir=config_dir, data_dir=data_dir, base_dn=lay.cfg.ldap_base_dn,
        rootpw_hash=ssha(rootpw), ca_file=lay.tls / "ca.pem", cert_file=lay.tls / "server.pem",
        key_file=lay.tls / "server.key"))
    run(["slapadd", "-n0", "-F", str(config_dir), "-l", str(config)], "LDAP: loading cn=config")
    demo = ldap / "demo.ldif"
    demo.write_text(demo_ldif(lay.cfg.ldap_base_dn))
    run(["slapadd", "-F", str(config_dir), "-b", lay.cfg.ldap_base_dn, "-l", str(demo)],
        "LDAP: loading the demo directory")
    for ldif in (config, demo):
        os.chmod(ldif, 0o600)  # they hold password hashes
    marker.touch()


def ldap_connection(lay: Layout, port: int, use_ssl: bool) -> ldap3.Connection:
    """A connection bound as the directory's root, over StartTLS or LDAPS, verifying the box's CA."""
    tls = ldap3.Tls(ca_certs_file=str(lay.tls / "ca.pem"), validate=ssl.CERT_REQUIRED)
    server = ldap3.Server(LOCALHOST, port=port, use_ssl=use_ssl, tls=tls, connect_timeout=3)
    bind = ldap3.AUTO_BIND_NO_TLS if use_ssl else ldap3.AUTO_BIND_TLS_BEFORE_BIND
    return ldap3.Connection(server, user=root_dn(lay), password=rootpw_file(lay).read_text(),
                            auto_bind=bind, receive_timeout=5, raise_exceptions=True)


def slapd_ready(lay: Layout) -> str | None:
    for port, use_ssl in ((lay.cfg.ldap_port, False), (lay.cfg.ldaps_port, True)):
        try:
            ldap_connection(lay, port, use_ssl).unbind()
        except LDAPException as err:
            return f"{'ldaps' if use_ssl else 'ldap+StartTLS'} on port {port}: {err}"
    return None


def _prepare(lay: Layout) -> None:
    ensure_tls(lay)
    ensure_ldap(lay)


def service(after_start) -> Service:
    """slapd; `after_start` copies the directory's users to this machine (the directory may have changed)."""
    return Service(
        "slapd", "slapd", _prepare,
        # -d keeps slapd in the foreground, so the PID we record is slapd's own; `stats` logs each operation.
        lambda lay: ["/usr/sbin/slapd", "-d", "stats", "-F", str(lay.ldap / "slapd.d"), "-h",
                     f"ldap://{LOCALHOST}:{lay.cfg.ldap_port}/ ldaps://{LOCALHOST}:{lay.cfg.ldaps_port}/"],
        slapd_ready, 15, lambda lay: [(LOCALHOST, lay.cfg.ldap_port), (LOCALHOST, lay.cfg.ldaps_port)],
        after_start=after_start)
