"""Reading the portal's settings from YAML and the environment: each type's reader, and errors that name the setting.

portal.config declares the settings; this module turns what a site wrote into their types. Every refusal names the
setting and what it accepts, and echoes at most a short prefix of the value (never a secret's).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A setting has a value that is not allowed; the message names the setting."""


# What each type of setting accepts, in the words of an error and of the README's table.
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
