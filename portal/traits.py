"""Trait defaults taken from the portal's settings, for the hub's classes that the portal subclasses (the
authenticator, the spawners): each has a `portal` trait holding the settings, and a site's own jupyterhub_config
value for the trait still wins over the default.
"""

from __future__ import annotations

import copy
from typing import Any

from traitlets import default
from traitlets.traitlets import DefaultHandler


def portal_default(trait: str, setting: str) -> DefaultHandler:
    """A trait's default read from the portal's settings (`portal.config`) of the object's `portal` trait."""
    return default(trait)(lambda obj: getattr(obj.portal, setting))


def fixed_default(trait: str, value: Any) -> DefaultHandler:
    """A trait's default as the portal runs it (a copy each time: lists and dicts are per object)."""
    return default(trait)(lambda obj: copy.deepcopy(value))
