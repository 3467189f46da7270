"""The dashboard's HubOAuth, with a state cookie of its own for every login.

HubOAuth (JupyterHub 6.1.1) names a login's state cookie at random only when one is set already, so two logins begun
at the same moment in one browser both took the plain name, and the first to come back was refused: 403 "oauth state
does not match". A page of the portal opened from JupyterLab, while the lab's idle-GPU notice
(deploy/jupyterlab/gpu-notice) passed the dashboard's login in the background, did just that (the test box's browser
journey, 2026-12-05). Here every login takes the random name, which its state carries to the callback.
"""

from __future__ import annotations

import logging
from typing import Any

from jupyterhub.services.auth import HubOAuth
from tornado.log import app_log
from tornado.web import RequestHandler

SAID_WHEN_TAKEN = "Detected unused OAuth state cookies"  # HubOAuth's words for the random name: no news here


class _StateCookieTaken:
    """The handler as HubOAuth.set_state_cookie sees it: its plain state cookie always taken."""

    def __init__(self, handler: RequestHandler, name: str):
        self._handler, self._name = handler, name

    def get_cookie(self, name: str, *args: Any, **kwargs: Any) -> str | None:
        return "taken" if name == self._name else self._handler.get_cookie(name, *args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._handler, attr)


class _NotNews(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != SAID_WHEN_TAKEN


app_log.addFilter(_NotNews())


class PortalOAuth(HubOAuth):
    def set_state_cookie(self, handler: RequestHandler, next_url: str | None = None, *,
                         code_verifier: str | None = None) -> str:
        return super().set_state_cookie(_StateCookieTaken(handler, self.state_cookie_name), next_url,
                                        code_verifier=code_verifier)
