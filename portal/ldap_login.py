"""A login against the directory in two binds: the user's own, which checks the password and nothing else, and the
portal's (ldap_search_user), which reads what the hub needs. The directory lets a user read only their own entry, so
the user's groups (allowed_groups, the admin flag, the GPU quota) are read as the portal.

    result = login(authenticator, username, password, server, receive_timeout, group_base)  # auth model or None
    outcome = user_bind(server, userdn, password, start_tls=True, receive_timeout=5)   # Bind.BOUND, WRONG or LOCKED
    result = portal_reads(conn, authenticator, userdn, username, group_base)  # conn: bound as the portal

The user's bind carries the password-policy request control (draft-behera-ldap-password-policy, slapd's ppolicy
overlay): a locked account's bind fails like a wrong password, and only the response control's `accountLocked`
error tells the two apart (slapd sends it with olcPPolicyUseLockout).
"""

from __future__ import annotations

import enum
from typing import Any

import ldap3
from ldap3.core.exceptions import LDAPBindError
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn
from ldapauthenticator import LDAPAuthenticator
from ldapauthenticator.ldapauthenticator import TlsStrategy

from portal.directory import DirectoryError
from portal.errors import Forbidden

PPOLICY_CONTROL = "1.3.6.1.4.1.42.2.27.8.5.1"
ACCOUNT_LOCKED = 1  # PasswordPolicyResponseValue's error: passwordExpired(0), accountLocked(1), ...
INVALID_CREDENTIALS = 49


class AccountLocked(Forbidden):
    """The directory's password policy refused the bind: the account is locked."""


class Bind(enum.Enum):
    BOUND = "bound"
    WRONG = "wrong user name or password"
    LOCKED = "account locked"


def _tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """One BER element at `at`: (tag, content, where the next one starts); ValueError when it is cut short."""
    if at + 2 > len(data):
        raise ValueError("cut short")
    tag, length, at = data[at], data[at + 1], at + 2
    if length & 0x80:  # long form: the next (length & 0x7f) bytes are the length
        size = length & 0x7F
        if not 1 <= size <= 4 or at + size > len(data):
            raise ValueError("bad length")
        length, at = int.from_bytes(data[at:at + size], "big"), at + size
    if at + length > len(data):
        raise ValueError("cut short")
    return tag, data[at:at + length], at + length


def ppolicy_error(value: bytes) -> int | None:
    """The `error` of a PasswordPolicyResponseValue, SEQUENCE { warning [0] OPTIONAL, error [1] ENUMERATED
    OPTIONAL } in BER; None when it carries none, or is not one (a server's bytes: never trusted to be well formed)."""
    try:
        tag, body, _ = _tlv(value, 0)
        if tag != 0x30:
            return None
        at = 0
        while at < len(body):
            tag, content, at = _tlv(body, at)
            if tag == 0x81 and 1 <= len(content) <= 4:  # [1] IMPLICIT ENUMERATED
                return int.from_bytes(content, "big")
    except ValueError:
        return None
    return None


def user_bind(server: ldap3.Server, userdn: str, password: str, start_tls: bool, receive_timeout: int) -> Bind:
    """The user's simple bind with the password-policy control. LDAPBindError for a refusal that is not about the
    password (another result code: the directory's own word for it); socket and TLS errors as ldap3 raises them."""
    conn = ldap3.Connection(server, user=userdn, password=password, receive_timeout=receive_timeout,
                            raise_exceptions=False)
    try:
        # No look at the server's root DSE before StartTLS (ldap3's default): the directory answers nothing
        # before a bind, and a search still outstanding makes slapd refuse StartTLS (operationsError).
        conn.open(read_server_info=False)
        if start_tls:
            conn.start_tls(read_server_info=False)
        if conn.bind(read_server_info=False, controls=[(PPOLICY_CONTROL, False, None)]):
            return Bind.BOUND
        result = conn.result or {}
        if result.get("result") != INVALID_CREDENTIALS:
            raise LDAPBindError(f"{result.get('description', 'no answer')}: {result.get('message', '')}".rstrip(": "))
        control = (result.get("controls") or {}).get(PPOLICY_CONTROL) or {}
        return Bind.LOCKED if ppolicy_error(control.get("value") or b"") == ACCOUNT_LOCKED else Bind.WRONG
    finally:
        conn.unbind()


def portal_reads(conn: ldap3.Connection, authenticator: LDAPAuthenticator, userdn: str, username: str,
                 group_base: str) -> dict[str, Any] | None:
    """What upstream's authenticate reads after the user's bind, read on `conn` (bound as the portal): the
    search_filter check, the allowed groups the user is in, auth_state_attributes, and the names of all the user's
    groups under `group_base` (`portal_groups`). None when search_filter does not find exactly one entry."""
    auth = authenticator
    if auth.search_filter:
        conn.search(auth.user_search_base, auth.search_filter.format(
            userattr=auth.user_attribute, username=escape_filter_chars(username)), ldap3.SUBTREE,
            attributes=auth.attributes)
        if len(conn.entries) != 1:
            auth.log.warning("Login of %s denied: search_filter found %d entries", username, len(conn.entries))
            return None
    group_filter = auth.group_search_filter.format(userdn=escape_filter_chars(userdn),
                                                   uid=escape_filter_chars(username))
    allowed = [group for group in auth.allowed_groups
               if conn.search(group, group_filter, ldap3.BASE, attributes=auth.group_attributes)]
    attributes = dict(auth.get_user_attributes(conn, userdn))
    conn.search(group_base, group_filter, ldap3.SUBTREE, attributes=["cn"])
    attributes["portal_groups"] = sorted(str(entry.cn) for entry in conn.entries)
    return {"name": username, "auth_state": {"ldap_groups": allowed, "user_attributes": attributes}}


def login(auth: LDAPAuthenticator, username: str, password: str, server: ldap3.Server, receive_timeout: int,
          group_base: str) -> dict[str, Any] | None:
    """Upstream's authenticate in two binds: the user's checks the password (the DN found as the portal with
    lookup_dn, upstream's resolve_username), the portal's reads the rest (portal_reads). None for a wrong password;
    AccountLocked; DirectoryError when the portal's own bind is refused."""
    if auth.lookup_dn:
        username, userdn = auth.resolve_username(username)
        if not userdn:
            return None
        templates = [userdn]
    else:
        templates = [dn.format(username=escape_rdn(username)) for dn in auth.bind_dn_template]
    outcome, start_tls = Bind.WRONG, auth.tls_strategy == TlsStrategy.before_bind
    for userdn in templates:
        outcome = user_bind(server, userdn, password, start_tls, receive_timeout)
        if outcome is not Bind.WRONG:
            break
    if outcome is Bind.LOCKED:
        raise AccountLocked(userdn)
    if outcome is Bind.WRONG:
        return None
    conn = auth.get_connection(auth.lookup_dn_search_user or None, auth.lookup_dn_search_password or None)
    if conn is None:
        raise DirectoryError(f"the portal's own bind as {auth.lookup_dn_search_user or 'anonymous'} "
                             "(ldap_search_user, ldap_search_password_file) was refused")
    try:
        return portal_reads(conn, auth, userdn, username, group_base)
    finally:
        conn.unbind()
