"""The box's own exim4: its configuration, written from the settings, and its line in exim's list of trusted
configurations (a list file in a temporary directory here; no exim is started)."""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

import pytest

from deploy.local.parts.exim_trust import MADE_BY, TRUSTED_CONFIGS, register, unregister, with_line, without_line
from deploy.local.parts.mail import check_root_only, ensure_mail_dir, exim_config
from deploy.supervise import BoxError

USERS_BOX = exim_config(2525, Path("/var/lib/dsportal"), Path("/var/mail"))
TESTS_BOX = exim_config(12525, Path("/var/tmp/dsportal-test"), Path("/var/tmp/dsportal-test/mail"))


@pytest.fixture
def root_only():
    """The test makes root-owned directories, as the box does: as anyone else it fails, saying so."""
    assert os.geteuid() == 0, "this test makes root-owned directories, as the box does: run the tests as root"


def setting(text: str, name: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith(f"{name} = ")]
    return line.split(" = ", 1)[1]


def test_each_box_listens_on_its_own_port_only():
    assert setting(USERS_BOX, "local_interfaces") == "<; 127.0.0.1.2525"
    assert setting(TESTS_BOX, "local_interfaces") == "<; 127.0.0.1.12525"


def test_each_box_delivers_to_its_own_mail_dir_and_keeps_its_own_queue_and_logs():
    assert "  file = /var/mail/$local_part_data" in USERS_BOX
    assert "  file = /var/tmp/dsportal-test/mail/$local_part_data" in TESTS_BOX
    assert "/var/mail" not in TESTS_BOX  # the tests' mail never reaches the users' mailboxes
    for name, under in (("spool_directory", "spool"), ("log_file_path", "log/%slog"),
                        ("pid_file_path", "spool/exim-daemon.pid")):
        assert setting(USERS_BOX, name) == f"/var/lib/dsportal/exim4/{under}"
        assert setting(TESTS_BOX, name) == f"/var/tmp/dsportal-test/exim4/{under}"
    assert "/var/spool/exim4" not in USERS_BOX + TESTS_BOX and "/var/log/exim4" not in USERS_BOX + TESTS_BOX


def test_only_the_demo_domain_and_this_machine_are_local_and_every_other_domain_is_refused():
    assert "domainlist local_domains = @ : localhost : dsportal.local\n" in USERS_BOX
    acl = USERS_BOX.split("acl_check_rcpt:\n", 1)[1].split("begin routers", 1)[0]
    assert acl.lstrip().startswith("deny ") and "!domains = +local_domains" in acl
    # One router, the local user's, and no transport that could send anything off the machine.
    assert USERS_BOX.count("driver = ") == 2 and "driver = accept" in USERS_BOX and "driver = appendfile" in USERS_BOX
    assert "check_local_user" in USERS_BOX and "never_users = root" in USERS_BOX


def test_mailboxes_are_written_as_debian_writes_var_mail():
    transport = USERS_BOX.split("mailbox:\n", 1)[1].split("begin retry", 1)[0]
    assert "group = mail" in transport and "mode = 0660" in transport


@pytest.mark.parametrize(("state", "mail_dir", "words"), [
    ("/var/lib/dsportal", "/var/tmp/my mail", "box_mail_dir is '/var/tmp/my mail'; allowed for the box's exim4: an "
     "absolute path"),
    ("/var/lib/dsportal", "/var/$mail", "box_mail_dir is '/var/$mail'"),
    ("/var/lib/dsportal", "mail", "box_mail_dir is 'mail'"),
    ("/var/lib/ds:portal", "/var/mail", "state_dir is '/var/lib/ds:portal'"),
])
def test_a_path_that_exim_would_read_as_syntax_is_refused_naming_its_setting(state, mail_dir, words):
    with pytest.raises(BoxError, match="^" + words.replace("$", r"\$")):
        exim_config(2525, Path(state), Path(mail_dir))


def test_the_real_list_is_debians_trusted_config_list():
    assert TRUSTED_CONFIGS == Path("/etc/exim4/trusted_configs")


def test_a_list_the_box_makes_goes_again_with_its_last_line(tmp_path):
    listed, users, tests = tmp_path / "trusted_configs", Path("/var/lib/dsportal/exim4/exim4.conf"), \
        Path("/var/tmp/dsportal-test/exim4/exim4.conf")
    register(users, listed)
    assert listed.read_text() == f"{MADE_BY}{users}\n"
    assert stat.S_IMODE(listed.stat().st_mode) == 0o644  # exim trusts a list that only root can write
    register(users, listed)  # `up` again, or after a crash that left the line
    register(tests, listed)
    assert listed.read_text() == f"{MADE_BY}{users}\n{tests}\n"
    unregister(users, listed)
    assert listed.read_text() == f"{MADE_BY}{tests}\n"  # the other box's line stays
    unregister(tests, listed)
    assert not listed.exists()
    unregister(tests, listed)  # `down` of a box that is down already
    assert not listed.exists() and [p.name for p in tmp_path.iterdir()] == []


def test_a_sites_own_list_is_left_as_it_was_found(tmp_path):
    listed, conf = tmp_path / "trusted_configs", Path("/var/lib/dsportal/exim4/exim4.conf")
    site = "# the site's own\n/etc/exim4/other.conf\n"
    listed.write_text(site)
    os.chmod(listed, 0o600)
    register(conf, listed)
    assert listed.read_text() == f"{site}{conf}\n" and stat.S_IMODE(listed.stat().st_mode) == 0o600
    unregister(conf, listed)
    assert listed.read_text() == site
    listed.write_text("")
    register(conf, listed)
    unregister(conf, listed)
    assert listed.exists() and listed.read_text() == ""  # empty, but the site's: not removed


def test_only_the_boxs_exact_line_is_removed():
    conf = Path("/var/lib/dsportal/exim4/exim4.conf")
    text = f"{MADE_BY}{conf}.old\n{conf}\n/x{conf}\n"
    assert without_line(text, conf) == f"{MADE_BY}{conf}.old\n/x{conf}\n"
    assert with_line("/etc/exim4/other.conf", conf) == f"/etc/exim4/other.conf\n{conf}\n"  # no newline at its end


def test_a_configuration_others_could_change_is_refused(tmp_path, root_only):
    conf = tmp_path / "exim4" / "exim4.conf"
    conf.parent.mkdir()
    conf.write_text("")
    check_root_only(conf)
    os.chmod(conf.parent, 0o775)
    with pytest.raises(BoxError, match=f"^{conf.parent} is owned by uid 0, mode 775: exim4 runs {conf} as root"):
        check_root_only(conf)


def test_a_mail_dir_the_box_makes_is_as_var_mail_and_one_deliveries_cannot_write_is_refused(tmp_path, root_only):
    made = tmp_path / "mail"
    ensure_mail_dir(made)
    info = made.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, grp.getgrnam("mail").gr_gid, 0o2775)
    plain = tmp_path / "plain"
    plain.mkdir(mode=0o755)
    with pytest.raises(BoxError, match=f"^box_mail_dir {plain} is group 0, mode 755: deliveries"):
        ensure_mail_dir(plain)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o755  # one that exists is left as it is


def test_down_on_a_machine_without_exim_has_nothing_to_remove(tmp_path):
    unregister(Path("/var/lib/dsportal/exim4/exim4.conf"), tmp_path / "no-exim4" / "trusted_configs")
    assert list(tmp_path.iterdir()) == []
