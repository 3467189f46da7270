"""Reading the LDAP directory, as the hub's login does: its groups and their members (for portal.accounts' sync),
and a user's e-mail address (for portal.jobmail).

    read_directory(cfg)          # every group under ldap_group_search_base; DirectoryError when there is none
    directory_mail(user, cfg)    # the user's `mail`, None when the entry has none
    search_password(cfg)         # ldap_search_user's password: the setting, or the first line of its file

Both readers take the connection as an argument (`connect`), so the tests pass a mock directory. Every read binds as
the portal's own identity (ldap_search_user): the directory shows anonymous clients and other users nothing.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ldap3
from ldap3.core.exceptions import LDAPException, LDAPInvalidDnError, LDAPNoSuchObjectResult
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn, parse_dn

from portal.config import PortalConfig
from portal.errors import Unavailable
from portal.inputs import one_line

# An address as a directory's `mail` holds it (local@domain, no display name): anything else is not mailed to.
MAIL_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
GROUP_FILTER = "(|(objectClass=posixGroup)(objectClass=groupOfNames)(objectClass=groupOfUniqueNames))"
LDAP_PAGE_SIZE = 500  # below slapd's default size limit, so a large directory is read page by page
# The login names the hub accepts (portal.auth's username_pattern): the users who can log in are the ones Slurm needs.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class DirectoryError(Unavailable, RuntimeError):
    """The directory refused or did not answer; the message names it and has its own words."""


@dataclass(frozen=True)
class Group:
    name: str  # cn: what allowed_groups and gpu_quota name, and the Slurm account
    dn: str
    members: frozenset[str]  # user names
    skipped: tuple[str, ...] = ()  # member values that name no user: nested groups (not followed, as by the hub)


def dn_parts(dn: str) -> list[tuple[str, str, str]]:
    """(attribute, value, separator) for each RDN; [] when `dn` is not a DN."""
    try:
        return parse_dn(str(dn), strip=True)
    except LDAPInvalidDnError:
        return []


def normal_dn(dn: str) -> str:
    """A DN to compare: LDAP matches these attribute types and group names without regard to case or spacing."""
    return "".join(f"{attr}={value}{sep}" for attr, value, sep in dn_parts(dn)).lower() or str(dn).strip().lower()


def directory_from_entries(entries: Iterable[Mapping[str, Any]]) -> tuple[Group, ...]:
    """Groups from ldap3 search results: posixGroup's memberUid, groupOf(Unique)Names' (unique)member DNs."""
    entries = [e for e in entries if e.get("type", "searchResEntry") == "searchResEntry"]
    group_dns = {normal_dn(e["dn"]) for e in entries}
    groups = []
    for entry in entries:
        attrs = entry["attributes"]
        rdn, cns = dn_parts(entry["dn"])[0], [str(cn) for cn in attrs.get("cn", [])]
        name = rdn[1] if rdn[0].lower() == "cn" or not cns else cns[0]
        members = {str(uid).strip().lower() for uid in attrs.get("memberUid", [])}
        dns = [str(dn) for dn in [*attrs.get("member", []), *attrs.get("uniqueMember", [])]]
        skipped = tuple(dn for dn in dns if normal_dn(dn) in group_dns or not dn_parts(dn))
        members |= {dn_parts(dn)[0][1].lower() for dn in dns if dn not in skipped}  # uid=alice,ou=people,... is alice
        groups.append(Group(name, str(entry["dn"]), frozenset(members - {""}), skipped))
    return tuple(sorted(groups, key=lambda g: g.name))


def search_password_file(cfg: PortalConfig) -> Path:
    return Path(cfg.ldap_search_password_file or cfg.directory_dir / "ldap" / "search-password")


def search_password(cfg: PortalConfig) -> str:
    """ldap_search_user's password: ldap_search_password, else the first line of ldap_search_password_file (a
    secret file rather than a setting: the settings file is readable by every user's jobs). "" for anonymous
    reads (no ldap_search_user). DirectoryError, naming the setting, when the file cannot be read."""
    if cfg.ldap_search_password or not cfg.ldap_search_user:
        return cfg.ldap_search_password
    path = search_password_file(cfg)
    try:
        return path.read_text().split("\n", 1)[0]
    except OSError as err:
        raise DirectoryError(f"ldap_search_password_file: {path} cannot be read ({err.strerror or err}); it holds "
                             f"the password of ldap_search_user {cfg.ldap_search_user}") from None


def ldap_connection(cfg: PortalConfig) -> ldap3.Connection:
    """A read-only connection bound as ldap_search_user (or anonymously), with the hub's TLS (portal.auth)."""
    if cfg.ldap_tls != "none" and not os.access(cfg.ca_file, os.R_OK):
        raise DirectoryError(f"ldap_tls is {cfg.ldap_tls}, but its CA file {cfg.ca_file} (ldap_ca_file) cannot be read")
    tls = None if cfg.ldap_tls == "none" else ldap3.Tls(ca_certs_file=str(cfg.ca_file), validate=ssl.CERT_REQUIRED)
    # No schema: a directory without the nis schema (no memberUid) is still read rather than refused.
    server = ldap3.Server(cfg.ldap_host, port=cfg.ldap_server_port, use_ssl=cfg.ldap_tls == "ldaps", tls=tls,
                          get_info=ldap3.NONE, connect_timeout=cfg.ldap_timeout)
    auto_bind = ldap3.AUTO_BIND_TLS_BEFORE_BIND if cfg.ldap_tls == "starttls" else ldap3.AUTO_BIND_NO_TLS
    return ldap3.Connection(server, user=cfg.ldap_search_user or None, password=search_password(cfg) or None,
                            auto_bind=auto_bind, receive_timeout=cfg.ldap_timeout, read_only=True,
                            raise_exceptions=True)


