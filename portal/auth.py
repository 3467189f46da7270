"""LDAP login through jupyterhub-ldapauthenticator, with the gaps its users hit closed here.

- The directory's certificate is verified against the configured CA (the upstream default does not verify).
- `allowed_groups` always applies: `allow_all`, which silently disables it, is refused.
- Usernames are normalised (trimmed, lower case) and must be safe Unix names before anything reaches LDAP, so
  filter or DN injection (`*)(uid=*`, `alice,ou=x`) never gets that far; empty passwords never bind.
- All of the user's groups (not only the allowed ones) become JupyterHub groups, which drive the admin flag
  and the GPU quota.
- A directory that is down or untrusted gives the login page a message instead of a traceback, and a slow
  directory cannot stall the hub: LDAP runs in a worker thread with a time limit.
"""

from __future__ import annotations

import asyncio
import re
import ssl

import ldap3
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars
from ldapauthenticator import LDAPAuthenticator
from ldapauthenticator.ldapauthenticator import TlsStrategy
from tornado import web
from traitlets import Instance, TraitError, Unicode, default, validate

from portal.config import PortalConfig, load

DIRECTORY_UNAVAILABLE = (
    "The directory service (LDAP) is unavailable, so nobody can log in right now. "
    "Try again in a few minutes; if it lasts, tell your administrator."
)
TLS_STRATEGIES = {"starttls": TlsStrategy.before_bind, "ldaps": TlsStrategy.on_connect, "none": TlsStrategy.insecure}


class PortalLDAPAuthenticator(LDAPAuthenticator):
    """LDAPAuthenticator configured from portal.config, verifying TLS and reporting every group."""

    portal = Instance(PortalConfig, help="The portal's settings (portal.config).")

    @default("portal")
    def _portal_default(self) -> PortalConfig:
        return load()

    username_pattern = Unicode(
        r"^[a-z_][a-z0-9_-]{0,31}$", config=True,
        help="Login names must match this after trimming and lower-casing: a safe Unix user name.",
    )

    @default("valid_username_regex")
    def _valid_username_regex_default(self) -> str:
        return self.username_pattern

    @default("server_address")
    def _server_address_default(self) -> str:
        return self.portal.ldap_host

    @default("server_port")
    def _server_port_default(self) -> int:
        return self.portal.ldap_server_port

    @default("tls_strategy")
    def _tls_strategy_default(self) -> TlsStrategy:
        return TLS_STRATEGIES[self.portal.ldap_tls]

    @default("tls_kwargs")
    def _tls_kwargs_default(self) -> dict:
        return {"ca_certs_file": str(self.portal.ca_file), "validate": ssl.CERT_REQUIRED}

    @default("bind_dn_template")
    def _bind_dn_template_default(self) -> list[str]:
        return [] if self.portal.ldap_lookup_dn else [self.portal.ldap_bind_dn_template]

    @default("lookup_dn")
    def _lookup_dn_default(self) -> bool:
        return self.portal.ldap_lookup_dn

    @default("user_search_base")
    def _user_search_base_default(self) -> str:
        return self.portal.ldap_user_search_base

    @default("user_attribute")
    def _user_attribute_default(self) -> str:
        return self.portal.ldap_user_attribute

    @default("lookup_dn_search_user")
    def _search_user_default(self) -> str:
        return self.portal.ldap_search_user

    @default("lookup_dn_search_password")
    def _search_password_default(self) -> str:
        return self.portal.ldap_search_password

    @default("allowed_groups")
    def _allowed_groups_default(self) -> list[str]:
        return [self.portal.group_dn(g) for g in self.portal.allowed_groups]

    @default("manage_groups")
    def _manage_groups_default(self) -> bool:
        return True

    @validate("allow_all")
    def _refuse_allow_all(self, proposal):
        if proposal["value"]:
            raise TraitError("allow_all would let every directory user in and ignore allowed_groups; "
                             "list the groups that may log in in allowed_groups instead")
        return proposal["value"]

    @validate("tls_kwargs")
    def _require_verification(self, proposal):
        if self.portal.ldap_tls != "none" and proposal["value"].get("validate", ssl.CERT_NONE) == ssl.CERT_NONE:
            raise TraitError("tls_kwargs must verify the directory's certificate (validate=ssl.CERT_REQUIRED); "
                             "set ldap_tls=none to talk to a directory without TLS at all")
        return proposal["value"]

    def normalize_username(self, username: str) -> str:
        return username.strip().lower()

    async def authenticate(self, handler, data):
        username = self.normalize_username(data.get("username") or "")
        password = data.get("password") or ""
        if not re.match(self.username_pattern, username):
            self.log.warning("Login refused: the name %r is not a valid user name", username[:64])
            return None
        if not password.strip():
            self.log.warning("Login refused for %s: empty password", username)
            return None
        parent = super().authenticate
        try:
            # ldap3 blocks: run it beside the hub's event loop, and give up on a directory that does not answer.
            result = await asyncio.wait_for(
                asyncio.to_thread(asyncio.run, parent(handler, {"username": username, "password": password})),
                timeout=self.portal.ldap_timeout,
            )
        except (TimeoutError, LDAPException, OSError) as err:
            self.log.error("LDAP at %s:%s failed for %s: %s: %s", self.server_address, self.server_port,
                           username, type(err).__name__, err)
            raise web.HTTPError(503, DIRECTORY_UNAVAILABLE) from None
        if result is None:
            return None
        groups = result["auth_state"]["user_attributes"].pop("portal_groups", [])
        result["groups"] = groups
        result["admin"] = self.portal.is_admin(groups)
        return result

    def get_user_attributes(self, conn: ldap3.Connection, userdn: str) -> dict:
        """The upstream hook, bound as the user: add the names of every group the user is in."""
        attributes = dict(super().get_user_attributes(conn, userdn))
        uid = userdn.split(",", 1)[0].split("=", 1)[1]
        conn.search(
            search_base=self.portal.ldap_group_search_base,
            search_scope=ldap3.SUBTREE,
            search_filter=self.group_search_filter.format(
                userdn=escape_filter_chars(userdn), uid=escape_filter_chars(uid)),
            attributes=["cn"],
        )
        attributes["portal_groups"] = sorted(str(entry.cn) for entry in conn.entries)
        return attributes
