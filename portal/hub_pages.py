"""The hub's spawn page, made to decode what it is sent strictly.

JupyterHub's SpawnHandler decodes every form and query value with `bytes.decode('utf8')` before the spawner sees
it, outside its own error handling, so one byte that is not UTF-8 was a 500. This subclass checks the bytes first,
with the same rule as every other surface (`portal.inputs.decode`), and answers a 400 naming the field. It is
registered through the authenticator's `get_handlers`, the one hook whose routes come before the hub's own.
"""

from __future__ import annotations

from jupyterhub.handlers.pages import SpawnHandler
from tornado import web

from portal.inputs import InputError, decode

SPAWN_ROUTES = (r"/spawn", r"/spawn/([^/]+)", r"/spawn/([^/]+)/([^/]+)")  # the hub's own spawn routes


def check_utf8(*arguments: dict[str, list[bytes]]) -> None:
    """Every value of tornado's query or body arguments is UTF-8, or an InputError names its field."""
    for args in arguments:
        for name, values in args.items():
            for value in values:
                decode(value, name)


class StrictSpawnHandler(SpawnHandler):
    async def prepare(self) -> None:
        await super().prepare()  # who is asking first: a visitor who is not logged in is sent to the login page
        if self._finished:
            return
        try:
            check_utf8(self.request.query_arguments, self.request.body_arguments)
        except InputError as err:
            exc = web.HTTPError(400, "%s", str(err))
            exc.jupyterhub_message = str(err)  # the hub's error page shows this line as it is
            raise exc from None


def spawn_handlers() -> list[tuple[str, type]]:
    return [(route, StrictSpawnHandler) for route in SPAWN_ROUTES]
