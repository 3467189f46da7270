"""Where the portal's own directory password comes from (portal.directory.search_password)."""

from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.directory import DirectoryError, search_password, search_password_file


def test_the_password_is_the_settings_else_its_files_first_line(tmp_path):
    secret = tmp_path / "search-password"
    secret.write_text("sesame\nanything after\n")
    assert search_password(PortalConfig(ldap_search_password_file=str(secret))) == "sesame"
    assert search_password(PortalConfig(ldap_search_password="given", ldap_search_password_file=str(secret))) == "given"
    assert search_password(PortalConfig(ldap_search_user="")) == ""  # anonymous reads: no password at all
    assert search_password_file(PortalConfig(directory_dir=tmp_path)) == tmp_path / "ldap" / "search-password"


def test_a_missing_file_names_the_setting(tmp_path):
    with pytest.raises(DirectoryError, match=r"ldap_search_password_file: .*missing cannot be read"):
        search_password(PortalConfig(ldap_search_password_file=str(tmp_path / "missing")))
    assert not Path(tmp_path / "missing").exists()
