"""``python -m portal.config``: every setting with its type, default, current value and where that value came from;
then the hub's own settings (traits of the portal's hub classes, set in jupyterhub_config.py) with their defaults.

    python -m portal.config             # the listing, as load() reads this environment
    python -m portal.config --changed   # only the settings a site has set (YAML file or environment)
    python -m portal.config --json      # the settings, for a program
    python -m portal.config --markdown  # docs/configuration.md (tests/unit/portal/test_config.py keeps them equal)

Secrets (PortalConfig fields marked secret, such as ldap_search_password) are shown as "(set)" or "(empty)", never
their value.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from portal.config import ConfigError, PortalConfig, load
from portal.config_values import ACCEPTS, RENAMED, default_of
from portal.traits import nearest_defaults, ties_of

# The field types in a reader's words (docs/configuration.md's "Type" column).
TYPE_NAMES = {"int": "int", "bool": "bool", "str": "text", "Path": "path", "tuple[str, ...]": "list",
              "Mapping[str, int]": "group=N map"}
# DSPORTAL_* variables that are not settings but are read elsewhere (tests, the boxes): never "did you mean".
NOT_SETTINGS = ("DSPORTAL_CONFIG", "DSPORTAL_TEST_")
# The portal's hub classes, whose own traits are the hub's settings. Named, not imported here: spawners import
# portal.config, never the reverse; `hub_classes` imports them when a listing asks (python -m portal.config).
HUB_CLASSES = ("portal.auth:PortalLDAPAuthenticator", "spawners.slurm:PortalSlurmSpawner",
               "spawners.slurm_state:SlurmStateSpawner", "spawners.kubernetes:PortalKubeSpawner")
OURS = ("portal.", "spawners.")  # the modules whose classes' traits are listed (not those of their parents)
TRAIT_TYPES = {"Int": "int", "Integer": "int", "Float": "float", "Unicode": "text", "Bool": "bool", "List": "list",
               "Dict": "dict", "Set": "set", "Tuple": "tuple"}
COMPUTED = "computed (see its help)"  # a trait whose default is a function of other values
HUB_HEADING = "Hub settings (set in jupyterhub_config.py as c.<Class>.<name>)"


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
    for f in (f for _, fields in sections() for f in fields):
        secret = f.metadata["secret"]
        rows.append({"name": f.name, "type": TYPE_NAMES[str(f.type)], "default": shown(default_of(f), secret),
                     "value": shown(getattr(cfg, f.name), secret), "source": sources[f.name],
                     "help": f.metadata["help"]})
    return rows


def sections() -> list[tuple[type, list[dataclasses.Field]]]:
    """The settings by the class that declares them: PortalConfig's own first, then each section it inherits
    (each scheduler's: portal.scheduler.<name>.settings; portal.config_gpus), in the order written."""
    parts = [PortalConfig, *(c for c in PortalConfig.__mro__[1:] if dataclasses.is_dataclass(c))]
    return [(part, [f for f in dataclasses.fields(PortalConfig) if f.name in vars(part).get("__annotations__", {})])
            for part in parts]


def markdown_table() -> str:
    """docs/configuration.md's tables of settings (one per section): name, type, default, what it is."""
    out = []
    for part, fields in sections():
        if part is not PortalConfig:
            out += ["", f"### {part.__doc__}", ""]
        out += ["| Setting | Type | Default | What it is |", "| --- | --- | --- | --- |"]
        for f in fields:
            default = shown(default_of(f), f.metadata["secret"]).replace("|", r"\|")
            doc = f.metadata["help"].replace("|", r"\|")
            out.append(f"| `{f.name}` | {TYPE_NAMES[str(f.type)]} | `{default}` | {doc} |")
    return "\n".join(out) + "\n"


def hub_classes() -> list[type]:
    """The portal's hub classes (HUB_CLASSES), imported only when a listing asks for them: the spawners import
    portal.config (the arrows point spawners -> portal), and they bring ldapauthenticator, batchspawner and
    kubespawner, which reading the settings does not need."""
    found = []
    for name in HUB_CLASSES:
        module, _, attribute = name.partition(":")
        found.append(getattr(importlib.import_module(module), attribute))
    return found


def _one_line(text: str) -> str:
    return " ".join(text.split())


def hub_settings(classes: Sequence[type]) -> list[dict[str, str]]:
    """One row per trait that one of the portal's own classes defines with config=True and that is not a portal
    setting (those are `hub_ties`): where to set it, type, default, help."""
    rows: dict[str, dict[str, str]] = {}
    for cls in classes:
        tied, dynamic = ties_of(cls), nearest_defaults(cls)
        for owner in cls.__mro__:
            if not owner.__module__.startswith(OURS) or not hasattr(owner, "class_own_traits"):
                continue
            for name, trait in sorted(owner.class_own_traits(config=True).items()):
                key = f"c.{owner.__name__}.{name}"
                if name in tied or key in rows:
                    continue
                default = COMPUTED if name in dynamic else repr(trait.default_value)
                rows[key] = {"name": key, "type": TRAIT_TYPES.get(type(trait).__name__, type(trait).__name__),
                             "default": default, "help": _one_line(trait.help)}
    return list(rows.values())


def hub_ties(classes: Sequence[type]) -> list[dict[str, str]]:
    """One row per trait of the hub's classes whose value is a portal setting (portal.traits): the trait, as the
    class that defines it names it, and the setting(s) it is read from."""
    rows: dict[str, dict[str, str]] = {}
    for cls in classes:
        traits = cls.class_traits()
        for name, tie in sorted(ties_of(cls).items()):
            key = f"c.{traits[name].this_class.__name__}.{name}"
            rows.setdefault(key, {"name": key, "settings": ", ".join(tie.settings)})
    return sorted(rows.values(), key=lambda row: row["name"])


def listing(rows: Sequence[dict[str, str]]) -> str:
    """The rows for a person: a line per setting, its help indented under it."""
    out = []
    for row in rows:
        where = row["source"] if row["source"] == "default" else f"{row['source']}; default {row['default']}"
        out.append(f"{row['name']} ({row['type']}) = {row['value']}    [{where}]")
        out.extend(textwrap.wrap(row["help"], 116, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(out) + "\n"


def hub_listing(classes: Sequence[type]) -> str:
    """The hub's settings for a person, after the portal's: the traits read from settings, then the hub's own."""
    out = ["", "# Hub traits that are the settings above (set the setting; another value here stops the hub):"]
    out += [f"{row['name']}  <-  {row['settings']}" for row in hub_ties(classes)]
    out += ["", f"# {HUB_HEADING}:"]
    for row in hub_settings(classes):
        out.append(f"{row['name']} ({row['type']}) = {row['default']}")
        out.extend(textwrap.wrap(row["help"], 116, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


def _code(default: str) -> str:
    return default if default == COMPUTED else f"`{_cell(default)}`"


def markdown_page() -> str:
    """docs/configuration.md, whole: how to set values, the settings, and the hub's settings."""
    classes = hub_classes()
    types = "\n".join(f"- `{TYPE_NAMES[kind]}`: {ACCEPTS[kind]}" for kind in TYPE_NAMES)
    renamed = ", ".join(f"`{old}` is now `{new}`" for old, new in RENAMED.items())
    ties = ["| Trait | Read from the setting(s) |", "| --- | --- |"]
    ties += [f"| `{row['name']}` | {', '.join(f'`{s}`' for s in row['settings'].split(', '))} |"
             for row in hub_ties(classes)]
    hub = ["| Trait | Type | Default | What it is |", "| --- | --- | --- | --- |"]
    hub += [f"| `{row['name']}` | {row['type']} | {_code(row['default'])} | {_cell(row['help'])} |"
            for row in hub_settings(classes)]
    return PAGE.format(types=types, renamed=renamed, settings=markdown_table().rstrip("\n"),
                       ties="\n".join(ties), hub="\n".join(hub), heading=HUB_HEADING.replace("c.<Class>.<name>",
                                                                                        "`c.<Class>.<name>`"))


PAGE = """# Configuration

<!-- Generated by `python -m portal.config --markdown` from portal/config/__init__.py and the portal's hub classes:
change those, then run it again (tests/unit/portal/test_config.py checks that this page is what it prints). -->

Every setting of the portal is in one typed place, `PortalConfig` in `portal/config/__init__.py`, with its help text.
The defaults are the local demo's (the cluster in a box on 127.0.0.1): a site sets only what differs. The hub, the
dashboard, `portal.scheduler.slurm.accounts`, the jobs and the notebooks all read the same settings.

## How to set a value

- In a YAML file named by the environment variable `DSPORTAL_CONFIG`:

  ```yaml
  ldap_host: ldap.example.org
  ldap_tls: ldaps
  allowed_groups: [datascientists, portal-admins]
  gpu_quota: {{gpu-users: 4, gpu-power: 8}}
  ```

- As environment variables `DSPORTAL_<SETTING>` (the name in upper case), which win over the file:
  `DSPORTAL_LDAP_HOST=ldap.example.org`, `DSPORTAL_ALLOWED_GROUPS=datascientists,portal-admins`,
  `DSPORTAL_GPU_QUOTA=gpu-users=4,gpu-power=8`.

What each type accepts:

{types}

An unknown name in the file is refused, with the closest names; a value that is not allowed is refused with the
setting's name, what it accepts and where the value was set. The hub passes its `DSPORTAL_*` variables on to the
dashboard. `python -m portal.config` lists every setting with its current value and where that value came from
(`--changed`: only what a site set; `--json`: for a program).

Renamed settings keep working under their old names, in the file and in the environment, with a deprecation
warning: {renamed}. Setting both names to different values is an error.

## Settings

{settings}

## Hub traits that are settings

These traits of the hub's classes take their values from the settings above, which the rest of the portal reads
too. Set the setting, not the trait: a different value for the trait in `jupyterhub_config.py` (or on the hub's
command line) stops the hub at startup, with a message that names the trait and the setting; the setting's own
value is accepted.

{ties}

## {heading}

What only the hub uses: the traits that the portal's own hub classes define (those of their parents are
documented by JupyterHub, ldapauthenticator, batchspawner and KubeSpawner). For example
`c.PortalLDAPAuthenticator.failed_login_limit_per_user_client = 10`.

{hub}
"""


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
    what.add_argument("--markdown", action="store_true", help="print docs/configuration.md (the defaults)")
    what.add_argument("--json", action="store_true", help="print the settings as a JSON list")
    parser.add_argument("--changed", action="store_true", help="only the settings that are not at their default")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown_page())
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
    if not args.changed:  # the hub's own settings have no value here: the hub's configuration holds them
        sys.stdout.write(hub_listing(hub_classes()))
    for note in stray_variables(env):
        print(f"# {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
