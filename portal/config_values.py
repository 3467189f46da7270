"""Reading the portal's settings from YAML and the environment: each type's reader, and errors that name the setting.

portal.config declares the settings; this module turns what a site wrote into their types. Every refusal names the
setting and what it accepts, and echoes at most a short prefix of the value (never a secret's). A renamed setting's
old name (RENAMED) is read as the new one, with a deprecation warning that names the new one.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import warnings
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from portal.errors import Misconfigured

log = logging.getLogger("portal.config")

# Settings that were renamed: old name -> new name. The old name still works in the YAML file and as DSPORTAL_<OLD>.
RENAMED = {"spawner_backend": "scheduler"}


class ConfigError(Misconfigured, ValueError):
    """A setting has a value that is not allowed; the message names the setting."""


# What each type of setting accepts, in the words of an error and of docs/configuration.md.
ACCEPTS = {
    "int": "a whole number",
    "bool": "true or false (also yes/no, on/off, 1/0)",
    "str": "text",
    "Path": "a path",
    "tuple[str, ...]": "a list: [a, b] in YAML, a,b in the environment",
    "Mapping[str, int]": "group: N pairs: {group: N} in YAML, group=N,group=N in the environment",
}


def short(raw: Any) -> str:
    """At most a short prefix of what the site wrote, for an error."""
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(raw: Any) -> int:
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | str):  # YAML's `yes` is True, and int(True) is 1
        raise ValueError(raw)
    return int(raw)


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower() if isinstance(raw, int | str) else None
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _text(raw: Any) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):  # str(None) would be "None"
        raise ValueError(raw)
    return str(raw)


def _path(raw: Any) -> Path:
    if not _text(raw).strip():  # Path("") is the current directory
        raise ValueError(raw)
    return Path(_text(raw))


def _items(raw: Any) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise ValueError(raw)
    return tuple(item for item in (_text(i).strip() for i in items) if item)


def _quota(raw: Any) -> dict[str, int]:
    if isinstance(raw, str):
        pairs = [pair.split("=", 1) for pair in raw.split(",") if pair.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError(raw)
        return {group.strip(): _integer(n) for group, n in pairs}
    if not isinstance(raw, Mapping):
        raise ValueError(raw)
    return {_text(group): _integer(n) for group, n in raw.items()}


READERS = {"int": _integer, "bool": _boolean, "str": _text, "Path": _path, "tuple[str, ...]": _items,
           "Mapping[str, int]": _quota}


def _hint(raw: Any) -> str:
    if raw is None:
        return ' (YAML reads an empty value as null: write "" for empty text)'
    if isinstance(raw, bool):
        return " (YAML reads an unquoted yes, no, on or off as true or false: quote it)"
    return ""


def coerce(name: str, kind: str, raw: Any, secret: bool = False) -> Any:
    """Turn a YAML or environment value into the field's type, with an error that names the field."""
    try:
        return READERS[kind](raw)
    except (TypeError, ValueError):
        shown = "(hidden)" if secret else short(raw)
        raise ConfigError(f"{name} is {shown}; allowed: {ACCEPTS[kind]}{_hint(raw)}") from None


def _unknown(key: Any, names: Collection[str]) -> str:
    close = difflib.get_close_matches(str(key), names, n=3)
    advice = f"did you mean {' or '.join(close)}?" if close else "`python -m portal.config` lists the settings"
    return f"unknown setting {short(key)}; {advice}"


def read_yaml(path: str, names: Collection[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigError(f"DSPORTAL_CONFIG={path}: {err.strerror}") from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"DSPORTAL_CONFIG={path}: not a YAML file{where}: {getattr(err, 'problem', err)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"DSPORTAL_CONFIG={path}: expected a mapping of settings (name: value)")
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ConfigError(f"DSPORTAL_CONFIG={path}: " + "; ".join(_unknown(key, names) for key in unknown))
    return data


def default_of(setting_field: dataclasses.Field) -> Any:
    """A setting's default value."""
    if setting_field.default is not dataclasses.MISSING:
        return setting_field.default
    return setting_field.default_factory()  # type: ignore[misc]


class Given(NamedTuple):
    """One value a site wrote: the setting, what was written, where, and the name it was written under."""

    setting: str
    raw: Any
    source: str
    written_as: str


def _given(env: Mapping[str, str], names: Collection[str]) -> list[Given]:
    """What the YAML file in DSPORTAL_CONFIG, then the DSPORTAL_* variables (which win) say, in that order."""
    known = [*names, *RENAMED]
    given = []
    path = env.get("DSPORTAL_CONFIG")
    if path:
        given += [Given(RENAMED.get(name, name), raw, f"YAML file {path}", name)
                  for name, raw in read_yaml(path, known).items()]
    for name in known:
        variable = f"DSPORTAL_{name.upper()}"
        if variable in env:
            given.append(Given(RENAMED.get(name, name), env[variable], f"environment {variable}", name))
    return given


def deprecated(old: str, new: str, where: str) -> None:
    """The deprecation warning of a setting's old name: for Python (DeprecationWarning) and in the log."""
    message = (f"the setting {old} (from {where}) is deprecated: it is now called {new}; set {new} "
               f"(DSPORTAL_{new.upper()}) instead")
    warnings.warn(message, DeprecationWarning, stacklevel=4)  # at load()'s caller
    log.warning("%s", message)


def read_given(env: Mapping[str, str], fields: Mapping[str, dataclasses.Field]) -> tuple[dict, dict[str, str]]:
    """Each setting's value as the site wrote it, typed, and where it came from (the last one written wins: the
    environment over the YAML file). An old name and its new one set to different values is an error."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    as_written: dict[str, dict[str, tuple[Any, str]]] = {}
    for given in _given(env, fields):
        if given.written_as != given.setting:
            deprecated(given.written_as, given.setting, given.source)
        setting_field = fields[given.setting]
        try:
            value = coerce(given.setting, str(setting_field.type), given.raw, setting_field.metadata["secret"])
        except ConfigError as err:
            raise ConfigError(f"{err} (from {given.source})") from None
        values[given.setting], sources[given.setting] = value, given.source
        as_written.setdefault(given.setting, {})[given.written_as] = (value, given.source)
    for old, new in RENAMED.items():
        both = as_written.get(new, {})
        if old in both and new in both and both[old][0] != both[new][0]:
            raise ConfigError(f"{old} is {short(both[old][0])} (from {both[old][1]}) but {new} is "
                              f"{short(both[new][0])} (from {both[new][1]}): {old} is the old name of {new}; "
                              f"set only {new}")
    return values, sources


def said_where(message: str, sources: Mapping[str, str]) -> str:
    """A check's message, with where the setting it names was set."""
    name = re.match(r"\w*", message).group()  # every check's message starts with the setting's name
    return f"{message} (from {sources[name]})" if name in sources else message


def check_ports(settings: Any, names: Iterable[str]) -> None:
    """ConfigError naming the first of these port settings (of `settings`, a PortalConfig or one of its sections)
    outside 1-65535."""
    for name in names:
        port = getattr(settings, name)
        if not 1 <= port <= 65535:
            raise ConfigError(f"{name} is {port}; allowed: 1-65535")


def setting(default: Any, doc: str, *, secret: bool = False) -> Any:
    """A field that carries its help text (and whether its value is a secret, never to be shown) as data."""
    meta = {"help": doc, "secret": secret}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
