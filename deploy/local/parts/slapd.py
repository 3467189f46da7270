"""The directory: a self-signed CA and certificate, a private slapd with the demo users and groups.

It keeps its secrets (slapd-config.ldif says how): no anonymous reads, no password without TLS, a user reads only
their own entry, and the password policy (ppolicy) locks an account after directory_max_failures wrong passwords.
The portal reads as its own identity, ldap_search_user, whose password the box makes once and keeps (mode 0600)
in ldap_search_password_file. A directory made before these rules gets them at the next start (`ensure_current`):
cn=config is made again from the template, and the entries the box manages are added or brought in line.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import tempfile
from pathlib import Path

import ldap3
from ldap3.core.exceptions import LDAPException

from deploy.local.parts.layout import LOCALHOST, Layout, make_dir, render
from deploy.selfsigned import ensure_ca_and_server_cert
from deploy.supervise import BoxError, Service, run, service_pid, stop_service
from portal.config import PortalConfig
from portal.directory import search_password_file

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


def policies_dn(base: str) -> str:
    return f"ou=policies,{base}"


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


def policy_values(cfg: PortalConfig) -> dict[str, str]:
    """The default password policy's settings (slapo-ppolicy(5)), from the directory_* settings."""
    return {"pwdMaxFailure": str(cfg.directory_max_failures), "pwdLockout": "TRUE",
            "pwdLockoutDuration": str(cfg.directory_lockout_s),
            "pwdFailureCountInterval": str(cfg.directory_failure_window_s)}


def managed_entries(cfg: PortalConfig, password_hash: str) -> dict[str, str]:
    """DN -> LDIF of the entries the box keeps in line: the password policies (the default one, and one without
    lockout for the portal's identity, so that nobody can lock the portal out by guessing its password) and the
    portal's identity (ldap_search_user) with `password_hash`."""
    base, policies = cfg.ldap_base_dn, policies_dn(cfg.ldap_base_dn)
    service_rdn, service_parent = cfg.ldap_search_user.split(",", 1)
    policy = "objectClass: organizationalRole\nobjectClass: pwdPolicy\npwdAttribute: userPassword\n"
    return {
        policies: f"dn: {policies}\nobjectClass: organizationalUnit\nou: policies",
        f"cn=default,{policies}": f"dn: cn=default,{policies}\n{policy}cn: default\n"
                                  + "\n".join(f"{k}: {v}" for k, v in policy_values(cfg).items()),
        f"cn=service,{policies}": f"dn: cn=service,{policies}\n{policy}cn: service\npwdLockout: FALSE",
        service_parent: f"dn: {service_parent}\nobjectClass: organizationalUnit\n"
                        f"ou: {service_parent.split(',')[0].split('=', 1)[1]}",
        cfg.ldap_search_user: f"dn: {cfg.ldap_search_user}\nobjectClass: organizationalRole\n"
                              f"objectClass: simpleSecurityObject\ncn: {service_rdn.split('=', 1)[1]}\n"
                              f"userPassword: {password_hash}\npwdPolicySubentry: cn=service,{policies}",
    } if base else {}


def check_search_user(cfg: PortalConfig) -> None:
    parent = cfg.ldap_search_user.split(",", 1)[1:]
    if not (cfg.ldap_search_user.lower().startswith("cn=") and parent
            and parent[0].lower().endswith(cfg.ldap_base_dn.lower()) and parent[0].lower().startswith("ou=")):
        raise BoxError(f"ldap_search_user is {cfg.ldap_search_user!r}; the box's directory makes it, so it must "
                       f"be cn=NAME,ou=UNIT,{cfg.ldap_base_dn} (ldap_base_dn)")


def config_ldif(lay: Layout, rootpw_hash: str) -> str:
    return render("slapd-config.ldif", config_dir=lay.ldap / "slapd.d", data_dir=lay.ldap / "data",
                  base_dn=lay.cfg.ldap_base_dn, rootpw_hash=rootpw_hash, ca_file=lay.tls / "ca.pem",
                  cert_file=lay.tls / "server.pem", key_file=lay.tls / "server.key",
                  search_dn=lay.cfg.ldap_search_user)


def current_marker(lay: Layout) -> str:
    """What the directory's rules and managed entries are made from (never a secret): when it changes, cn=config
    is made again and the entries brought in line."""
    return "\n".join([config_ldif(lay, "-"), *managed_entries(lay.cfg, "-").values()]) + "\n"


def _secret_file(path: Path, value: str) -> None:
    path.touch(mode=0o600)
    os.chmod(path, 0o600)
    path.write_text(value)


