"""The site's directory (portal.records.site): imported from by the dashboard (as root) and by every user's jobs, so
trusted only when no one but root (or this process's user) can change what is there; each refusal names the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portal.records.site import SiteError, check_site_tree


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site's directory as an administrator makes it: 755 directories, 644 files (tmp_path's parents: pytest's)."""
    root = tmp_path / "site"
    (root / "ourprogram" / "templates").mkdir(parents=True)
    for name in ("ourprogram/__init__.py", "ourprogram/program.py", "ourprogram/templates/args.sh"):
        (root / name).write_text("\n")
        os.chmod(root / name, 0o644)
    for place in (root, root / "ourprogram", root / "ourprogram" / "templates"):
        os.chmod(place, 0o755)
    os.chmod(tmp_path, 0o755)
    return root


def link_to_an_open_directory(link: Path) -> None:
    """A link in the tree to a directory anyone can write: what Python imports through it is that directory's."""
    target = link.parent.parent / "open"
    target.mkdir()
    os.chmod(target, 0o777)
    link.symlink_to(target, target_is_directory=True)


def test_a_tree_only_its_owner_can_write_is_trusted(site):
    check_site_tree(str(site))


@pytest.mark.parametrize(("change", "said"), [
    (lambda site: os.chmod(site, 0o777), "site is writable by its group or others (mode 0777)"),
    (lambda site: os.chmod(site / "ourprogram" / "program.py", 0o666), "program.py is writable by its group"),
    (lambda site: os.chmod(site / "ourprogram" / "templates", 0o775), "templates is writable by its group"),
    (lambda site: os.chmod(site.parent, 0o777), "is writable by its group or others (mode 0777)"),  # above, no sticky
    (lambda site: os.chown(site / "ourprogram" / "program.py", 65534, -1), "program.py is owned by uid 65534"),
    (lambda site: (site / "elsewhere").symlink_to("/nonexistent"), "elsewhere cannot be read"),
    (lambda site: link_to_an_open_directory(site / "data"), "data is writable by its group or others"),
])
def test_a_tree_another_user_could_change_is_refused_naming_the_path(site, change, said):
    change(site)
    with pytest.raises(SiteError) as err:
        check_site_tree(str(site))
    assert said in str(err.value) and "site_python_path" in str(err.value)


def test_a_sticky_directory_above_is_trusted_as_sshd_trusts_tmp(site):
    os.chmod(site.parent, 0o1777)
    check_site_tree(str(site))


def test_what_is_not_a_directory_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SiteError, match="is not a directory"):
        check_site_tree(str(tmp_path / "file"))
    with pytest.raises(SiteError, match="cannot be read"):
        check_site_tree(str(tmp_path / "missing"))
