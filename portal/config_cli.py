"""``python -m portal.config``: every setting with its type, default, current value and where that value came from.

    python -m portal.config             # the listing, as load() reads this environment
    python -m portal.config --changed   # only the settings a site has set (YAML file or environment)
    python -m portal.config --json      # the same, for a program
    python -m portal.config --markdown  # the README's settings table (tests/unit/test_config.py keeps them equal)

Secrets (PortalConfig fields marked secret, such as ldap_search_password) are shown as "(set)" or "(empty)", never
their value.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from portal.config import ConfigError, PortalConfig, default_of, load

# The field types in a reader's words (the README's "Type" column).
TYPE_NAMES = {"int": "int", "bool": "bool", "str": "text", "Path": "path", "tuple[str, ...]": "list",
              "Mapping[str, int]": "group=N map"}
# DSPORTAL_* variables that are not settings but are read elsewhere (tests, the boxes): never "did you mean".
NOT_SETTINGS = ("DSPORTAL_CONFIG", "DSPORTAL_TEST_")


def shown(value: Any, secret: bool = False) -> str:
    """A value as a site would write it in the environment; a secret only as (set) or (empty)."""
    if secret:
        return "(set)" if value else "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{key}={n}" for key, n in value.items())
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value) if value != "" else '""'


def settings(cfg: PortalConfig) -> list[dict[str, str]]:
    """One row per setting: name, type, default, value, source, help (secrets hidden)."""
    sources = cfg.sources()
    rows = []
    for f in dataclasses.fields(PortalConfig):
        secret = f.metadata["secret"]
        rows.append({"name": f.name, "type": TYPE_NAMES[str(f.type)], "default": shown(default_of(f), secret),
                     "value": shown(getattr(cfg, f.name), secret), "source": sources[f.name],
                     "help": f.metadata["help"]})
    return rows


def markdown_table() -> str:
    """The README's table of settings: name, type, default, what it is."""
    lines = ["| Setting | Type | Default | What it is |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(PortalConfig):
        default = shown(default_of(f), f.metadata["secret"]).replace("|", r"\|")
        doc = f.metadata["help"].replace("|", r"\|")
        lines.append(f"| `{f.name}` | {TYPE_NAMES[str(f.type)]} | `{default}` | {doc} |")
    return "\n".join(lines) + "\n"


def listing(rows: Sequence[dict[str, str]]) -> str:
    """The rows for a person: a line per setting, its help indented under it."""
    out = []
    for row in rows:
        where = row["source"] if row["source"] == "default" else f"{row['source']}; default {row['default']}"
        out.append(f"{row['name']} ({row['type']}) = {row['value']}    [{where}]")
        out.extend(textwrap.wrap(row["help"], 116, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(out) + "\n"


def stray_variables(env: Mapping[str, str]) -> list[str]:
    """DSPORTAL_* variables that look like a misspelt setting: load() cannot refuse them (others are read
    elsewhere), so the listing points them out."""
    names = [f"DSPORTAL_{f.name.upper()}" for f in dataclasses.fields(PortalConfig)]
    notes = []
    for variable in sorted(env):
        if variable.startswith("DSPORTAL_") and variable not in names and not variable.startswith(NOT_SETTINGS):
            close = difflib.get_close_matches(variable, names, n=1, cutoff=0.85)
            if close:
                notes.append(f"{variable} is not a setting; did you mean {close[0]}?")
    return notes


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.config", description="Every setting of the portal, with "
                                     "its type, default, current value and where that value came from.")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="print the README's settings table (the defaults)")
    what.add_argument("--json", action="store_true", help="print the settings as a JSON list")
    parser.add_argument("--changed", action="store_true", help="only the settings that are not at their default")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown_table())
        return 0
    env = os.environ if env is None else env
    try:
        rows = settings(load(env))
    except ConfigError as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2
    if args.changed:
        rows = [row for row in rows if row["source"] != "default"]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    path = env.get("DSPORTAL_CONFIG")
    print(f"# {len(rows)} settings; YAML file: {Path(path) if path else 'none (DSPORTAL_CONFIG is not set)'}")
    sys.stdout.write(listing(rows))
    for note in stray_variables(env):
        print(f"# {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
