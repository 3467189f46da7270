"""A user's own settings (portal.settings): read as hostile text, written whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portal import settings
from portal.inputs import InputError


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


class Home:
    """A JobUser's file operations on a directory (the caller is the user)."""

    def __init__(self, home: Path):
        self.home = home

    def read_text(self, path, limit):
        return path.read_text()[:limit + 1] if path.is_file() else None

    def make_dir(self, path):
        path.mkdir(parents=True, exist_ok=True)

    def run(self, argv, input=None):
        import subprocess
        subprocess.run(argv, input=input, text=True, check=True)


def test_write_changes_the_given_fields_and_replaces_the_file(tmp_path):
    home = Home(tmp_path)
    target = tmp_path / settings.SETTINGS_FILE
    target.parent.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("kept")
    target.symlink_to(tmp_path / "elsewhere")  # replaced, never written through
    assert settings.write(home, {"job_mail": False}).job_mail is False
    assert json.loads(target.read_text()) == {"job_mail": False} and not target.is_symlink()
    assert (tmp_path / "elsewhere").read_text() == "kept"
    assert settings.read(home) == settings.Settings(job_mail=False)
    with pytest.raises(InputError, match="job_mail: 'no' is not a boolean"):
        settings.write(home, {"job_mail": "no"})
    assert settings.read(home).job_mail is False
