"""The logged-in user as the hub knows them: what every part of the dashboard is handed for a request (the board,
its mixins, the pages and the GPU watch), below all of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HubUser:
    """The logged-in user as the hub knows them (groups from LDAP; admin from the admin groups)."""

    name: str
    groups: tuple[str, ...] = ()
    admin: bool = False
    server_ready: bool = False  # their single-user server runs (TensorBoard lives there)

    @classmethod
    def from_model(cls, model: Mapping[str, Any]) -> HubUser:
        server = (model.get("servers") or {}).get("") or {}
        return cls(name=str(model["name"]), groups=tuple(sorted(model.get("groups") or ())),
                   admin=bool(model.get("admin")), server_ready=bool(server.get("ready")))
