"""What the dashboard tells a site's operators: its Prometheus endpoint (portal.service.prometheus says what it
holds and who may read it), and the Operations page, drawn from what Prometheus kept of it and of the hub's.

    GET  metrics                  Prometheus' text format; a hub token with read:metrics (per-user series: read:users)
    GET  operations[?window=6h]   the key charts, for the hub's admins (portal.service.operations_charts)
"""

from __future__ import annotations

from portal.service.base import LOGIN_REFUSED, APIHandler, PageHandler, UserError
from portal.service.hub import HubUnavailable
from portal.service.hub_user import HubUser
from portal.service.operations_charts import WINDOWS, read_charts, window_of
from portal.service.prometheus import CONTENT_TYPE, READ_SCOPE, exposition, may_read

ADMINS_ONLY = "the Operations page is for the hub's admins"
METRICS_REFUSED = (f"the portal's metrics need a hub token with the {READ_SCOPE} scope (the hub's own for "
                   "/hub/metrics; docs/operations.md)")


class MetricsHandler(APIHandler):
    per_user = False

    async def prepare(self) -> None:
        """Not APIHandler's: the reader is often a service (a site's Prometheus), not a hub user with a rate."""
        identity = await self.identify()
        if not identity:
            raise UserError(403, LOGIN_REFUSED)
        allowed, self.per_user = may_read(identity)
        if not allowed:
            raise UserError(403, METRICS_REFUSED)

    async def get(self) -> None:
        try:  # each user's groups, for the per-group series; a hub that does not answer: every user in "none"
            roster = await self.directory.roster()
        except HubUnavailable:
            roster = {}
        groups = {name: HubUser.from_model(model).groups for name, model in roster.items()}
        body = await self.blocking(exposition, self.board.cfg, self.settings["gpu_readings"], self.cluster.snapshot,
                                   groups, self.per_user)
        self.set_header("Content-Type", CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


class OperationsPageHandler(PageHandler):
    async def get(self) -> None:
        if not self.hub_user.admin:
            raise UserError(403, ADMINS_ONLY)
        try:
            window = window_of(self.get_query_argument("window", None))
        except ValueError as err:
            raise UserError(400, str(err), field="window") from None
        drawn = await self.blocking(read_charts, self.board.cfg, window)
        self.render_page("operations.html", window=window[0], windows=[w[0] for w in WINDOWS], **drawn)
