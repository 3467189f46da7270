"""The shared directory's claims (deploy/local/parts/directory.py), without a slapd: who needs it, and what is refused.
Claiming it and stopping it with the last claim, with the real slapd: tests/integration/test_directory.py."""

from pathlib import Path

import pytest

from deploy.local.parts import directory
from deploy.supervise import BoxError
from portal.config import PortalConfig


def claim(root: Path, owner: Path) -> None:
    (root / "claims").mkdir(parents=True, exist_ok=True)
    directory._claim_file(root, owner).write_text(f"{owner.resolve()}\n")


def test_a_claim_whose_box_is_gone_counts_for_nothing(tmp_path):
    root, kept, gone = tmp_path / "directory", tmp_path / "box1", tmp_path / "box2"
    kept.mkdir()
    gone.mkdir()
    claim(root, kept)
    claim(root, gone)
    claim(root, kept)  # claimed twice: still one claim
    assert sorted(directory.owners(root)) == sorted([kept.resolve(), gone.resolve()])  # in the claims' order
    gone.rmdir()  # its state dir removed, not stopped
    assert directory.owners(root) == [kept.resolve()]
    assert len(list((root / "claims").iterdir())) == 1  # the stale claim is removed


def test_release_without_a_directory_and_a_box_that_is_the_directory(tmp_path):
    assert directory.release(tmp_path / "none", tmp_path) == "slapd: not running"
    with pytest.raises(BoxError, match="directory_dir is .*the box's own state dir"):
        directory.acquire(PortalConfig(state_dir=tmp_path, directory_dir=tmp_path), tmp_path, lambda lay: "")


def test_the_directory_has_a_place_of_its_own(tmp_path):
    lay = directory.place(PortalConfig(state_dir=tmp_path / "box", directory_dir=tmp_path / "dir"))
    assert (lay.ldap, lay.tls, lay.pid_file("slapd")) == (tmp_path / "dir" / "ldap", tmp_path / "dir" / "tls",
                                                         tmp_path / "dir" / "run" / "slapd.pid")
    assert PortalConfig(directory_dir=tmp_path / "dir").ca_file == tmp_path / "dir" / "tls" / "ca.pem"
