"""A user's own settings (portal.settings): read as hostile text, written whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from portal import settings
from portal.inputs import InputError
from portal.records.account import JobUser
from tests.cards import JSON_VALUES
from tests.special_files import device_link, directory, fifo, link_to


@pytest.mark.parametrize("text, job_mail, problem", [
    (None, True, ""),
    ('{"job_mail": false}', False, ""),
    ('{"job_mail": "false"}', False, ""),
    ('{"job_mail": 0}', True, "is not a boolean"),
    ('{"job_mail": false, "theme": "dark"}', True, "is not a setting; allowed: job_mail"),
    ("[false]", True, "is not a JSON object"),
    ("{", True, "the defaults apply"),
    ("x" * 5000, True, "more than the 4096 allowed"),
    ("[" * 2000 + "]" * 2000, True, "not JSON"),  # within the size, deeper than json's recursion
])
def test_the_file_is_read_as_hostile_text(text, job_mail, problem):
    found = settings.parse(text)
    assert found.job_mail is job_mail and problem in found.problem and bool(found.problem) == bool(problem)


@pytest.mark.parametrize("kind", [kind for kind in JSON_VALUES if kind != "true/false"])
def test_each_setting_of_another_type_gives_the_defaults_naming_it(kind):
    """Each field given each JSON type but its own (tests/cards.py): the defaults, and why, naming the field."""
    for field in settings.FIELDS:
        found = settings.parse(json.dumps({field: JSON_VALUES[kind]}))
        assert found == settings.Settings(problem=found.problem)
        assert found.problem.startswith(f"~/{settings.SETTINGS_FILE}: {field}: "), found.problem


def Home(home: Path) -> JobUser:  # noqa: N802 (a JobUser stands where the tests used a fake)
    """The caller as a JobUser whose home is `home`: the real bounded reader and writer, without runuser."""
    return JobUser(name="caller", uid=os.geteuid(), gid=os.getegid(), home=home, groups=())


def test_write_changes_the_given_fields_and_replaces_the_file(tmp_path):
    home = Home(tmp_path)
    target = tmp_path / settings.SETTINGS_FILE
    target.parent.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("kept")
    link_to(target, tmp_path / "elsewhere")  # replaced, never written through
    assert settings.write(home, {"job_mail": False}).job_mail is False
    assert json.loads(target.read_text()) == {"job_mail": False} and not target.is_symlink()
    assert (tmp_path / "elsewhere").read_text() == "kept"
    assert settings.read(home) == settings.Settings(job_mail=False)
    with pytest.raises(InputError, match="job_mail: 'no' is not a boolean"):
        settings.write(home, {"job_mail": "no"})
    assert settings.read(home).job_mail is False


@pytest.mark.parametrize(("kind", "said"), [("fifo", "a fifo, not a regular file"),
                                            ("directory", "a directory, not a regular file"),
                                            ("link", "a symbolic link, not a regular file")])
def test_a_settings_file_that_is_no_file_gives_the_defaults_and_says_what_it_is(tmp_path, kind, said):
    target = tmp_path / settings.SETTINGS_FILE
    target.parent.mkdir(parents=True)
    {"fifo": fifo, "directory": directory, "link": device_link}[kind](target)
    found = settings.read(Home(tmp_path))
    assert found == settings.Settings(problem=f"~/{settings.SETTINGS_FILE}: {said}; the defaults apply")
    assert settings.read(Home(tmp_path / "nobody")) == settings.Settings()  # none at all: nothing to say


def test_a_save_that_cannot_be_made_says_why(tmp_path):
    (tmp_path / ".config").mkdir()
    (tmp_path / ".config" / "dsportal").write_text("a file where the directory goes")
    with pytest.raises(settings.SettingsNotSaved, match=r"~/\.config/dsportal/settings\.json could not be saved: "
                                                        r".*(File exists|Not a directory)"):
        settings.write(Home(tmp_path), {"job_mail": False})