def directory_mail(user: str, cfg: PortalConfig,
                   connect: Callable[[PortalConfig], ldap3.Connection] = ldap_connection) -> str | None:
    """The user's e-mail address from the directory's `mail` attribute (its first value), None when the entry has
    none. The entry is found as the hub finds it for a login: by ldap_bind_dn_template, or with ldap_lookup_dn by
    ldap_user_attribute under ldap_user_search_base. DirectoryError when the directory does not answer."""
    if not USER_NAME.fullmatch(user):
        raise DirectoryError(f"{user[:40]!r} is not a user name")
    if cfg.ldap_lookup_dn:
        base, scope = cfg.ldap_user_search_base, ldap3.SUBTREE
        query = f"({cfg.ldap_user_attribute}={escape_filter_chars(user)})"
    else:
        base, scope, query = cfg.ldap_bind_dn_template.format(username=escape_rdn(user)), ldap3.BASE, "(objectClass=*)"
    try:
        conn = connect(cfg)
        try:
            conn.search(base, query, scope, attributes=["mail"], size_limit=2)
            entries = [e.entry_attributes_as_dict for e in conn.entries]
        finally:
            conn.unbind()
    except LDAPNoSuchObjectResult:
        return None
    except (LDAPException, OSError) as err:
        raise DirectoryError(f"LDAP at {cfg.ldap_url}: {one_line(str(err)) or type(err).__name__}") from None
    addresses = [str(a).strip() for e in entries[:1] for a in e.get("mail", [])]
    return next((a for a in addresses if MAIL_ADDRESS.fullmatch(a)), None)


def read_directory(cfg: PortalConfig,
                   connect: Callable[[PortalConfig], ldap3.Connection] = ldap_connection) -> tuple[Group, ...]:
    """Every group under ldap_group_search_base. DirectoryError when the directory fails, or shows no group at all
    (a wrong base or a bind that may not read groups would otherwise remove every association)."""
    where = f"LDAP at {cfg.ldap_url}"
    try:
        conn = connect(cfg)
        try:
            results = conn.extend.standard.paged_search(
                cfg.ldap_group_search_base, GROUP_FILTER, ldap3.SUBTREE,
                attributes=["cn", "memberUid", "member", "uniqueMember"], paged_size=LDAP_PAGE_SIZE, generator=False)
        finally:
            conn.unbind()
    except (LDAPException, OSError) as err:
        raise DirectoryError(f"{where}: {one_line(str(err)) or type(err).__name__}") from None
    groups = directory_from_entries(results)
    if not groups:
        raise DirectoryError(f"{where} shows {cfg.ldap_search_user or 'an anonymous bind'} no group under "
                             f"{cfg.ldap_group_search_base}; nothing changed (check ldap_group_search_base, "
                             "ldap_search_user and the directory's ACLs)")
    return groups
