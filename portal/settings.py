"""A user's own portal settings, kept in their home: `~/.config/dsportal/settings.json` by default (the
`user_settings_file` setting: clusters that share the homes share it, unless one names a file of its own).

    {"job_mail": false}    # no e-mail at my jobs' end unless a job asks for it (its `mail` field)

The file is the user's: read and written as them (runuser when the dashboard acts for them), so nothing else of
theirs is reached, and treated as hostile: a FIFO, a link elsewhere, a huge or broken file gives the defaults and
says why (`Settings.problem`), never an error that stops a submit.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from portal.errors import Untrusted
from portal.inputs import InputError, boolean, finite_json

SETTINGS_FILE = PurePosixPath(".config/dsportal/settings.json")  # the default: portal.config's user_settings_file
MAX_SETTINGS_BYTES = 4096


@dataclass(frozen=True)
class Settings:
    job_mail: bool = True  # a job's `mail` when it does not say
    problem: str = ""  # why the file was not read ("" when it was, or is not there)

    def to_dict(self) -> dict[str, Any]:
        return {"job_mail": self.job_mail}


FIELDS = tuple(name for name in Settings().to_dict())


def parse(text: str | None, where: PurePosixPath | str = SETTINGS_FILE) -> Settings:
    """The settings in the file's text (None: no file, or one the user cannot read); `where`: the file, relative
    to the home, for the reason given when it is not read."""
    if text is None:
        return Settings()
    try:  # bounded, and no NaN, nor nesting deep enough to end json's recursion
        given = finite_json(text, MAX_SETTINGS_BYTES)
        if not isinstance(given, dict):
            raise InputError("settings", "is not a JSON object")
        return Settings(**updates(given))
    except (ValueError, InputError) as err:
        return Settings(problem=f"~/{where}: {err}; the defaults apply")


def updates(given: dict[str, Any]) -> dict[str, Any]:
    """Checked values of the fields in `given`; InputError naming the first field that is not allowed."""
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InputError(str(unknown[0])[:40], f"is not a setting; allowed: {', '.join(FIELDS)}")
    return {name: boolean(value, name) for name, value in given.items()}


class SettingsNotSaved(Untrusted):
    """The user's settings file could not be written (a directory they cannot write, a link, a full disk): why."""

    field = "settings"


def read(who: Any, where: PurePosixPath | str = SETTINGS_FILE) -> Settings:
    """`who`'s settings (a portal.records.account.JobUser), read as them from `where` in their home: the defaults,
    saying why, when the file is there but is not a regular file or cannot be read."""
    text, why = who.read_text_why(who.home / where, MAX_SETTINGS_BYTES)
    if why:
        return Settings(problem=f"~/{where}: {why}; the defaults apply")
    return parse(text, where)


def write(who: Any, given: dict[str, Any], where: PurePosixPath | str = SETTINGS_FILE) -> Settings:
    """Change the fields in `given` (checked: InputError naming the field) and save them to `where` in `who`'s
    home; the settings now."""
    now = replace(read(who, where), **updates(given), problem="")
    path = who.home / where
    try:
        who.make_dir(path.parent)  # mkdir -p, mode 0700
        # A new file renamed over the old one: whatever was there (a FIFO, a link) is replaced, never written through.
        who.run(["/bin/sh", "-c", 'new=$(mktemp "$1.XXXXXX") && cat > "$new" && mv -f -- "$new" "$1"', "sh",
                 str(path)], input=json.dumps(now.to_dict(), indent=1) + "\n")
    except subprocess.CalledProcessError as err:
        said = (err.stderr or "").strip().splitlines()[-1:] or [f"exit status {err.returncode}"]
        raise SettingsNotSaved(f"~/{where} could not be saved: {said[0][:200]}") from None
    return now
