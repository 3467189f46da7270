"""The portal's MLflow server through the dashboard, as the logged-in hub user (docs/mlflow.md): a request to
<prefix>mlflow/<rest> goes on to <tracking URI>/<rest> with HTTP Basic of the user's own MLflow account
(portal.mlflow_accounts), so MLflow's web UI and its API answer each user with what is theirs. An admin of the hub
is an ordinary MLflow user here, with an account of their own; MLflow's admin never leaves the portal's own calls.
The server's --static-prefix is this route's path, so the UI's links, static files and ajax-api calls all come back
through here.

What goes on to MLflow: the method, the rest of the path, the query (less `token`, which the hub reads as an API
token: HubAuth.get_token), the body as received (at most portal.service.app.MAX_BODY_SIZE: tornado reads no more),
and only the request headers MLflow's UI and clients use (FORWARDED, X-MLflow-*). Never Cookie or Authorization
(the hub's login and tokens are the dashboard's), nor the dashboard's XSRF token, nor Origin and Referer: MLflow's
own cross-origin check would refuse the hub's host, and this handler has checked them already (below).

What comes back: MLflow's status, its body as it arrives (an artifact is never held whole), and its headers less the
hop-by-hop ones, Set-Cookie (nothing of MLflow's belongs in the hub's cookies) and WWW-Authenticate (a browser would
prompt for an MLflow password nobody types). The dashboard's page policy would refuse the <style> elements MLflow's
UI adds as it renders, so a proxied answer carries portal.service.headers.mlflow_policy instead, or MLflow's own
policy if it sends one; MLflow's X-Frame-Options (SAMEORIGIN) replaces the dashboard's DENY likewise.

Cross-site requests. MLflow's UI sends its calls with the login cookie and without the dashboard's _xsrf, which
HubOAuth and PortalHandler.prepare ask of every cookie request a script makes. Here a cookie request passes when the
browser says it comes from a page of this site: `Sec-Fetch-Site: same-origin` (current browsers send it to https
sites and localhost; no page can set or change it), or, where it is absent (plain http), an Origin (browsers send
one with every POST, PUT, PATCH and DELETE) or else a Referer naming this site as the browser sees it (the scheme the
proxy saw, the Host). Anything else needs what the dashboard always asks: its _xsrf, or a hub API token
(`Authorization: token ...` or `Bearer`), which no other site's page can attach. Both go through check_xsrf_cookie,
the hook HubOAuth calls before it accepts a login cookie, so the UI's reads and its writes follow one rule. Pages of
this site include the users' own servers (one origin with the hub), as they do for every page of the hub.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from jupyterhub.utils import get_browser_protocol, url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httputil import HTTPHeaders, parse_response_start_line

from portal.mlflow_accounts import Account, Accounts, MlflowUnavailable
from portal.service.base import SAFE_METHODS, APIHandler, PageRendering, PortalHandler, UserError, log
from portal.service.headers import mlflow_policy

# The request headers MLflow's UI and its clients send that MLflow reads: what the answer may be (its type, its
# encoding, a part of it, a cached copy's validators) and what the body is. Everything else stays here.
FORWARDED = frozenset(("accept", "accept-encoding", "accept-language", "cache-control", "content-encoding",
                       "content-type", "if-match", "if-modified-since", "if-none-match", "if-range",
                       "if-unmodified-since", "range", "user-agent"))
FORWARDED_PREFIX = "x-mlflow-"  # the client's version, a workspace: MLflow's own headers
# RFC 9110 7.6.1: a proxy's own connection's, never passed on (and those the answer's Connection header names).
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade"))
NOT_RETURNED = HOP_BY_HOP | {"set-cookie", "www-authenticate", "server", "date"}  # Server, Date: the dashboard's
API_PATHS = ("/api/", "/ajax-api/", "/graphql")  # MLflow's JSON: the proxy's own errors in JSON there too
CONNECT_TIMEOUT_S = 5  # the server is on the hub's host or the bridge: a refused or silent port is down
REQUEST_TIMEOUT_S = 300  # a run's artifact streams through; MLflow's own calls take a second or two
NO_MLFLOW = "this portal has no MLflow server (mlflow_url is empty)"


def from_this_site(headers: HTTPHeaders, site: str) -> bool:
    """Whether the browser says the request comes from a page of `site` (scheme://host[:port] as the browser sees
    the dashboard): its Fetch Metadata where it sends them, else its Origin, else its Referer's origin."""
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site.strip().lower() == "same-origin"
    origin = headers.get("Origin") or _origin_of(headers.get("Referer", ""))
    return bool(origin) and origin.lower() == site.lower()


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def forwarded_query(query: str) -> str:
    """The query as MLflow gets it ("?..." or ""): without `token`, which the hub reads as a hub API token."""
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    if all(name != "token" for name, _ in pairs):
        return f"?{query}"  # as the client wrote it
    kept = urlencode([(name, value) for name, value in pairs if name != "token"])
    return f"?{kept}" if kept else ""


def upstream_headers(received: HTTPHeaders) -> HTTPHeaders:
    """The request's headers MLflow gets: FORWARDED and MLflow's own, nothing that identifies the hub user."""
    kept = HTTPHeaders()
    for name, value in received.get_all():
        if name.lower() in FORWARDED or name.lower().startswith(FORWARDED_PREFIX):
            kept.add(name, value)
    return kept


