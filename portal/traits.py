"""The hub's traits whose value is a portal setting, and the check that keeps each such value in one place.

Some traits of the hub's classes mean what a portal setting means: the authenticator's `server_address` is
`ldap_host`, a spawner's `start_timeout` is `start_timeout`, KubeSpawner's `image` is `k8s_image`. portal.config is
their one source, because the rest of the portal (`portal.accounts`' sync, the dashboard, the jobs) reads the
settings, never the hub's traits:
- `portal_default` makes the setting the trait's value (each class with such traits has a `portal` trait holding
  the settings);
- `config_conflicts` finds a value that the hub's configuration (jupyterhub_config.py, a chart's extra config, the
  command line) gives such a trait and that differs from the setting: the hub refuses to start on one
  (`portal.auth`), naming the trait and the setting to set instead. The setting's own value is allowed (it changes
  nothing: Zero-to-JupyterHub, for one, sets `c.KubeSpawner.image` from its values).
`fixed_default` is the portal's own default for a trait that no setting describes: a site may change it.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from traitlets import HasTraits, default
from traitlets.config import Config
from traitlets.config.loader import DeferredConfig, LazyConfigValue
from traitlets.traitlets import DefaultHandler, TraitType

from portal.config import PortalConfig

SECRETS = frozenset(f.name for f in dataclasses.fields(PortalConfig) if f.metadata["secret"])


@dataclass(frozen=True)
class Tie:
    """A hub trait whose value is the portal's: `settings` name what a site sets instead, `read` gives the value."""

    trait: str
    settings: tuple[str, ...]
    read: Callable[[PortalConfig], Any]

    @property
    def secret(self) -> bool:
        return any(name in SECRETS for name in self.settings)

    def shown(self, value: Any) -> str:
        text = repr(value)
        return "(hidden)" if self.secret else text if len(text) <= 200 else text[:197] + "..."


class PortalDefault(DefaultHandler):
    """A trait's default that is a portal setting, and the only value the hub's configuration may give it."""

    def __init__(self, tie: Tie):
        super().__init__(tie.trait)
        self.tie = tie
        self.func = lambda obj: tie.read(obj.portal)


def portal_default(trait: str, setting: str, *also: str,
                   read: Callable[[PortalConfig], Any] | None = None) -> PortalDefault:
    """The trait's value is the setting's (of the object's `portal` trait). `also`: further settings the value is
    computed from by `read` (default: the setting itself); all are named when a site's value differs."""
    return PortalDefault(Tie(trait, (setting, *also), read or attrgetter(setting)))


def fixed_default(trait: str, value: Any) -> DefaultHandler:
    """A trait's default as the portal runs it (a copy each time: lists and dicts are per object)."""
    return default(trait)(lambda obj: copy.deepcopy(value))


def nearest_defaults(cls: type[HasTraits]) -> dict[str, Any]:
    """Each trait's dynamic default as the class resolves it (the nearest in the MRO): a `@default` handler, or an
    old-style `_<trait>_default` method. Traits not named here have a static default."""
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        for attribute, value in vars(klass).items():
            if isinstance(value, DefaultHandler):
                found.setdefault(value.trait_name, value)
            elif attribute.startswith("_") and attribute.endswith("_default") and callable(value):
                found.setdefault(attribute[1:-len("_default")], value)
    return found


def ties_of(cls: type[HasTraits]) -> dict[str, Tie]:
    """The class's traits whose value is a setting: those whose nearest default is a `portal_default`."""
    return {name: handler.tie for name, handler in nearest_defaults(cls).items() if isinstance(handler, PortalDefault)}


def _configured(raw: Any, trait: TraitType | None, initial: Any) -> Any:
    """The value a config entry gives the trait: `c.X.a.append(...)` and command-line strings resolved."""
    if isinstance(raw, LazyConfigValue):
        return raw.get_value(copy.deepcopy(initial))
    if isinstance(raw, DeferredConfig) and trait is not None:
        return raw.get_value(trait)
    return raw


def _same(value: Any, expected: Any) -> bool:
    """Whether the configured value is the setting's, as the trait would read it (an enum by name, one string
    for a list of one, a tuple for a list)."""
    if value == expected:
        return True
    if isinstance(expected, enum.Enum):
        return value in (expected.name, expected.value)
    if isinstance(expected, list) and isinstance(value, str | tuple):
        return (list(value) if isinstance(value, tuple) else [value]) == expected
    return False


def config_conflicts(config: Config, sections: Sequence[str], ties: Iterable[Tie], portal: PortalConfig,
                     traits: Mapping[str, TraitType] | None = None) -> list[str]:
    """What `config` gives a tied trait that differs from its setting: one message per trait, naming it and the
    setting(s) to set instead. `sections`: the config sections of the class, least specific first (as
    `Configurable.section_names()` lists them); `traits`: the class's traits, to read command-line values."""
    found = []
    for tie in ties:
        given = [section for section in sections if section in config and tie.trait in config[section]]
        if not given:
            continue
        merged = Config()
        for section in given:  # the most specific section wins, as when traitlets loads the config
            merged.merge(Config({tie.trait: config[section][tie.trait]}))
        expected = tie.read(portal)
        value = _configured(merged[tie.trait], (traits or {}).get(tie.trait), expected)
        if not _same(value, expected):
            found.append(_conflict(f"c.{given[-1]}.{tie.trait}", tie, value, expected))
    return found


def class_conflicts(config: Config, cls: type, portal: PortalConfig) -> list[str]:
    """`config_conflicts` for the `portal_default` traits of a Configurable class."""
    return config_conflicts(config, cls.section_names(), ties_of(cls).values(), portal, cls.class_traits())


def _conflict(where: str, tie: Tie, value: Any, expected: Any) -> str:
    if len(tie.settings) == 1:
        setting, to_set = f"setting {tie.settings[0]} gives", f"{tie.settings[0]} (DSPORTAL_{tie.settings[0].upper()}"
    else:
        setting = f"settings {', '.join(tie.settings)} give"
        to_set = f"{', '.join(tie.settings[:-1])} or {tie.settings[-1]} (DSPORTAL_<NAME>"
    return (f"{where} is {tie.shown(value)} in the hub's configuration, but the portal's {setting} "
            f"{tie.shown(expected)}: the portal's settings are this value's one source (portal.accounts, the dashboard "
            f"and the jobs read them too). Set {to_set} or in the DSPORTAL_CONFIG file) and remove {where}")
