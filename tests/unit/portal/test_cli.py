"""portal.cli: how an expected failure ends a command line, and that any other one keeps its traceback."""

import pytest

from portal.cli import run_reporting
from portal.config import ConfigError


def fail(error: Exception):
    def work() -> None:
        raise error
    return work


def test_done_is_0_and_an_expected_error_is_one_line_with_the_program_and_its_status(capsys):
    assert run_reporting("demo data", lambda: print("made"), ConfigError) == 0
    assert capsys.readouterr() == ("made\n", "")
    assert run_reporting("portal.service", fail(ConfigError("hub_port is 0; allowed: 1-65535")), ConfigError,
                         status=2) == 2
    assert capsys.readouterr() == ("", "portal.service: hub_port is 0; allowed: 1-65535\n")
    assert run_reporting("box.py up", fail(OSError("disk full")), (ConfigError, OSError)) == 1


def test_an_unexpected_error_is_not_swallowed():
    with pytest.raises(KeyError):
        run_reporting("demo data", fail(KeyError("bug")), ConfigError)