def ensure_ldap(lay: Layout) -> None:
    """Create slapd's cn=config and load the demo directory, both offline and only once."""
    ldap, marker = lay.ldap, lay.ldap / ".initialized"
    if marker.exists():
        return
    if ldap.exists():
        shutil.rmtree(ldap)  # no marker: an earlier first run failed half-way; nothing was ever served
    config_dir, _ = make_dir(ldap / "slapd.d", 0o700), make_dir(ldap / "data", 0o700)
    os.chmod(ldap, 0o700)
    rootpw = secrets.token_urlsafe(24)
    _secret_file(rootpw_file(lay), rootpw)
    config = ldap / "config.ldif"
    _secret_file(config, config_ldif(lay, ssha(rootpw)))  # 0600: it holds password hashes
    run(["slapadd", "-n0", "-F", str(config_dir), "-l", str(config)], "LDAP: loading cn=config")
    demo = ldap / "demo.ldif"
    _secret_file(demo, demo_ldif(lay.cfg.ldap_base_dn))
    run(["slapadd", "-F", str(config_dir), "-b", lay.cfg.ldap_base_dn, "-l", str(demo)],
        "LDAP: loading the demo directory")
    marker.touch()


def ensure_current(lay: Layout) -> str:
    """Offline (slapd stopped), bring a directory made by an earlier box up to the current rules: cn=config made
    again from the template (the data stays), the managed entries added where missing and brought in line, the
    portal's password made once. A no-op when nothing changed since the last time."""
    cfg, ldap = lay.cfg, lay.ldap
    check_search_user(cfg)
    done, wanted = ldap / ".current", current_marker(lay)
    password_file = search_password_file(cfg)
    if done.exists() and done.read_text() == wanted and password_file.exists():
        return ""
    fresh = not password_file.exists()
    if fresh:
        make_dir(password_file.parent, 0o700) if not password_file.parent.exists() else None
        _secret_file(password_file, secrets.token_urlsafe(24) + "\n")
    with tempfile.TemporaryDirectory(dir=ldap) as scratch:
        config_dir = Path(scratch) / "slapd.d"
        config_dir.mkdir(mode=0o700)
        config = Path(scratch) / "config.ldif"
        config.write_text(config_ldif(lay, ssha(rootpw_file(lay).read_text())).replace(
            f"olcConfigDir: {ldap / 'slapd.d'}", f"olcConfigDir: {config_dir}"))
        run(["slapadd", "-n0", "-F", str(config_dir), "-l", str(config)], "LDAP: making cn=config again")
        shutil.rmtree(ldap / "slapd.d")
        config_dir.rename(ldap / "slapd.d")
        present = {line[4:].strip().lower() for line in run(
            ["slapcat", "-F", str(ldap / "slapd.d"), "-b", cfg.ldap_base_dn, "-o", "ldif_wrap=no"],
            "LDAP: listing the directory").stdout.splitlines() if line.startswith("dn: ")}
        entries = managed_entries(cfg, ssha(password_file.read_text().split("\n", 1)[0]))
        adds = [ldif for dn, ldif in entries.items() if dn.lower() not in present]
        changes = [f"dn: cn=default,{policies_dn(cfg.ldap_base_dn)}\nchangetype: modify\n" + "-\n".join(
            f"replace: {k}\n{k}: {v}\n" for k, v in policy_values(cfg).items())]
        if fresh and cfg.ldap_search_user.lower() in present:
            changes.append(f"dn: {cfg.ldap_search_user}\nchangetype: modify\nreplace: userPassword\n"
                           f"userPassword: {entries[cfg.ldap_search_user].split('userPassword: ')[1].split()[0]}")
        for what, ldif, tool in (("adding", adds, "slapadd"), ("changing", changes, "slapmodify")):
            if ldif:
                path = Path(scratch) / f"{tool}.ldif"
                path.write_text("\n\n".join(ldif) + "\n")
                run([tool, "-F", str(ldap / "slapd.d"), "-b", cfg.ldap_base_dn, "-l", str(path)],
                    f"LDAP: {what} the entries the box manages")
    done.write_text(wanted)
    return f"slapd: rules and managed entries brought in line ({len(adds)} added)"


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
    svc = service(lambda lay: "")
    if service_pid(svc, lay) and current(lay):
        return
    if service_pid(svc, lay):  # a slapd of an earlier box's rules: its configuration is changed offline
        print(f"slapd: stopped to bring its rules in line: {stop_service(svc, lay)}", flush=True)
    line = ensure_current(lay)
    if line:
        print(line, flush=True)


def current(lay: Layout) -> bool:
    marker = lay.ldap / ".current"
    return marker.exists() and marker.read_text() == current_marker(lay) and search_password_file(lay.cfg).exists()


def service(after_start) -> Service:
    """slapd; `after_start` copies the directory's users to this machine (the directory may have changed)."""
    return Service(
        "slapd", "slapd", _prepare,
        # -d keeps slapd in the foreground, so the PID we record is slapd's own; `stats` logs each operation.
        lambda lay: ["/usr/sbin/slapd", "-d", "stats", "-F", str(lay.ldap / "slapd.d"), "-h",
                     f"ldap://{LOCALHOST}:{lay.cfg.ldap_port}/ ldaps://{LOCALHOST}:{lay.cfg.ldaps_port}/"],
        slapd_ready, 15, lambda lay: [(LOCALHOST, lay.cfg.ldap_port), (LOCALHOST, lay.cfg.ldaps_port)],
        after_start=after_start)