def returned_headers(answered: HTTPHeaders, upstream: str) -> list[tuple[str, str]]:
    """MLflow's answer's headers as the client gets them: not the hop-by-hop ones, Set-Cookie or WWW-Authenticate;
    a Location on the server's own address as a path (the same path here: the server's prefix is the route's)."""
    named = {name.strip().lower() for name in answered.get("Connection", "").split(",")}
    kept = []
    for name, value in answered.get_all():
        if name.lower() in NOT_RETURNED or name.lower() in named:
            continue
        if name.lower() == "location" and value.startswith(f"{upstream}/"):
            value = value[len(upstream):]
        kept.append((name, value))
    return kept


class MlflowProxyHandler(PortalHandler, PageRendering):
    """<prefix>mlflow and everything below it, for every method MLflow's UI and clients use."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
    checks_own_body = True  # an artifact of a few MB goes through: the app's max_body_size is the limit here

    @property
    def is_api(self) -> bool:  # type: ignore[override]  # by path: MLflow's JSON API, or its UI's pages and files
        return self.rest().startswith(API_PATHS)

    @property
    def accounts(self) -> Accounts:
        return self.settings["mlflow_accounts"]

    def rest(self) -> str:
        """The request's path below the route (as sent, still %-encoded): the path below the server's prefix."""
        return self.request.path[len(url_path_join(self.settings["service_prefix"], "mlflow")):]

    def compute_etag(self) -> None:
        return None  # MLflow's own ETag, if it sends one; tornado's of a streamed body would be of its last chunk

    async def prepare(self) -> None:
        if not self.accounts.enabled:
            raise UserError(404, NO_MLFLOW)
        await super().prepare()

    def check_xsrf_cookie(self) -> None:
        """A cookie request from a page of this site (MLflow's UI) passes; any other needs what the dashboard asks
        (the _xsrf token, or a hub API token): module docstring."""
        if from_this_site(self.request.headers, f"{get_browser_protocol(self.request)}://{self.request.host}"):
            return
        super().check_xsrf_cookie()

    async def get(self, *_: str) -> None:
        rest = self.rest()
        if not rest and self.request.method in SAFE_METHODS:  # the UI's relative links need the trailing slash
            self.redirect(self.request.path + "/" + (f"?{self.request.query}" if self.request.query else ""))
            return
        if any(part in (".", "..") for part in unquote(rest).split("/")):
            raise UserError(400, f"the path {rest!r} has a . or .. segment; allowed: a path below "
                                 f"{url_path_join(self.settings['service_prefix'], 'mlflow')}/ without them", "path")
        account = await self.blocking(self.accounts.account, self.hub_user.name)  # made the first time: blocks
        status = await self.relay(account, account.tracking_uri + rest + forwarded_query(self.request.query))
        if self.request.method not in SAFE_METHODS or status >= 400:
            log.log(logging.WARNING if status >= 500 else logging.INFO, "MLflow: %s %s for %s: %d",
                    self.request.method, self.request.path, self.hub_user.name, status)

    head = post = put = patch = delete = get

    async def relay(self, account: Account, url: str) -> int:
        """MLflow's answer to this request, as `account`, streamed to the client; MLflow's status.
        MlflowUnavailable when MLflow does not answer."""
        lines: list[str] = []
        started = False

        def header_line(line: str) -> None:  # the status line, each header, then an empty line
            if line.strip():
                lines.append(line)
                return
            start = parse_response_start_line(lines[0].strip())
            self.set_status(start.code, start.reason or None)
            self.clear_header("Content-Type")  # tornado's default; MLflow's own, or none
            self.set_header("Content-Security-Policy", mlflow_policy(self.settings["hub_base_url"]))
            seen: set[str] = set()
            for name, value in returned_headers(HTTPHeaders.parse("".join(lines[1:])), _origin_of(url)):
                (self.add_header if name.lower() in seen else self.set_header)(name, value)
                seen.add(name.lower())

        def chunk(data: bytes) -> None:
            nonlocal started
            started = True
            self.write(data)
            self.flush()  # on to the client now; a closed connection's write fails quietly (tornado)

        request = HTTPRequest(
            url, method=self.request.method, headers=upstream_headers(self.request.headers),
            body=self.request.body if self.request.body or self.request.method in ("POST", "PUT", "PATCH") else None,
            auth_username=account.username, auth_password=account.password, auth_mode="basic",
            follow_redirects=False, decompress_response=False, allow_nonstandard_methods=True,
            connect_timeout=CONNECT_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S,
            header_callback=header_line, streaming_callback=chunk)
        client = AsyncHTTPClient(force_instance=True)  # its own: a long download never queues the hub's logins
        try:
            response = await client.fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as err:
            if started:  # the client has MLflow's status already: the connection ends short of the length
                log.warning("MLflow: %s %s for %s: the answer broke off: %s", self.request.method,
                            self.request.path, self.hub_user.name, err)
                raise
            raise MlflowUnavailable(f"the MLflow server at {account.tracking_uri} did not answer: {err}") from None
        finally:
            client.close()
        return response.code

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The proxy's own refusals and failures: JSON under MLflow's API paths, the portal's page elsewhere."""
        if self.is_api:
            APIHandler.write_error(self, status_code, **kwargs)  # the API's JSON error, from this handler
        else:
            PageRendering.write_error(self, status_code, **kwargs)
